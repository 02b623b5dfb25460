"""Directory watches, whichever kind (watchdog's observer or the one inotify
instance): what they do, and the sink their events go to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from watchdog.events import FileSystemEvent

# Where the watches deliver their events (the watcher's queue).
Sink = Callable[[FileSystemEvent], None]


class DirWatches(Protocol):
    """Non-recursive watches on single directories, events to a sink."""

    def start(self) -> None:
        """Start delivering events."""

    def stop(self, timeout: float = 1.0) -> None:
        """Stop watching, waiting at most `timeout` for the threads."""

    def add(self, path: Path) -> None:
        """Watch `path`; OSError when it cannot be (ENOSPC, ENOENT, ...)."""

    def remove(self, path: Path) -> None:
        """Stop watching `path`."""

    def wait(self) -> str:
        """Block until the watching stops (stop(), or a thread that ended);
        why it did."""
        ...


# Makes the watches, given the sink and what to call when events were lost.
WatchesFactory = Callable[[Sink, Callable[[], None]], DirWatches]
