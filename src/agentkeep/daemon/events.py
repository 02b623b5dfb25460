"""Directory watches, whichever kind (watchdog's observer or the one inotify
instance): what they do (DirWatches), the event kinds asked for, and the
sink they go to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

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


class DirWatches(Protocol):
    """Non-recursive watches on single directories, events to a sink."""

    def start(self) -> None: ...

    def stop(self, timeout: float = 1.0) -> None: ...

    def add(self, path: Path) -> None:
        """Watch `path`; OSError when it cannot be (ENOSPC, ENOENT, ...)."""

    def remove(self, path: Path) -> None: ...

    def wait(self) -> str:
        """Block until the watching stops (stop(), or a thread that ended);
        why it did."""
        ...


# Makes the watches, given where events go and what to call when events
# were lost.
WatchesFactory = Callable[[Sink, Callable[[], None]], DirWatches]
