"""Which directory watches a daemon uses: on Linux every directory shares
one inotify instance and one reader thread (`inotify.InotifyWatches`);
elsewhere each is scheduled on watchdog's ordinary observer (FSEvents,
kqueue), which is `ObserverWatches`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import structlog
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.utils import UnsupportedLibcError

from agentkeep.daemon.events import EVENTS, DirWatches, Sink

log = structlog.get_logger("agentkeep.daemon.watch")


class ObserverWatches:
    """Each directory scheduled on watchdog's own observer: FSEvents or
    kqueue on macOS. On Linux that costs a thread per directory, so it is
    used there only where libc has no inotify (and by tests)."""

    def __init__(
        self,
        sink: Sink,
        on_lost: Callable[[], None] = lambda: None,
        observer: BaseObserver | None = None,
    ) -> None:
        # watchdog's own emitters deal with their queues' overflows.
        del on_lost
        self._observer = observer or Observer()
        self._handler = _Handler(sink)
        self._watches: dict[Path, ObservedWatch] = {}

    def start(self) -> None:
        self._observer.start()

    def stop(self, timeout: float = 1.0) -> None:
        self._observer.stop()
        self._observer.join(timeout)

    def add(self, path: Path) -> None:
        self._watches[path] = self._observer.schedule(
            self._handler,
            str(path),
            recursive=False,
            event_filter=EVENTS,
            # A linked folder is watched itself, not its link; watching
            # only reads, and events are named by the path as given.
            follow_symlink=True,
        )

    def remove(self, path: Path) -> None:
        watch = self._watches.pop(path, None)
        if watch is None:
            return
        try:
            self._observer.unschedule(watch)
        except (KeyError, OSError) as exc:
            log.debug("unschedule failed", path=str(path), error=str(exc))

    def wait(self) -> str:
        self._observer.join()
        return "watchdog's observer thread ended"


def native_watches(sink: Sink, on_lost: Callable[[], None]) -> DirWatches:
    """One inotify instance for every directory on Linux (watchdog's
    observer would start a thread per directory); the observer elsewhere."""
    if sys.platform.startswith("linux"):
        # Imported here: watchdog's inotify module refuses to load where
        # libc has no inotify (macOS), and then the observer decides.
        try:
            from agentkeep.daemon.inotify import InotifyWatches
        except UnsupportedLibcError:
            return ObserverWatches(sink)
        return InotifyWatches(sink, on_lost)
    return ObserverWatches(sink)


class _Handler(FileSystemEventHandler):
    def __init__(self, sink: Sink) -> None:
        self._sink = sink

    def on_any_event(self, event: FileSystemEvent) -> None:
        self._sink(event)
