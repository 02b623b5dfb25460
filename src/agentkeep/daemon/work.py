"""The daemon's own work: its scheduled jobs (the prune, the reconcile,
polling unwatched roots, the trash), the refresh a watch event asks for, and
the reconcile after a flood of events. Work is counted while it runs
(`working`), the socket's answers too: the daemon waits for it when it stops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from agentkeep.core import indexing
from agentkeep.core.context import Context
from agentkeep.daemon import child, memory
from agentkeep.daemon.changes import Changes
from agentkeep.daemon.watch import Watcher
from agentkeep.errors import Failure
from agentkeep.prune.lock import PrunerLock

log = structlog.get_logger("agentkeep.daemon")

# How often a scheduled prune that waits for the prune lock looks again.
LOCK_POLL = 1.0


class Work:
    """What the daemon does besides answering, and the count of what runs.
    `ctx` and `watcher` are set as the daemon starts; `reread` reads the
    config again, `poke` has the status line sent again, `trash_soon` has
    the trash job run now."""

    def __init__(
        self,
        changes: Changes,
        reread: Callable[[], None],
        poke: Callable[[], None],
        trash_soon: Callable[[], None],
    ) -> None:
        self.ctx: Context | None = None
        self.watcher: Watcher | None = None
        self.changes = changes
        self._reread = reread
        self._poke = poke
        self._trash_soon = trash_soon
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._reconcile_lock = threading.Lock()

    @property
    def busy(self) -> int:
        """How much work runs now."""
        return self._busy

    @contextmanager
    def working(self) -> Iterator[None]:
        """Count what runs inside."""
        with self._busy_lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._busy_lock:
                self._busy -= 1

    def in_child(
        self,
        method: str,
        params: dict[str, Any],
        asked_by: int | None = None,
        *,
        answer: bool = True,
    ) -> child.Done:
        """child.run, the watcher's events held meanwhile (Watcher.held)."""
        assert self.ctx is not None and self.watcher is not None
        with self.watcher.held():
            return child.run(self.ctx, method, params, asked_by, answer=answer)

    def refresh(self, agent: str, session_ids: list[str], vanished: set[str]) -> None:
        """The sessions a watch event named, listed again."""
        assert self.ctx is not None
        try:
            indexing.relist(self.ctx, agent, session_ids, vanished)
        finally:
            memory.give_back()  # listing many again read their shared directories
            self.changes.bump()

    def at_start(self) -> int:
        """The index brought up to date before the daemon serves; how many
        sessions were listed again."""
        assert self.ctx is not None
        with self._reconcile_lock:
            return indexing.reconcile(self.ctx)

    def prune(self) -> None:
        """The scheduled prune. A turn that finds the prune lock held (the
        CLI prunes, or the prune of a daemon killed meanwhile still ends)
        waits until it is free and runs then: skipped, it would wait a
        whole prune_interval."""
        assert self.ctx is not None
        while True:
            self._reread()  # a prune that will not run starts no process
            if not self.ctx.prunes_on_schedule():
                log.info("scheduled prune skipped (no retention, or a bad config)")
                return
            if not self._prune_lock_waited():
                return  # the daemon stops
            done = self._scheduled_prune()
            if done is None:
                return
            if done.counts is not None:
                log.info("scheduled prune done", **done.counts)
                self.after_removal("prune", {})
                return
            if self._prune_lock_free():
                log.info("scheduled prune skipped (no retention, bad config, or a prune just ran)")
                return
            # Another prune took the lock first: this turn waits again.

    def _scheduled_prune(self) -> child.Done | None:
        """The prune in the daemon's child; None when it failed (logged)."""
        assert self.ctx is not None
        with self.working():
            try:
                return self.in_child("prune", {"scheduled": True}, answer=False)
            except child.Stopped:
                log.info("scheduled prune stopped: the daemon is stopping")
            except Failure as exc:
                log.error("scheduled prune refused", error=exc.message)
            except Exception:
                log.exception("scheduled prune failed")
            finally:
                self.changes.bump()
                memory.give_back()
        return None

    def _prune_lock_waited(self) -> bool:
        """Wait until no prune holds the prune lock (looking every
        LOCK_POLL seconds); False when the daemon stops first. Not counted
        as work: a stop does not wait for it."""
        from agentkeep.prune.act import STOP  # here: serving alone never imports the act

        if self._prune_lock_free():
            return True
        log.info("another prune holds the prune lock: the scheduled prune waits for it")
        while not STOP.wait(LOCK_POLL):
            if self._prune_lock_free():
                return True
        return False

    def _prune_lock_free(self) -> bool:
        """Whether the prune lock is free now (taken and let go). One that
        cannot be taken at all counts as free: the prune says why."""
        assert self.ctx is not None
        lock = PrunerLock(self.ctx.state_dir)
        try:
            free = lock.acquire(wait=False)
        except Failure:
            return True
        lock.release()
        return free

    def reconcile(self) -> None:
        """The periodic reconcile, watches planned again."""
        self._reconcile(replan=True)

    def poll(self) -> None:
        """The reconcile of polling roots, when some root polls."""
        if self.watcher is not None and self.watcher.polling:
            self._reconcile(replan=False)

    def after_a_flood(self) -> None:
        """The watcher dropped events: a reconcile in the daemon's child finds
        what they said, after any running (it may have looked before them)."""
        self._reconcile(replan=True, flood=True)

    def _reconcile(self, *, replan: bool, flood: bool = False) -> None:
        """One running covers this turn, unless this one is a flood's."""
        assert self.ctx is not None and self.watcher is not None
        if not self._reconcile_lock.acquire(blocking=flood):
            return
        try:
            with self.working():
                if replan:
                    self.watcher.resync(replan=True)
                if flood:
                    answer = self.in_child("reconcile", {}).answer
                    relisted = int(answer.text) if answer is not None else 0
                else:
                    relisted = indexing.reconcile(self.ctx)
                log.info("reconciled", relisted=relisted)
                if relisted:
                    self.changes.bump()
        except child.Stopped:
            log.info("reconcile stopped: the daemon is stopping")
        except Exception:
            log.exception("reconcile failed")
        finally:
            self._reconcile_lock.release()
            memory.give_back()
            self._poke()  # a root may have fallen back to polling, or come back

    def expire_trash(self) -> None:
        """Hourly, and after a prune or purge: the trash's expiry, then the
        compression of what waits."""
        from agentkeep.core import trashcan  # here: it imports the act, serving alone never does

        assert self.ctx is not None
        with self.working():
            try:
                trashcan.expire_trash(self.ctx)
                done = trashcan.compress_trash(self.ctx.state_dir)
                if done["compressed"]:
                    log.info("trash compressed", **done)
            except Exception:
                log.exception("trash expiry or compression failed")
            finally:
                self.changes.bump()

    def after_removal(self, method: str, params: dict[str, Any]) -> None:
        """After a prune or purge: the trash job runs now, in its own thread."""
        if method in ("prune", "purge") and not params.get("dry_run"):
            self._trash_soon()
