"""What directory watches deliver, whichever kind (watchdog's observer or
the one inotify instance): the event kinds asked for, and the sink they go to."""

from __future__ import annotations

from collections.abc import Callable

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
)

# Only changes to entries: opens, reads and closes never reach us, so the
# daemon's own reads cannot make events of their own.
EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]

# Where the watches deliver their events (the watcher's queue).
Sink = Callable[[FileSystemEvent], None]
