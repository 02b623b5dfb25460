"""Prune: plan which idle sessions go, then act on each under its lease.

The plan is made from a fresh listing of the disk (the disk is the truth),
the act takes each session's lease exclusively, lists it from the disk again
and checks again before anything is removed. Every session old enough to go
ends in the report: removed, kept with a reason, or failed (invariant 9).
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import structlog

from agentkeep import disk, leases, lookagain, trash
from agentkeep.adapters.base import Adapter, listing_again_is_cheaper
from agentkeep.config import MIN_RETENTION
from agentkeep.errors import RemovalError
from agentkeep.index import Index
from agentkeep.journal import Journal, JournalEntry
from agentkeep.model import Holder, Reason, Session, rfc3339
from agentkeep.processes import ProcessTable
from agentkeep.progress import Progress, Tally, estimate
from agentkeep.removal import SessionRemoval
from agentkeep.statefiles import StateFileError, read_json, read_state, remove, write_json

log = structlog.get_logger("agentkeep.prune")

# Test seams, None in production: called after a candidate's lease is taken
# and before it is listed again, so a test can write to it, fork it or hold
# it between the plan and the act.
_after_lease: Callable[[str, str], None] | None = None
_after_plan: Callable[[], None] | None = None

PROCESS_SNAPSHOT_TTL = 1.0
# Sessions checked under their leases and journaled together (one durable
# write per batch, see journal); each holds its leases until it is removed.
BATCH = 64

# Set by the daemon when it is told to stop: a run in flight finishes the
# session it is removing and keeps the rest (`capped`) for the next run.
STOP = threading.Event()


class PruneRefused(Exception):
    """The prune cannot run as asked (no cutoff, a cutoff under the floor)."""

    exit_code = 2


@dataclass
class Kept:
    agent: str
    id: str
    reason: Reason
    detail: str = ""


@dataclass
class Removed:
    agent: str
    id: str
    bytes: int
    last_activity: float | None
    paths: list[str]
    residual: list[str] = field(default_factory=list)
    # Of `bytes`, what went into the trash: still on disk until it expires.
    trashed: int = 0


@dataclass
class Failed:
    agent: str
    id: str
    reason: str


@dataclass
class PruneReport:
    cutoff: float | None
    cutoffs: dict[str, float]
    dry_run: bool
    removed: list[Removed] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    residual: list[tuple[str, str, str]] = field(default_factory=list)
    paused: str | None = None
    # When what this run moves to the trash expires (None: no trash).
    trash_until: float | None = None

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removed)

    @property
    def trashed(self) -> int:
        """Bytes moved to the trash: freed only when it expires (a dry run
        counts what it would move)."""
        if self.trash_until is None:
            return 0
        return self.bytes if self.dry_run else sum(r.trashed for r in self.removed)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "cutoff": rfc3339(self.cutoff),
            "cutoffs": {a: rfc3339(c) for a, c in sorted(self.cutoffs.items())},
            "dry_run": self.dry_run,
            "removed": [
                {
                    "agent": r.agent,
                    "id": r.id,
                    "bytes": r.bytes,
                    "last_activity": rfc3339(r.last_activity),
                    "paths": r.paths,
                }
                for r in self.removed
            ],
            "kept": [
                {"agent": k.agent, "id": k.id, "reason": k.reason.value, "detail": k.detail}
                for k in self.kept
            ],
            "failed": [{"agent": f.agent, "id": f.id, "reason": f.reason} for f in self.failed],
            "residual": [{"agent": a, "id": i, "path": p} for a, i, p in self.residual],
            # Removed sessions wait in the trash: nothing of `bytes` is
            # freed until then, but what could not go there (`freed_bytes`).
            "trash": None
            if self.trash_until is None
            else {
                "until": rfc3339(self.trash_until),
                "bytes": self.trashed,
                "freed_bytes": self.bytes - self.trashed,
            },
        }
        if self.paused:
            doc["paused"] = self.paused
        return doc

    def summary(self, now: float, scheduled: bool) -> dict[str, Any]:
        return {
            "time": rfc3339(now),
            "ts": now,
            "scheduled": scheduled,
            "removed": len(self.removed),
            "kept": len(self.kept),
            "failed": len(self.failed),
            "bytes": self.bytes,
            "trashed_bytes": self.trashed,
            "paused": self.paused,
            # What went wrong, in words (status must say why, not only how many).
            "errors": sorted({f.reason for f in self.failed})[:5],
        }


@dataclass
class PruneOptions:
    """One run. `cutoffs` names every agent considered and its cutoff;
    `purge` names the sessions a person asked for (ignoring age)."""

    cutoffs: dict[str, float]
    now: float
    dry_run: bool = False
    max_removals: int | None = None
    trash_for: float = 0.0
    scheduled: bool = False
    purge: list[tuple[str, str]] | None = None
    # Told of the listing, then of the act (see _Act.tell).
    progress: Progress | None = None


def check_floor(cutoffs: dict[str, float], now: float) -> None:
    """Invariant 1: nothing updated in the last 24 hours is ever pruned.
    Enforced here, inside the prune, whatever the caller checked before."""
    for agent, cutoff in cutoffs.items():
        if not math.isfinite(cutoff) or cutoff > now - MIN_RETENTION:
            raise PruneRefused(
                f"refused: the cutoff for {agent} is less than 24 hours ago; "
                "nothing updated in the last 24 hours is ever pruned"
            )


def ancestors(session_id: str, parent_of: Callable[[str], str | None]) -> Iterator[str]:
    """Every ancestor of a session, nearest first; survives cycles and
    parents that no longer exist."""
    seen = {session_id}
    current = parent_of(session_id)
    while current is not None and current not in seen:
        seen.add(current)
        yield current
        current = parent_of(current)


class DiskView:
    """One agent's sessions as last listed from the disk. A new session (a
    fork made after the plan) is a new entry in a directory that names
    sessions: its mtime changes, and the view lists what is new there."""

    def __init__(self, adapter: Adapter, sessions: list[Session]) -> None:
        self.adapter = adapter
        self._set(sessions)
        self.dirs = [os.fspath(d) for d in adapter.watch_dirs()]
        self.signatures = disk.dir_mtimes(self.dirs)
        # Entries looked at already that are no session's (a shared file).
        self._looked_at: set[str] = set()

    def _set(self, sessions: list[Session]) -> None:
        self.sessions: dict[str, Session] = {}
        self._children: dict[str, set[str]] = {}
        self._paths: set[str] = set()
        for s in sessions:
            self._put(s.id, s)

    def _put(self, session_id: str, s: Session | None) -> None:
        """`s` is what the disk now holds of `session_id` (None: nothing)."""
        old = self.sessions.pop(session_id, None)
        if old is not None:
            if old.parent is not None:
                self._children.get(old.parent, set()).discard(session_id)
            self._paths.difference_update(a.path for a in old.artifacts)
        if s is not None:
            self.sessions[session_id] = s
            if s.parent is not None:
                self._children.setdefault(s.parent, set()).add(session_id)
            self._paths.update(a.path for a in s.artifacts)

    def refresh(self) -> None:
        """List the sessions named by entries new in the directories that
        changed (and in directories new to watch, such as a new project's).
        Only what is new: on a home in use some directory changes between
        most batches, and listing the whole agent again cost a full scan of
        it each time. Past a bound (see listing_again_is_cheaper), one scan
        of the agent costs less."""
        if disk.dir_mtimes(self.dirs) == self.signatures:
            return
        # Taken before the listing: a change during it shows next time.
        dirs = [os.fspath(d) for d in self.adapter.watch_dirs()]
        signatures = disk.dir_mtimes(dirs)
        moved = [d for d in dirs if d not in self.signatures or signatures[d] != self.signatures[d]]
        unknown = [
            p
            for d in moved
            for p in disk.entry_paths(d)
            if p not in self._paths and p not in self._looked_at
        ]
        self._looked_at.update(unknown)
        if listing_again_is_cheaper(len(unknown), len(self.sessions)):
            self._set(list(self.adapter.scan()))
        else:
            named = self.adapter.sessions_named(unknown)
            for sid, s in self.adapter.load_many(sorted(named)).items():
                self._put(sid, s)
        self.dirs, self.signatures = dirs, signatures

    def settle(self, removed: list[str]) -> None:
        """After our own removal changed the mtimes of the directories that
        held what it removed (only those are looked at again)."""
        parents = {os.path.dirname(p) for p in removed} & self.signatures.keys()
        self.signatures.update(disk.dir_mtimes(parents))

    def parent_of(self, session_id: str) -> str | None:
        s = self.sessions.get(session_id)
        return s.parent if s else None

    def children(self, session_id: str) -> list[str]:
        return sorted(self._children.get(session_id, ()))


@dataclass
class _Held:
    """A planned session whose leases are held; once checked again, the
    session as listed from the disk under them."""

    session: Session
    locks: list[leases.Lease]
    # agentkeep's own lease among `locks` (a dry run may hold none).
    own: leases.Lease | None = None

    def entry(self, opts: PruneOptions) -> JournalEntry:
        s = self.session
        paths = [a.path for a in s.artifacts]
        cutoff = None if opts.purge is not None else opts.cutoffs[s.agent]
        return JournalEntry(s.agent, s.id, time.time(), paths, opts.trash_for > 0, cutoff)


def _release(locks: list[leases.Lease]) -> None:
    for lease in reversed(locks):
        lease.release()


def _parent_of_any(s: Session, batch: list[_Held], view: DiskView) -> bool:
    """Whether `s` is the parent of a session waiting in `batch`: it can only
    be checked once they are gone (the plan puts descendants first)."""
    children = set(view.children(s.id))
    return any(r.session.agent == s.agent and r.session.id in children for r in batch)


class _Act:
    """What one run's act has decided so far."""

    def __init__(
        self,
        views: dict[str, DiskView],
        opts: PruneOptions,
        report: PruneReport,
        planned: set[tuple[str, str]],
    ) -> None:
        self.views = views
        self.opts = opts
        self.report = report
        self.planned = planned
        self.kept = {(k.agent, k.id) for k in report.kept}
        self.removed: set[tuple[str, str]] = set()
        # What opts.progress is told: the planned sessions decided so far,
        # or, when max_removals stops the run first, the removals toward it
        # (a bar that counted every candidate would never get there).
        self._before = (len(report.removed), len(report.kept), len(report.failed))
        room = None if opts.max_removals is None else max(0, opts.max_removals - self._before[0])
        self._to_cap = opts.purge is None and room is not None and room < len(planned)
        self.goal = room if self._to_cap and room is not None else len(planned)
        self._what = "checking" if opts.dry_run else "pruning"

    def tell(self) -> None:
        if self.opts.progress is None:
            return
        r, (removed, kept, failed) = self.report, self._before
        done = len(r.removed) - removed
        if not self._to_cap:
            done += len(r.kept) - kept + len(r.failed) - failed
        self.opts.progress(self._what, done, self.goal)

    def removed_one(self, outcome: Removed) -> None:
        self.report.removed.append(outcome)
        self.report.residual.extend((outcome.agent, outcome.id, p) for p in outcome.residual)
        self.removed.add((outcome.agent, outcome.id))
        self.tell()

    def stay(self, outcome: Kept) -> None:
        self.report.kept.append(outcome)
        self.kept.add((outcome.agent, outcome.id))
        self._ancestors_stay(outcome.agent, outcome.id)
        self.tell()

    def fail(self, outcome: Failed, session: Session) -> None:
        self.report.failed.append(outcome)
        self._ancestors_stay(session.agent, session.id)
        self.tell()

    def _ancestors_stay(self, agent: str, sid: str) -> None:
        """A session stays: so does every ancestor still waiting in the plan
        (recent ancestors stay anyway and are not old enough to report)."""
        for parent in ancestors(sid, self.views[agent].parent_of):
            if (agent, parent) not in self.kept and (agent, parent) in self.planned:
                self.kept.add((agent, parent))
                self.report.kept.append(Kept(agent, parent, Reason.ANCESTOR, f"parent of {sid}"))


class Pruner:
    """Plans and acts for one user: one adapter per agent, the state dir."""

    def __init__(
        self,
        adapters: dict[str, Adapter],
        state_dir: Path,
        *,
        index: Index | None = None,
        pins: set[tuple[str, str]] | None = None,
    ) -> None:
        self.adapters = adapters
        self.state_dir = state_dir
        self.index = index
        self.pins = pins or set()
        self.journal = Journal(state_dir)
        self.restored = trash.restored_at(state_dir)
        self._procs: ProcessTable | None = None
        self._procs_at = 0.0

    # -- the run ----------------------------------------------------------
    def run(self, opts: PruneOptions) -> PruneReport:
        if opts.purge is None:
            check_floor(opts.cutoffs, opts.now)
        same = set(opts.cutoffs.values())
        report = PruneReport(
            cutoff=same.pop() if len(same) == 1 and opts.purge is None else None,
            cutoffs={} if opts.purge is not None else dict(opts.cutoffs),
            dry_run=opts.dry_run,
            trash_until=opts.now + opts.trash_for if opts.trash_for > 0 else None,
        )
        views = self._list_all(opts)
        if opts.scheduled:
            # A paused run changes nothing at all: not even the trash, the
            # last place a session can be had back from.
            report.paused = self._pause_reason(views, opts)
            if report.paused:
                return report
        if not opts.dry_run:
            if self._finish_journal(views, report, opts.trash_for):
                views = self._list_all(opts)
            trash.expire(self.state_dir, now=time.time())
        plan = self._plan(views, opts, report)
        if _after_plan is not None:
            _after_plan()
        self._act(plan, views, opts, report)
        if not opts.dry_run:
            self._look_again(report)
        return report

    def _look_again(self, report: PruneReport) -> None:
        """What still names a removed session, found by looking again from
        the disk, is residual (an artifact kind the adapter does not know
        shows here, never vanishes)."""
        by_agent: dict[str, list[str]] = {}
        for r in report.removed:
            by_agent.setdefault(r.agent, []).append(r.id)
        known = set(report.residual)
        for agent, ids in by_agent.items():
            for sid, what in lookagain.residual(self.adapters[agent], ids):
                if (agent, sid, what) not in known:
                    known.add((agent, sid, what))
                    report.residual.append((agent, sid, what))
                    log.warning("a removed session is still named", agent=agent, id=sid, by=what)

    def _list_all(self, opts: PruneOptions) -> dict[str, DiskView]:
        """Every agent of the run listed from the disk, told to opts.progress
        (agents with no estimate first, so that the total is known early)."""
        if opts.progress is None:
            return {agent: self._list(agent) for agent in opts.cutoffs}
        indexed = self.index.count if self.index is not None else lambda agent: 0
        estimates = {
            agent: estimate(self.adapters[agent].expected_sessions(), indexed(agent))
            for agent in opts.cutoffs
        }
        tally = Tally(opts.progress, "listing", estimates)
        views = {
            agent: self._list(agent, tally)
            for agent in sorted(opts.cutoffs, key=lambda agent: estimates[agent] is not None)
        }
        return {agent: views[agent] for agent in opts.cutoffs}

    def _list(self, agent: str, tally: Tally | None = None) -> DiskView:
        adapter = self.adapters[agent]
        sessions = []
        for session in adapter.scan():
            sessions.append(session)
            if tally is not None:
                tally.add(agent, 1)
        if tally is not None:
            tally.finish(agent)
        self._index_write(lambda i: i.replace_agent(agent, sessions, self.restored))
        return DiskView(adapter, sessions)

    def _index_write(self, write: Callable[[Index], object]) -> None:
        """The index is a cache of the disk: a write that fails (a full disk)
        is logged and the prune, which works from the disk, goes on."""
        if self.index is None:
            return
        try:
            write(self.index)
        except (sqlite3.Error, OSError) as exc:
            log.error("index not updated", index=str(self.index.path), error=str(exc))

    def _activity(self, s: Session) -> float | None:
        return s.last_activity(self.restored.get(s.key))

    def _known_activity(self, s: Session) -> float | None:
        times = [a.mtime for a in s.own_artifacts if a.mtime is not None]
        times += [t for t in (s.updated, self.restored.get(s.key)) if t is not None]
        return max(times) if times else None

    # -- the plan ---------------------------------------------------------
    def _plan(
        self, views: dict[str, DiskView], opts: PruneOptions, report: PruneReport
    ) -> list[Session]:
        """Candidates in removal order (descendants first); sessions that stay
        are already in report.kept, and so is every ancestor of one that
        stays (invariant 3)."""
        kept: dict[tuple[str, str], Kept] = {}
        candidates: list[Session] = []
        staying: list[tuple[str, str]] = []
        for agent, view in views.items():
            targets = self._targets(agent, view, opts)
            for s in view.sessions.values():
                if s.id not in targets:
                    staying.append(s.key)
                    continue
                reason = self._static_reason(s, purge=opts.purge is not None)
                if reason is None:
                    candidates.append(s)
                else:
                    kept[s.key] = reason
                    staying.append(s.key)
        candidate_keys = {c.key for c in candidates}
        for agent, sid in staying:
            self._keep_ancestors(agent, sid, views[agent], kept, candidate_keys)
        report.kept.extend(kept.values())
        remaining = [s for s in candidates if s.key not in kept]
        return self._removal_order(remaining, views)

    def _removal_order(self, plan: list[Session], views: dict[str, DiskView]) -> list[Session]:
        """Longest idle first across every agent (max_removals takes the
        oldest), and each session after its descendants (invariant 3): a
        session's planned descendants are pulled ahead of it, deepest first."""
        known = [t for s in plan if (t := self._known_activity(s)) is not None]
        floor = min(known, default=0.0)

        def idle_order(s: Session) -> tuple[float, str, str]:
            activity = self._known_activity(s)
            return (floor if activity is None else activity, s.agent, s.id)

        planned = {s.key: s for s in plan}
        below: dict[tuple[str, str], list[Session]] = {}
        for s in plan:
            parent = views[s.agent].parent_of(s.id)
            if parent is not None and (s.agent, parent) in planned:
                below.setdefault((s.agent, parent), []).append(s)
        ordered: list[Session] = []
        placed: set[tuple[str, str]] = set()
        seen: set[tuple[str, str]] = set()  # expanded once: parents may loop
        for s in sorted(plan, key=idle_order):
            # Iteratively: descendants (deepest first), then the session.
            stack: list[tuple[Session, bool]] = [(s, False)]
            while stack:
                current, expanded = stack.pop()
                if current.key in placed:
                    continue
                if expanded:
                    placed.add(current.key)
                    ordered.append(current)
                    continue
                if current.key in seen:
                    continue
                seen.add(current.key)
                stack.append((current, True))
                children = sorted(below.get(current.key, []), key=idle_order, reverse=True)
                stack.extend((c, False) for c in children if c.key not in placed)
        return ordered

    def _targets(self, agent: str, view: DiskView, opts: PruneOptions) -> set[str]:
        if opts.purge is not None:
            return {sid for a, sid in opts.purge if a == agent}
        cutoff = opts.cutoffs[agent]
        return {
            s.id
            for s in view.sessions.values()
            if (known := self._known_activity(s)) is None or known < cutoff
        }

    def _static_reason(
        self, s: Session, *, purge: bool = False, under_lease: bool = False
    ) -> Kept | None:
        """Why a session stays whatever its age. A purge ignores age, so an
        unreadable time does not stop it. Under our own exclusive leases
        (`under_lease`) nobody else can hold them, and the processes are
        looked at afresh (invariant 4)."""
        if not purge and self._activity(s) is None:
            return Kept(s.agent, s.id, Reason.UNDATED, "a time of it cannot be read")
        holders = self._holders(s, fresh=under_lease)
        if holders:
            return Kept(s.agent, s.id, Reason.LIVE, holders[0].describe())
        held = None if under_lease else self._lease_holder(s)
        if held:
            return Kept(s.agent, s.id, Reason.HELD, held)
        if s.key in self.pins:
            return Kept(s.agent, s.id, Reason.PINNED, "pinned")
        if s.unsafe:
            return Kept(s.agent, s.id, Reason.UNSAFE, s.unsafe)
        return None

    def _keep_ancestors(
        self,
        agent: str,
        sid: str,
        view: DiskView,
        kept: dict[tuple[str, str], Kept],
        candidates: set[tuple[str, str]],
    ) -> None:
        for parent in ancestors(sid, view.parent_of):
            if (agent, parent) in kept or (agent, parent) not in candidates:
                continue  # kept already, or recent: not old enough to be in the report
            kept[(agent, parent)] = Kept(agent, parent, Reason.ANCESTOR, f"parent of {sid}")

    # -- evidence of use ----------------------------------------------------
    def _procs_now(self, fresh: bool = False) -> ProcessTable:
        """The user's processes. `fresh` (the check under the lease): at least
        every process started since the last look is read, so one that began
        after the plan is seen; a full snapshot at most PROCESS_SNAPSHOT_TTL
        old also catches a command line exec'd in place."""
        stale = time.monotonic() - self._procs_at > PROCESS_SNAPSHOT_TTL
        if self._procs is None or stale:
            self._procs = ProcessTable.snapshot()
            self._procs_at = time.monotonic()
        elif fresh:
            self._procs = self._procs.refreshed()
        return self._procs

    def _holders(self, s: Session, fresh: bool = False) -> list[Holder]:
        return self.adapters[s.agent].holders(s, self._procs_now(fresh))

    def _lease_holder(self, s: Session) -> str | None:
        paths = [leases.lease_path(self.state_dir, s.agent, s.id)]
        paths += self.adapters[s.agent].lock_files(s)
        for path in paths:
            if leases.is_held(path):
                return f"lease {path}"
        return None

    # -- the act ------------------------------------------------------------
    def _act(
        self,
        plan: list[Session],
        views: dict[str, DiskView],
        opts: PruneOptions,
        report: PruneReport,
    ) -> None:
        act = _Act(views, opts, report, {s.key for s in plan})
        act.tell()
        batch: list[_Held] = []
        for s in plan:
            if s.key in act.kept:
                continue
            if batch and (
                len(batch) == BATCH
                or _parent_of_any(s, batch, views[s.agent])
                or self._capped(opts, report, len(batch))
            ):
                self._remove_batch(self._check(batch, act), act)
                batch = []
            if STOP.is_set():
                act.stay(Kept(s.agent, s.id, Reason.CAPPED, "agentkeep is stopping"))
                continue
            if self._capped(opts, report):
                act.stay(Kept(s.agent, s.id, Reason.CAPPED, "over max_removals"))
                continue
            held = self._take(s, opts.dry_run)
            if isinstance(held, _Held):
                batch.append(held)
            else:
                act.stay(held)
        if batch:
            self._remove_batch(self._check(batch, act), act)
        if report.removed and not opts.dry_run:
            self._index_write(lambda i: i.delete((r.agent, r.id) for r in report.removed))

    @staticmethod
    def _capped(opts: PruneOptions, report: PruneReport, pending: int = 0) -> bool:
        """max_removals caps every prune; a purge names its sessions and is not counted."""
        if opts.purge is not None or opts.max_removals is None:
            return False
        return len(report.removed) + pending >= opts.max_removals

    def _take(self, s: Session, dry_run: bool) -> _Held | Kept:
        """Take the session's leases exclusively, or say who holds one."""
        adapter = self.adapters[s.agent]
        locks: list[leases.Lease] = []
        taken = False
        own_path = leases.lease_path(self.state_dir, s.agent, s.id)
        try:
            for path in [own_path, *adapter.lock_files(s)]:
                if dry_run and not os.path.lexists(path):
                    # A lease file that does not exist holds nothing, and a
                    # dry run leaves no file behind (it removes nothing, so
                    # one made after this look changes nothing either).
                    continue
                # An agent's own lock file may be created, never its directory:
                # that would bring a removed session back.
                lease = leases.try_exclusive(path, create_dirs=path == own_path)
                if lease is None:
                    return Kept(s.agent, s.id, Reason.HELD, f"lease {path}")
                locks.append(lease)
            if _after_lease is not None:
                _after_lease(s.agent, s.id)
            taken = True
            own = next((lease for lease in locks if lease.path == own_path), None)
            return _Held(s, locks, own)
        except leases.LeaseError as exc:
            return Kept(s.agent, s.id, exc.reason, f"lease error: {exc}")
        finally:
            if not taken:
                _release(locks)

    def _check(self, batch: list[_Held], act: _Act) -> list[_Held]:
        """Invariant 4: with every lease of the batch held, list its sessions
        from the disk again (one pass per agent) and check each again; the
        index may be stale, this never is. Those still to go, in the plan's
        order, each holding its leases and carrying its fresh listing; the
        rest are released."""
        ready: set[int] = set()
        by_agent: dict[str, list[_Held]] = {}
        for held in batch:
            by_agent.setdefault(held.session.agent, []).append(held)
        for agent, items in by_agent.items():
            fresh = self.adapters[agent].load_many([h.session.id for h in items])
            view = act.views[agent]
            # A fork made after the plan shows as a child from here on.
            view.refresh()
            for held in items:
                session = fresh[held.session.id]
                reason = None if session is None else self._recheck(session, view, act)
                if session is None or reason is not None:
                    _release(held.locks)  # gone already, or it stays
                    if reason is not None:
                        act.stay(reason)
                    continue
                held.session = session
                ready.add(id(held))
        return [held for held in batch if id(held) in ready]

    def _recheck(self, s: Session, view: DiskView, act: _Act) -> Kept | None:
        opts = act.opts
        activity = self._activity(s)
        if opts.purge is None and activity is not None and activity >= opts.cutoffs[s.agent]:
            return Kept(s.agent, s.id, Reason.UPDATED, f"written at {rfc3339(activity)}")
        static = self._static_reason(s, purge=opts.purge is not None, under_lease=True)
        if static is not None:
            return static
        children = [c for c in view.children(s.id) if (s.agent, c) not in act.removed]
        if children:
            return Kept(s.agent, s.id, Reason.ANCESTOR, f"parent of {children[0]}")
        return None

    def _remove_batch(self, batch: list[_Held], act: _Act) -> None:
        """Remove sessions checked and held under their leases. Invariant 5:
        the batch's journal entry exists before anything is removed, and
        names every removal that failed half way until a run finishes it."""
        if not batch:
            return
        try:
            written = None
            if not act.opts.dry_run:
                try:
                    written = self.journal.begin_batch([r.entry(act.opts) for r in batch])
                except OSError as exc:
                    why = f"cannot write the journal {self.journal.dir}: {exc.strerror or exc}"
                    log.error("journal write failed; this batch removes nothing", error=why)
                    for r in batch:
                        act.fail(Failed(r.session.agent, r.session.id, why), r.session)
                    return
            unfinished: list[_Held] = []
            for n, r in enumerate(batch):
                s = r.session
                # The session being removed is finished; the rest stay.
                if n and STOP.is_set():
                    act.stay(Kept(s.agent, s.id, Reason.CAPPED, "agentkeep is stopping"))
                    continue
                outcome = self._remove(self.adapters[s.agent], s, act.views[s.agent], act.opts)
                if isinstance(outcome, Removed) and r.own is not None and not act.opts.dry_run:
                    r.own.discard()  # the session is gone: its lease file too
                _release(r.locks)
                if isinstance(outcome, Removed):
                    act.removed_one(outcome)
                else:
                    act.fail(outcome, s)
                    unfinished.append(r)
            if written is not None:
                self._end_batch(written, unfinished, act.opts)
        finally:
            for r in batch:
                _release(r.locks)

    def _end_batch(self, written: Path, unfinished: list[_Held], opts: PruneOptions) -> None:
        """Forget the batch, except the removals that failed half way."""
        if not unfinished:
            self.journal.end_batch(written)
            return
        try:
            self.journal.narrow_batch(written, [r.entry(opts) for r in unfinished])
        except OSError as exc:
            # The whole batch stays: the next run finds the rest gone.
            log.error("journal not narrowed", path=str(written), error=str(exc))

    def _remove(
        self, adapter: Adapter, s: Session, view: DiskView, opts: PruneOptions
    ) -> Removed | Failed:
        try:
            removal = self._removal(s, dry_run=opts.dry_run, trash_for=opts.trash_for, now=opts.now)
        except (trash.TrashError, OSError) as exc:
            return Failed(s.agent, s.id, f"cannot open its trash entry: {exc}")
        try:
            adapter.remove(s, removal)
        except (RemovalError, OSError) as exc:
            log.error("removal failed", agent=s.agent, id=s.id, error=str(exc))
            return Failed(s.agent, s.id, f"{type(exc).__name__}: {exc}")
        finally:
            self._close_trash(removal)
        if not opts.dry_run:
            view.settle([a.path for a in s.artifacts])
        log.info(
            "removed" if not opts.dry_run else "would remove",
            agent=s.agent,
            id=s.id,
            bytes=s.bytes,
            paths=len(removal.removed),
        )
        return Removed(
            s.agent,
            s.id,
            s.bytes,
            self._activity(s),
            list(removal.removed),
            list(removal.residuals),
            removal.trash.entry.bytes if removal.trash is not None else 0,
        )

    def _removal(
        self, s: Session, *, dry_run: bool, trash_for: float, now: float
    ) -> SessionRemoval:
        writer = None
        if trash_for > 0 and not dry_run:
            writer = trash.open_entry(
                self.state_dir,
                s.agent,
                s.id,
                parent=s.parent,
                keep_for=trash_for,
                now=now,
                last_activity=self._activity(s),
            )
        return SessionRemoval(
            s.agent, s.id, dry_run=dry_run, trash=writer, same_fs_as=self.state_dir
        )

    @staticmethod
    def _close_trash(removal: SessionRemoval) -> None:
        if removal.trash is None:
            return
        try:
            removal.trash.close()
        except OSError as exc:  # never hide the removal's own outcome
            log.error(
                "trash entry could not be saved", path=str(removal.trash.path), error=str(exc)
            )

    # -- the journal --------------------------------------------------------
    def _finish_journal(
        self, views: dict[str, DiskView], report: PruneReport, trash_for: float
    ) -> bool:
        """Invariant 5: a removal killed half way is finished by the next run,
        under the exclusive lease, after listing the session from the disk
        again. Finishing is a removal like any other: the session is checked
        again as a fresh removal would be (_finishing_keeps), so one written,
        opened or pinned since, or the parent of one that stays, stays; and a
        session the journal named whose removal never began (its batch was
        journaled whole) is held to the same rules. A session whose primary
        record is back (or never went) is left for the ordinary plan to
        judge. What is finished or kept is in this run's report (invariant
        9). True when anything was removed."""
        finished = False
        unsettled = self.journal.pending()
        # Descendants first, as a plan orders them: a child finished here
        # no longer keeps its parent.
        unsettled.sort(key=lambda e: -self._journal_depth(e, views))
        removed: set[tuple[str, str]] = set()
        for entry in list(unsettled):
            adapter = self.adapters.get(entry.agent)
            if adapter is None:
                continue
            try:
                lease = leases.try_exclusive(
                    leases.lease_path(self.state_dir, entry.agent, entry.id)
                )
            except leases.LeaseError as exc:
                report.failed.append(Failed(entry.agent, entry.id, f"finishing: {exc}"))
                continue
            if lease is None:
                # Held: kept, and finished by a later run.
                report.kept.append(
                    Kept(entry.agent, entry.id, Reason.HELD, "finishing: lease held")
                )
                continue
            try:
                done = self._finish_one(adapter, entry, views, removed, report, trash_for)
            except (RemovalError, trash.TrashError, OSError) as exc:
                report.failed.append(Failed(entry.agent, entry.id, f"finishing: {exc}"))
                lease.release()
                continue
            if done is not None:
                lease.discard()  # the session is gone: so is its lease file
            lease.release()
            unsettled = [e for e in unsettled if e is not entry]
            self.journal.settle(entry, unsettled)
            if done is not None:
                removed.add((done.agent, done.id))
                report.removed.append(done)
                report.residual.extend((done.agent, done.id, p) for p in done.residual)
                finished = True
        return finished

    def _journal_depth(self, entry: JournalEntry, views: dict[str, DiskView]) -> int:
        view = views.get(entry.agent)
        return sum(1 for _ in ancestors(entry.id, view.parent_of)) if view else 0

    def _finish_one(
        self,
        adapter: Adapter,
        entry: JournalEntry,
        views: dict[str, DiskView],
        removed: set[tuple[str, str]],
        report: PruneReport,
        trash_for: float,
    ) -> Removed | None:
        """Finish one journaled removal under its lease; None when nothing
        was removed (gone already, left to the plan, or kept: in report.kept)."""
        s = adapter.load(entry.id)
        if s is None or s.primary:
            return None
        kept = self._finishing_keeps(s, entry, views.get(entry.agent), removed)
        if kept is not None:
            log.info(
                "an interrupted removal is not finished", agent=s.agent, id=s.id, why=kept.reason
            )
            report.kept.append(kept)
            return None
        removal = self._removal(
            s, dry_run=False, trash_for=trash_for if entry.trash else 0.0, now=time.time()
        )
        try:
            adapter.remove(s, removal)
        finally:
            self._close_trash(removal)
        log.info("finished an interrupted removal", agent=s.agent, id=s.id)
        trashed = removal.trash.entry.bytes if removal.trash is not None else 0
        return Removed(
            s.agent, s.id, s.bytes, self._activity(s), removal.removed, removal.residuals, trashed
        )

    def _finishing_activity(self, s: Session) -> float | None:
        """The session's activity, with the directories' own mtimes left out:
        the interrupted removal moved them, and only a write says the
        session was used since (a file's mtime)."""
        times = [self.restored.get(s.key), s.updated]
        for artifact in s.own_artifacts:
            if artifact.root is None or not artifact.is_dir:
                times.append(artifact.mtime)  # a file, or rows: as listed
                if artifact.mtime is None:
                    return None
                continue
            newest = disk.newest_file_mtime(artifact.path)
            if newest is None:
                return None
            times.append(newest)
        if s.undated:
            return None
        known = [t for t in times if t is not None and t != -math.inf]
        return max(known) if known else -math.inf

    def _finishing_keeps(
        self,
        s: Session,
        entry: JournalEntry,
        view: DiskView | None,
        removed: set[tuple[str, str]],
    ) -> Kept | None:
        """Why a journaled session must not be finished: the checks of a fresh
        removal under its lease (invariants 1-4). Activity since the removal
        began, or at or after the cutoff it began under, keeps it (a purge
        named it whatever its age, but not whatever is written since); so
        do holders, a pin, an unsafe record and a child that stays."""
        purge = entry.cutoff is None
        activity = self._finishing_activity(s)
        if activity is None and not purge:
            return Kept(s.agent, s.id, Reason.UNDATED, "finishing: a time of it cannot be read")
        since = entry.started if purge else min(entry.started, cast(float, entry.cutoff))
        if activity is not None and activity >= since:
            return Kept(s.agent, s.id, Reason.UPDATED, f"finishing: written at {rfc3339(activity)}")
        static = self._static_reason(s, purge=purge, under_lease=True)
        if static is not None:
            return static
        children = [] if view is None else view.children(s.id)
        staying = [c for c in children if (s.agent, c) not in removed]
        if staying:
            return Kept(s.agent, s.id, Reason.ANCESTOR, f"parent of {staying[0]}")
        return None

    # -- the scheduled prune's pause ------------------------------------------
    def _pause_reason(self, views: dict[str, DiskView], opts: PruneOptions) -> str | None:
        existing = read_pause(self.state_dir) or state_disk_full(self.state_dir)
        if existing:
            return existing
        reason = pause_reason(self.state_dir, views, opts, self._activity)
        if reason:
            write_json(
                self.state_dir / "pause.json", {"reason": reason, "since": rfc3339(opts.now)}
            )
            log.warning("scheduled prune paused", reason=reason)
        return reason


def pause_reason(
    state_dir: Path,
    views: dict[str, DiskView],
    opts: PruneOptions,
    activity: Callable[[Session], float | None],
) -> str | None:
    """The scheduled prune pauses itself when the clock or the machine looks
    wrong: a clock behind the last prune, more than the retention since the
    last prune, or even the newest session idle past the retention. An empty
    index never pauses."""
    if not any(view.sessions for view in views.values()):
        return None  # an empty index never pauses
    try:
        last = read_state(state_dir / "last_prune.json", _summary)
    except StateFileError as exc:
        # Without it the clock cannot be checked: pause (a person's prune
        # writes it afresh).
        return f"the record of the last prune cannot be read: {exc}"
    retention = min((opts.now - c for c in opts.cutoffs.values()), default=None)
    if last and isinstance(last.get("ts"), int | float) and retention is not None:
        if opts.now < last["ts"]:
            return (
                f"the clock reads {rfc3339(opts.now)}, before the last prune at {last.get('time')}"
            )
        if opts.now - last["ts"] > retention:
            return f"more than the retention has passed since the last prune at {last.get('time')}"
    times = [
        (t, view_agent)
        for view_agent, view in views.items()
        for s in view.sessions.values()
        if (t := activity(s)) is not None
    ]
    all_idle = bool(times) and all(t < opts.cutoffs[a] for t, a in times)
    acknowledged = state_dir / "pause-lifted.json"
    if not all_idle:
        remove(acknowledged)  # the machine looks normal again
        return None
    # A person who lifted this pause has seen it: the sessions a capped
    # lifting run left are still all idle, and must not pause it again.
    if read_json(acknowledged, None) is None:
        return "even the newest session is idle past the retention"
    return None


def _summary(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return value


def _pause(value: Any) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("reason"), str):
        raise TypeError("no reason in it")
    return value["reason"]


def read_pause(state_dir: Path) -> str | None:
    """Why the scheduled prune is paused, or None. A damaged pause file still
    pauses it (a pause that cannot be read must not let a prune run)."""
    try:
        return read_state(state_dir / "pause.json", _pause)
    except StateFileError as exc:
        return f"the pause file cannot be read: {exc}"


# Below this much room, a prune cannot journal its removals.
_ROOM = 64 * 1024


def state_disk_full(state_dir: Path) -> str | None:
    """Why the scheduled prune waits for room: the disk holding the state dir
    is full, and every removal would fail without its journal entry. Not
    recorded (there is no room to): it lasts as long as the disk is full."""
    try:
        st = os.statvfs(state_dir)
    except OSError:
        return None
    if st.f_bavail * st.f_frsize >= _ROOM:
        return None
    return f"the disk holding {state_dir} is full: nothing can be pruned until there is room"


def lift_pause(state_dir: Path, now: float) -> None:
    """A person's prune (not a dry run) lifts the pause and acknowledges what
    made it, until the machine looks normal again."""
    if (state_dir / "pause.json").exists():
        write_json(state_dir / "pause-lifted.json", {"since": rfc3339(now)})
    remove(state_dir / "pause.json")


def record_last_prune(state_dir: Path, summary: dict[str, Any]) -> None:
    write_json(state_dir / "last_prune.json", summary)
