"""Every watched directory on one inotify instance and one reader thread.

watchdog's observer gives each watch an emitter thread of its own; the
daemon watches a directory per Claude project and Codex date dir, so the
thread count would grow with the sessions. Here the directories are
registered on one watchdog `InotifyFD` through its callback API
(`add_callback`, `remove_callbacks`, the `WatchCallback` protocol of
watchdog 7.1, not part of its documented API: tests/test_daemon_inotify.py
holds each to the version installed), whose single reader thread turns
kernel events into watchdog events for the sink. Moves are not paired: the
watcher wants both paths, and either alone says enough.

Neither failure goes unnoticed (invariant 12): a queue overflow calls
`on_lost` once (the watcher reconciles), and a reader thread that ends
makes `wait()` return why (the watcher watches again).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import structlog
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileSystemEvent,
)
from watchdog.observers.inotify_c import (
    CallbackId,
    InotifyConstants,
    InotifyEvent,
    InotifyFD,
    Mask,
    WatchDescriptor,
)

from agentkeep.daemon.events import Sink

log = structlog.get_logger("agentkeep.daemon.inotify")

# No IN_DONT_FOLLOW: a linked directory is watched itself. No IN_ATTRIB,
# IN_OPEN, IN_CLOSE_*: reads (the daemon's own too) never wake the reader.
MASK = Mask(
    InotifyConstants.IN_CREATE
    | InotifyConstants.IN_DELETE
    | InotifyConstants.IN_MODIFY
    | InotifyConstants.IN_MOVED_FROM
    | InotifyConstants.IN_MOVED_TO
    | InotifyConstants.IN_DELETE_SELF
)


class InotifyWatches:
    """Non-recursive watches on many directories: one inotify fd, one thread.
    add() and remove() come from one thread at a time (the watcher's lock)."""

    def __init__(self, sink: Sink, on_lost: Callable[[], None]) -> None:
        self._sink = sink
        self._on_lost = on_lost
        self._fd: InotifyFD | None = None
        self._unavailable: OSError | None = None
        self._dirs: dict[Path, _Directory] = {}
        # Watchdog tells every callback of an overflow; the watcher wants one call.
        self._overflowed = False

    def start(self) -> None:
        """Open the inotify instance and start its reader."""
        try:
            fd = InotifyFD()
        except OSError as exc:
            # Every add() fails with this: each root polls and says why.
            log.warning("no inotify instance; every root polls", error=str(exc))
            self._unavailable = exc
            return
        fd.start()
        self._fd = fd

    def stop(self, timeout: float = 1.0) -> None:
        """Remove every watch and end the reader."""
        if self._fd is None:
            return
        self._fd.stop()
        self._fd.join(timeout)

    def wait(self) -> str:
        """Block until the reader thread ends; why it did."""
        if self._fd is None:
            return f"no inotify instance: {self._unavailable}"
        self._fd.join()
        return "the inotify reader thread ended"

    def add(self, path: Path) -> None:
        """Watch `path` (not its subdirectories); OSError when it cannot be."""
        fd = self._fd
        if fd is None:
            raise self._unavailable or OSError(errno.EBADF, "inotify not started")
        directory = _Directory(os.fspath(path), self)
        wd = fd.add_callback(os.fsencode(path), MASK, directory, directory.id)
        if wd < 0:
            # watchdog returns -1 for EACCES: undo its book-keeping, and fail.
            fd.remove_callbacks([(wd, directory.id)])
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        directory.wd = wd
        self._dirs[path] = directory

    def remove(self, path: Path) -> None:
        """Stop watching `path`."""
        directory = self._dirs.pop(path, None)
        if directory is None or self._fd is None:
            return
        # A deleted directory's watch is gone in the kernel already (watchdog
        # skips it quietly); watch descriptors are allocated cyclically, so a
        # stale one never names another directory's watch.
        try:
            self._fd.remove_callbacks([(directory.wd, directory.id)])
        except OSError as exc:
            log.debug("unwatch failed", path=str(path), error=str(exc))

    def deliver(self, event: FileSystemEvent) -> None:
        """Hand an event to the sink; should it raise, watchdog would end the
        reader thread: the events are counted lost instead."""
        try:
            self._sink(event)
        except Exception:
            log.exception("an event could not be queued; counting events lost")
            self._on_lost()

    def overflowed(self) -> None:
        """The kernel's queue overflowed (told to every callback)."""
        self._overflowed = True

    def lost(self) -> None:
        """Events were lost: the watcher is told once per overflow."""
        if self._overflowed:
            self._overflowed = False
            log.warning("the inotify queue overflowed: events were lost")
            self._on_lost()


class _Directory:
    """One watched directory: a watchdog `WatchCallback` that names events by
    the path as given (a link's path, not its target's)."""

    __slots__ = ("path", "watches", "id", "wd")

    def __init__(self, path: str, watches: InotifyWatches) -> None:
        self.path = path
        self.watches = watches
        # Unique per directory, so two paths to one inode (a link and its
        # target, both wanted) share the kernel watch and each gets events.
        self.id = CallbackId(id(self))
        self.wd = WatchDescriptor(-1)

    def on_event(self, event: InotifyEvent) -> None:
        """An event in (or of) this directory, as a watchdog event."""
        converted = _convert(self.path, event)
        if converted is not None:
            self.watches.deliver(converted)

    def on_watch_deleted(self, wd: WatchDescriptor) -> None:
        """The directory is gone (or the fd closed): its parent's event, or
        its own DELETE_SELF, makes the watcher resync and drop it."""

    def on_queue_overflow(self) -> None:
        """The kernel dropped events (then on_events_lost follows)."""
        self.watches.overflowed()

    def on_events_lost(self) -> None:
        """The watcher reconciles; the watches themselves still stand."""
        self.watches.lost()


def _convert(directory: str, event: InotifyEvent) -> FileSystemEvent | None:
    if event.is_delete_self:
        return DirDeletedEvent(directory)
    if not event.name:
        return None  # IN_IGNORED, IN_UNMOUNT: nothing about an entry
    path = os.path.join(directory, os.fsdecode(event.name))
    if event.is_create or event.is_moved_to:
        return DirCreatedEvent(path) if event.is_directory else FileCreatedEvent(path)
    if event.is_delete or event.is_moved_from:
        return DirDeletedEvent(path) if event.is_directory else FileDeletedEvent(path)
    if event.is_modify and not event.is_directory:
        return FileModifiedEvent(path)
    return None
