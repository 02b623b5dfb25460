"""Watching the directories that name sessions, within the inotify budget.

Only the directories an adapter says name sessions are watched, each
non-recursively (watches are a per-user budget shared with every editor). A
directory not there yet is waited for on its nearest existing parent; when a
watched directory gains, loses or renames a subdirectory, the watches follow.
A root over the free budget, or whose watch fails, is left to the periodic
reconcile ("polling"), and status says so.

The watching is watched (invariant 12): events the kernel dropped make the
watcher reconcile, as a flood does; a reader thread that ends is replaced,
then a reconcile; after RESTARTS_MAX ends within RESTART_WINDOW every root
polls, and status says why.

Events are debounced and mapped to sessions, an agent's at a time; handlers
are idempotent (duplicate and out-of-order events are normal). SQLite's
-wal/-shm/-journal files are ignored: a read-only open may create them.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog
from watchdog.events import FileSystemEvent

from agentkeep import fsio
from agentkeep.adapters.base import Adapter
from agentkeep.daemon.events import DirWatches, WatchesFactory
from agentkeep.daemon.observer import native_watches
from agentkeep.watchplan import (
    INOTIFY,
    MIXED,
    POLLING,
    RESERVE_FRACTION,
    RootWatch,
    group_by_root,
    inotify_budget,
    plan,
)

log = structlog.get_logger("agentkeep.daemon.watch")

DEBOUNCE = 0.2
# A file written without pause (a transcript mid-answer) still reaches the
# index this often.
DEBOUNCE_MAX = 1.0
# Paths waiting at most: past this many (a flood) they are dropped, and a
# reconcile finds what they said from the disk instead.
PENDING_MAX = 20_000
_IGNORED_SUFFIXES = ("-wal", "-shm", "-journal")
RESTARTS_MAX = 3
RESTART_WINDOW = 3600.0


class Watcher:
    """The watches, the roots they serve, and the debounced event worker."""

    def __init__(
        self,
        adapters: Callable[[], dict[str, Adapter]],
        on_sessions: Callable[[str, list[str], set[str]], None],
        *,
        on_flood: Callable[[], None] = lambda: None,
        budget: Callable[[], tuple[int, int] | None] = inotify_budget,
        watches: WatchesFactory = native_watches,
    ) -> None:
        self._adapters = adapters
        self._read_budget = budget
        self._on_sessions = on_sessions
        self._on_flood = on_flood
        self._lock = threading.RLock()
        # What self._dirs holds: added, and not removed since.
        self._watches: set[Path] = set()
        self._groups: list[RootWatch] = []
        # Every wanted dir, and every dir on the way to one (read by the
        # thread that delivers events, replaced whole by resync).
        self._wanted: tuple[frozenset[Path], frozenset[Path]] = (frozenset(), frozenset())
        self._failed: dict[Path, str] = {}
        self._available: int | None = None
        self._pending: set[str] = set()
        self._pending_dirs = False
        # Paths were dropped (PENDING_MAX): a reconcile is owed.
        self._flooded = False
        self._holds = 0
        self._generation = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._worker = threading.Thread(target=self._work, name="agentkeep-watch", daemon=True)
        self._make_watches = watches
        self._dirs = watches(self.queue, self.lost)
        # When the watching last ended by itself, and why (status says so).
        self._ends: list[float] = []
        self._ended: str | None = None
        # Why every root polls, once the watching kept ending.
        self._given_up: str | None = None

    def start(self) -> None:
        """Start the watches, their monitor and the event worker."""
        self._dirs.start()
        self._monitor(self._dirs)
        self._worker.start()
        self.resync(replan=True)

    def _monitor(self, dirs: DirWatches) -> None:
        """A thread that waits for `dirs` to end (no timer)."""

        def wait() -> None:
            why = dirs.wait()
            with self._wake:
                if self._stopping or dirs is not self._dirs:
                    return
            self._watch_again(why)

        threading.Thread(target=wait, name="agentkeep-watch-monitor", daemon=True).start()

    def _watch_again(self, why: str) -> None:
        """The watching ended by itself: watch everything again on new
        watches, then reconcile what went unseen meanwhile; past
        RESTARTS_MAX ends in RESTART_WINDOW, every root polls instead."""
        now = time.monotonic()
        with self._lock:
            self._ends = [t for t in self._ends if now - t < RESTART_WINDOW] + [now]
            times = len(self._ends)
            self._ended = f"{why} ({times} time{'s' if times > 1 else ''} in the last hour)"
            self._watches.clear()  # they went with the watching that ended
            self._dirs.stop(timeout=1)
            self._dirs = self._make_watches(self.queue, self.lost)
            if times > RESTARTS_MAX:
                log.error("the watching keeps ending; every root polls", why=why, times=times)
                self._given_up = self._ended
            else:
                log.error("the watching ended; watching again", why=why, times=times)
                self._dirs.start()
                self._monitor(self._dirs)
        self.resync(replan=True)
        self.lost()

    def lost(self) -> None:
        """Events were lost (the kernel's queue overflowed, or the watching
        was replaced): a reconcile looks at the disk instead."""
        with self._wake:
            self._pending.clear()
            self._flooded = True
            self._wake.notify_all()

    def stop(self) -> None:
        """Stop watching and the worker, within about 2 seconds."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        self._dirs.stop(timeout=1)
        self._worker.join(timeout=1)

    @property
    def polling(self) -> bool:
        """Whether some root polls."""
        with self._lock:
            return any(g.mode == POLLING for g in self._groups)

    def status(self) -> dict[str, object]:
        """The `watch` of `status`, with why the watching ended lately."""
        with self._lock:
            modes = {g.mode for g in self._groups}
            mode = MIXED if len(modes) > 1 else (modes.pop() if modes else INOTIFY)
            return {
                "mode": mode,
                "roots": [g.as_json() for g in self._groups],
                "ended": self._ended,
            }

    def resync(self, *, replan: bool = False) -> set[Path]:
        """Hold exactly the watches the adapters want; the directories newly
        watched. `replan` reads the budget afresh and gives polling roots
        another chance."""
        with self._lock:
            if replan:
                self._failed.clear()
                self._available = self._budget()
            before = set(self._watches)
            groups = self._wanted_groups()
            plan(groups, self._available)
            while not self._apply(groups):
                pass
            self._groups = groups
            wanted = {d for g in groups for d in g.wanted}
            self._wanted = (frozenset(wanted), frozenset(a for d in wanted for a in d.parents))
            added = set(self._watches) - before
            polling = [str(g.path) for g in groups if g.mode == POLLING]
        if added or replan:
            log.info("watching", watches=len(self._watches), polling=polling)
        return added

    def _wanted_groups(self) -> list[RootWatch]:
        groups: list[RootWatch] = []
        for agent, adapter in self._adapters().items():
            try:
                groups.extend(group_by_root(agent, adapter))
            except Exception as exc:
                # One adapter's bad day must not stop the others being watched.
                log.warning("watch dirs unavailable", agent=agent, error=str(exc))
        for group in groups:
            if self._given_up is not None:
                group.mode, group.reason = POLLING, self._given_up
            elif group.path in self._failed:
                group.mode, group.reason = POLLING, self._failed[group.path]
        return groups

    def _budget(self) -> int | None:
        budget = self._read_budget()
        if budget is None:
            return None
        limit, used = budget
        # Our own current watches are counted in `used` but are ours to re-plan.
        return max(0, limit - used + len(self._watches) - int(limit * RESERVE_FRACTION))

    def _apply(self, groups: list[RootWatch]) -> bool:
        """Schedule what is wanted, unschedule the rest. False when a watch
        failed (its root is now polling and the wanted set changed)."""
        wanted = {t for g in groups if g.mode == INOTIFY for t in g.targets}
        for path in set(self._watches) - wanted:
            self._watches.discard(path)
            self._dirs.remove(path)
        for group in groups:
            if group.mode != INOTIFY:
                continue
            for target in sorted(group.targets - set(self._watches)):
                problem = self._schedule(target)
                if problem is not None:
                    group.mode, group.reason = POLLING, problem
                    self._failed[group.path] = problem
                    return False
        return True

    def _schedule(self, path: Path) -> str | None:
        try:
            self._dirs.add(path)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None  # gone since planned: its parent's event brings a resync
            log.warning("cannot watch; falling back to polling", path=str(path), error=str(exc))
            if exc.errno == errno.ENOSPC:
                return f"inotify watch limit reached at {path}"
            return f"cannot watch {path}: {exc.strerror or exc}"
        self._watches.add(path)
        return None

    @contextmanager
    def held(self) -> Iterator[None]:
        """Events wait while held: around the work the daemon runs in its
        child, which keeps the index up to date for what it touches (listing
        it again here would only hold the shared directories' listings)."""
        with self._wake:
            self._holds += 1
        try:
            yield
        finally:
            with self._wake:
                self._holds -= 1
                self._wake.notify_all()

    def queue(self, event: FileSystemEvent) -> None:
        """Take one event (the sink of the watches)."""
        paths = [os.fsdecode(event.src_path)]
        if event.dest_path:
            paths.append(os.fsdecode(event.dest_path))
        paths = [p for p in paths if not p.endswith(_IGNORED_SUFFIXES)]
        resync = event.is_directory and any(self._shapes_watches(Path(p)) for p in paths)
        with self._wake:
            self._pending.update(paths)
            if len(self._pending) > PENDING_MAX:
                if not self._flooded:
                    log.info("a flood of events: a reconcile will look instead")
                self._pending.clear()
                self._flooded = True
            self._pending_dirs |= resync
            self._generation += 1
            self._wake.notify_all()

    def _shapes_watches(self, directory: Path) -> bool:
        """A directory that came, went or moved changes what is watched when
        it is (or leads to) a wanted one, or lies in one; others (say under a
        busy /tmp, watched to see claude-<uid> appear) do not."""
        wanted, leading = self._wanted
        return directory in wanted or directory.parent in wanted or directory in leading

    def _work(self) -> None:
        while True:
            batch, dirs, flooded = self._next_batch()
            if batch is None:
                return
            if flooded:
                # Watches included: the reconcile plans them again.
                try:
                    self._on_flood()
                except Exception:
                    log.exception("reconcile after a flood of events failed")
                continue
            if dirs:
                try:
                    added = self.resync()
                except Exception:
                    log.exception("resync failed")
                    added = set()
                # What was written into a directory before its watch existed
                # made no event: look at what is there now (atimes unmoved).
                batch.update(path for d in added for path in fsio.entry_paths(d))
            self._apply_events(batch)

    def _next_batch(self) -> tuple[set[str] | None, bool, bool]:
        """Wait for events, then for DEBOUNCE of quiet (at most DEBOUNCE_MAX),
        and for no hold: (paths, a directory came or went, paths dropped)."""
        with self._wake:
            while not (self._stopping or self._due()):
                self._wake.wait()
            started = time.monotonic()
            while not self._stopping:
                generation = self._generation
                self._wake.wait(DEBOUNCE)
                quiet = generation == self._generation
                if quiet or time.monotonic() - started > DEBOUNCE_MAX:
                    break
            if self._stopping:
                return None, False, False
            batch, dirs, flooded = self._pending, self._pending_dirs, self._flooded
            self._pending, self._pending_dirs, self._flooded = set(), False, False
            return batch, dirs, flooded

    def _due(self) -> bool:
        """Something to do, and no hold (called under self._wake)."""
        return not self._holds and bool(self._pending or self._pending_dirs or self._flooded)

    def _apply_events(self, paths: set[str]) -> None:
        """Each agent's sessions named by `paths`, handed over with those of
        them whose every named path is gone (removed, most likely whole)."""
        for agent, adapter in self._adapters().items():
            there: dict[str, bool] = {}
            for path in paths:
                try:
                    session_id = adapter.session_for_path(path)
                except Exception as exc:
                    log.warning("event not mapped", agent=agent, path=path, error=str(exc))
                    continue
                if session_id is not None and not there.get(session_id):
                    there[session_id] = os.path.lexists(path)
            if not there:
                continue
            vanished = {sid for sid, found in there.items() if not found}
            try:
                self._on_sessions(agent, sorted(there), vanished)
            except Exception:
                log.exception("refresh failed", agent=agent, sessions=sorted(there))
