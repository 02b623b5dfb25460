"""Which directory watches a daemon uses: on Linux one inotify instance and
one reader thread for all (inotify.py), elsewhere watchdog's own observer
(FSEvents, kqueue)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import structlog
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch
from watchdog.utils import UnsupportedLibcError

from agentkeep.daemon.events import DirWatches, Sink

log = structlog.get_logger("agentkeep.daemon.watch")

# Only changes to entries: opens, reads and closes never reach us, so the
# daemon's own reads cannot make events of their own.
_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]


class ObserverWatches(FileSystemEventHandler):
    """Each directory scheduled on watchdog's own observer (on Linux a thread
    per directory: used there only where libc has no inotify)."""

    def __init__(self, sink: Sink, on_lost: Callable[[], None] = lambda: None) -> None:
        del on_lost  # watchdog's own emitters deal with their queues' overflows
        self._observer = Observer()
        self._sink = sink
        self._watches: dict[Path, ObservedWatch] = {}

    def start(self) -> None:
        """Start the observer."""
        self._observer.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the observer."""
        self._observer.stop()
        self._observer.join(timeout)

    def add(self, path: Path) -> None:
        """Watch `path` (not its subdirectories)."""
        self._watches[path] = self._observer.schedule(
            self,
            str(path),
            recursive=False,
            event_filter=_EVENTS,
            # A linked folder is watched itself, not its link; watching
            # only reads, and events are named by the path as given.
            follow_symlink=True,
        )

    def remove(self, path: Path) -> None:
        """Stop watching `path`."""
        watch = self._watches.pop(path, None)
        if watch is None:
            return
        try:
            self._observer.unschedule(watch)
        except (KeyError, OSError) as exc:
            log.debug("unschedule failed", path=str(path), error=str(exc))

    def wait(self) -> str:
        """Block until the observer's thread ends; why it did."""
        self._observer.join()
        return "watchdog's observer thread ended"

    def on_any_event(self, event: FileSystemEvent) -> None:
        """Every event to the sink."""
        self._sink(event)


def native_watches(sink: Sink, on_lost: Callable[[], None]) -> DirWatches:
    """One inotify instance for every directory on Linux; the observer
    elsewhere."""
    if sys.platform.startswith("linux"):
        # Imported here: watchdog's inotify module refuses to load where
        # libc has no inotify.
        try:
            from agentkeep.daemon.inotify import InotifyWatches
        except UnsupportedLibcError:
            return ObserverWatches(sink)
        return InotifyWatches(sink, on_lost)
    return ObserverWatches(sink)
