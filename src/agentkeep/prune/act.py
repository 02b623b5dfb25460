"""The prune's act: plan from a fresh listing of the disk (the disk is the
truth), then take each candidate's leases exclusively, list it from the disk
again and check it again before anything is removed, journaled first."""

from __future__ import annotations

import gc
import os
import pickle
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import structlog

from agentkeep import descriptors, leases, lookagain, trash
from agentkeep.adapters.base import Adapter
from agentkeep.errors import RemovalError
from agentkeep.index import Index
from agentkeep.journal import Journal, JournalEntry
from agentkeep.model import Reason, Session, rfc3339
from agentkeep.progress import Tally, estimate
from agentkeep.prune import spread
from agentkeep.prune.evidence import Evidence, Watch
from agentkeep.prune.pause import pause_for
from agentkeep.prune.plan import (
    PrunePlan,
    ancestors,
    check_floor,
    decide,
    halves,
    static_reason,
)
from agentkeep.prune.recovery import finish_journal
from agentkeep.prune.report import Failed, Kept, PruneOptions, PruneReport, Removed
from agentkeep.prune.view import DiskView
from agentkeep.removal import SessionRemoval
from agentkeep.rmtree import Parents

log = structlog.get_logger("agentkeep.prune")

# Test seams, None in production: called after a candidate's lease is taken
# and before it is listed again, so a test can write to it, fork it or hold
# it between the plan and the act.
_after_lease: Callable[[str, str], None] | None = None
_after_plan: Callable[[], None] | None = None
# Timing hook, None in production: given the seconds of each phase of a run
# (and "seconds", the whole run) at its end; the bench reads them.
_on_phases: Callable[[dict[str, float]], None] | None = None

# Sessions checked under their leases and journaled together (one durable
# write per batch, see journal); each holds its leases until it is removed.
# Each batch lists again the directories every session shares, changed by
# the batch before (and by the other half, see spread): at 10,000 sessions,
# batches of 1,024 cost the check under the lease half what batches of 256
# did, and batches of 64 at 1,000 sessions took twice as long as these.
BATCH = 1024
# Descriptors each held session takes at most (its own lease, and its
# agent's lock file: see Adapter.lock_files), and those the rest of a
# prune uses meanwhile (the index, the journal, the removal's cursors, a
# trash entry's, the agents' databases).
FDS_PER_SESSION = 2
FDS_BESIDE = 128
# A removal into the trash leaves reference cycles (each write of its
# entry.json through json's pure-Python encoder leaves one), and a run
# pauses the collector (core.indexing): held to the run's end, they were
# some 50 KB a session, and held to a batch's end 24 MB a batch. So the
# young generation, what was made since the last collection, is collected
# every this many removals and at each batch's end: the first walks the
# listing once (and moves it on), each later one only what came since.
COLLECT_EVERY = 64

# Set by the daemon when it is told to stop: a run in flight finishes the
# session it is removing and keeps the rest (`capped`) for the next run.
STOP = threading.Event()


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


class _ListingFailed(Exception):
    """The adapter's failure, carried through the index's write, which
    would take an OSError for one of its own and go on."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _Listing:
    """An agent's sessions as they are listed from the disk, each put into
    the view on its way (to the index, when one takes them)."""

    def __init__(
        self, agent: str, sessions: Iterator[Session], view: DiskView, tally: Tally | None
    ) -> None:
        self.agent, self._sessions, self._view, self._tally = agent, sessions, view, tally

    def __iter__(self) -> Iterator[Session]:
        return self

    def __next__(self) -> Session:
        try:
            s = next(self._sessions)
        except StopIteration:
            raise
        except Exception as exc:
            raise _ListingFailed(exc) from exc
        self._view.add(s)
        if self._tally is not None:
            self._tally.add(self.agent, 1)
        return s

    def finish(self) -> None:
        """List what is left into the view."""
        for _ in self:
            pass
        if self._tally is not None:
            self._tally.finish(self.agent)


@dataclass
class _Clock:
    """Seconds one run spends in each of its phases, logged once at its end
    (the bench reads them to show where a prune's time goes)."""

    seconds: dict[str, float] = field(default_factory=dict)
    # The same phases in CPU seconds ("cpu:<phase>"): on a shared machine
    # the wall time of a phase is mostly other people's load.
    cpu: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            spent, used = time.perf_counter() - started, time.process_time() - cpu
            self.seconds[name] = self.seconds.get(name, 0.0) + spent
            self.cpu[f"cpu:{name}"] = self.cpu.get(f"cpu:{name}", 0.0) + used

    def add_apart(self, other: _Clock) -> None:
        """The phases of the second process of a spread act, as `apart:<phase>`."""
        self.seconds.update((f"apart:{name}", spent) for name, spent in other.seconds.items())
        self.cpu.update(
            (f"cpu:apart:{name.removeprefix('cpu:')}", used) for name, used in other.cpu.items()
        )


def batch_size() -> int:
    """BATCH, or as many sessions as fit with their leases in the files this
    process may open (its limit first raised towards what BATCH needs): a
    batch that did not fit kept its last sessions for a lease error."""
    soft = descriptors.allow(BATCH * FDS_PER_SESSION + FDS_BESIDE)
    return max(1, min(BATCH, (soft - FDS_BESIDE) // FDS_PER_SESSION))


def _release(locks: list[leases.Lease]) -> None:
    for lease in reversed(locks):
        lease.release()


def _parent_of_any(s: Session, waiting: set[tuple[str, str]], view: DiskView) -> bool:
    """Whether `s` is the parent of a session `waiting` in the batch: it can
    only be checked once they are gone (the plan puts descendants first)."""
    return any((s.agent, child) in waiting for child in view.children(s.id))


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
        expiry: trash.Expiry | None = None,
    ) -> None:
        self.adapters = adapters
        self.state_dir = state_dir
        self.index = index
        self.pins = pins or set()
        self.expiry = expiry or trash.Expiry(state_dir)
        self.journal = Journal(state_dir)
        self.restored = trash.restored_at(state_dir)
        self.watch = Watch(adapters, state_dir, self.pins)
        self.clock = _Clock()

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
        self.clock = _Clock()
        started = time.perf_counter()
        with self.clock.phase("listing"):
            views = self._list_all(opts)
        if opts.scheduled:
            # A paused run changes nothing at all: not even the trash, the
            # last place a session can be had back from.
            report.paused = pause_for(self.state_dir, views, opts, self.activity)
            if report.paused:
                return report
        if not opts.dry_run:
            with self.clock.phase("recovery"):
                if finish_journal(self, views, report, opts.trash_for):
                    views = self._list_all(opts)
                self.expiry.run(time.time())
        with self.clock.phase("plan"):
            plan = self._plan(views, opts)
        report.kept.extend(plan.kept)
        if _after_plan is not None:
            _after_plan()
        candidates = list(plan.candidates)
        if self._spreads(candidates, opts, report):
            self._act_in_two(candidates, views, opts, report)
        else:
            self._act(candidates, views, opts, report)
        if report.removed and not opts.dry_run:
            with self.clock.phase("index"):
                self._index_write(lambda i: i.delete((r.agent, r.id) for r in report.removed))
        if not opts.dry_run:
            with self.clock.phase("look_again"):
                self._look_again(report)
        phases = {"seconds": time.perf_counter() - started, **self.clock.seconds, **self.clock.cpu}
        log.debug("prune phases", **{k: round(v, 4) for k, v in phases.items()})
        if _on_phases is not None:
            _on_phases(phases)
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
        """The agent listed from the disk into a view, each session on its
        way to the index too: neither holds every session's listing at once.
        What the index does not take (there is none, or its write failed) is
        listed into the view all the same; a failure of the listing itself
        is the run's, never taken for the index's."""
        view = DiskView(self.adapters[agent])
        listing = _Listing(agent, self.adapters[agent].scan(), view, tally)
        try:
            self._index_write(lambda i: i.replace_agent(agent, listing, self.restored))
            listing.finish()
        except _ListingFailed as failed:
            raise failed.error from None
        return view

    def _index_write(self, write: Callable[[Index], object]) -> None:
        """The index is a cache of the disk: a write that fails (a full disk)
        is logged and the prune, which works from the disk, goes on."""
        if self.index is None:
            return
        try:
            write(self.index)
        except (sqlite3.Error, OSError) as exc:
            log.error("index not updated", index=str(self.index.path), error=str(exc))

    def activity(self, s: Session) -> float | None:
        return s.last_activity(self.restored.get(s.key))

    def _plan(self, views: dict[str, DiskView], opts: PruneOptions) -> PrunePlan:
        """The plan of the sessions as listed: see plan.decide."""
        sessions = {agent: list(view.sessions.values()) for agent, view in views.items()}
        return decide(sessions, self.watch.evidence(), opts, self.restored)

    # -- the act ------------------------------------------------------------
    def _act(
        self,
        plan: list[Session],
        views: dict[str, DiskView],
        opts: PruneOptions,
        report: PruneReport,
    ) -> None:
        """Act on the plan a batch at a time (batch_size())."""
        size = batch_size()
        act = _Act(views, opts, report, {s.key for s in plan})
        act.tell()
        batch: list[_Held] = []
        waiting: set[tuple[str, str]] = set()  # the batch's sessions
        for s in plan:
            if s.key in act.kept:
                continue
            if batch and (
                len(batch) == size
                or _parent_of_any(s, waiting, views[s.agent])
                or self._capped(opts, report, len(batch))
            ):
                self._remove_batch(self._checked(batch, act), act)
                batch, waiting = [], set()
            if STOP.is_set():
                act.stay(Kept(s.agent, s.id, Reason.CAPPED, "agentkeep is stopping"))
                continue
            if self._capped(opts, report):
                act.stay(Kept(s.agent, s.id, Reason.CAPPED, "over max_removals"))
                continue
            with self.clock.phase("lease"):
                held = self._take(s, opts.dry_run)
            if isinstance(held, _Held):
                batch.append(held)
                waiting.add(s.key)
            else:
                act.stay(held)
        if batch:
            self._remove_batch(self._checked(batch, act), act)

    def _spreads(self, plan: list[Session], opts: PruneOptions, report: PruneReport) -> bool:
        """Whether the act is spread over two processes (see spread): not
        while a person watches its progress, nor where max_removals could
        stop it before the plan's end (which half would stop first?)."""
        if opts.progress is not None or self._capped(opts, report, len(plan) - 1):
            return False
        return spread.worth_spreading(len(plan))

    def _act_in_two(
        self,
        plan: list[Session],
        views: dict[str, DiskView],
        opts: PruneOptions,
        report: PruneReport,
    ) -> None:
        """Act on half of the plan here and on the other half in a child
        (spread), then report what the child decided as if decided here; a
        session of its half it did not decide (it died) failed. The child is
        waited for whatever happens here: until it exits, it removes under
        the prune lock this process holds."""
        mine, theirs = halves(plan, {agent: view.parent_of for agent, view in views.items()})

        def half(out: IO[bytes]) -> None:
            self._act_apart(theirs, views, opts, report, out)

        try:
            child = spread.start(half)
        except OSError as exc:  # no process to spare, a full $TMPDIR: it costs time only
            log.warning("the prune acts in one process", error=exc.strerror or str(exc))
            self._act(plan, views, opts, report)
            return
        try:
            self._act(mine, views, opts, report)
        finally:
            with self.clock.phase("wait"):
                ended = child.wait()
        decided: set[tuple[str, str]] = set()
        error: BaseException | None = None
        for kind, item in child.records():
            if kind == "error":
                error = item
            elif kind == "clock":
                self.clock.add_apart(item)
            elif kind == "residual":
                report.residual.append(item)
            else:
                getattr(report, kind).append(item)
                decided.add((item.agent, item.id))
        if error is not None:
            raise error
        if ended is not None:
            why = f"its removal process {ended} first; a later run finishes what it began"
            log.error("the prune's second process ended early", how=ended)
            for s in theirs:
                if s.key not in decided:
                    report.failed.append(Failed(s.agent, s.id, why))

    def _act_apart(
        self,
        plan: list[Session],
        views: dict[str, DiskView],
        opts: PruneOptions,
        report: PruneReport,
        out: IO[bytes],
    ) -> None:
        """The child's half (spread.start): acted on as in one process, each
        outcome sent as it is decided. The index's connection is the
        parent's: the child never writes it (the parent forgets what both
        removed)."""
        self.index = None
        half = PruneReport(report.cutoff, report.cutoffs, report.dry_run)
        half.removed = spread.Sent(out, "removed")  # type: ignore[assignment]
        half.kept = spread.Sent(out, "kept")  # type: ignore[assignment]
        half.failed = spread.Sent(out, "failed")  # type: ignore[assignment]
        half.residual = spread.Sent(out, "residual")  # type: ignore[assignment]
        self.clock = _Clock()
        self._act(plan, views, opts, half)
        pickle.dump(("clock", self.clock), out, pickle.HIGHEST_PROTOCOL)

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

    def _checked(self, batch: list[_Held], act: _Act) -> list[_Held]:
        with self.clock.phase("recheck"):
            return self._check(batch, act)

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
            # Read after every lease of the batch was taken: a process
            # started since the plan shows.
            evidence = self.watch.evidence(fresh=True)
            for held in items:
                session = fresh[held.session.id]
                reason = None if session is None else self._recheck(session, view, act, evidence)
                if session is None or reason is not None:
                    _release(held.locks)  # gone already, or it stays
                    if reason is not None:
                        act.stay(reason)
                    continue
                held.session = session
                ready.add(id(held))
        return [held for held in batch if id(held) in ready]

    def _recheck(self, s: Session, view: DiskView, act: _Act, evidence: Evidence) -> Kept | None:
        opts = act.opts
        activity = self.activity(s)
        if opts.purge is None and activity is not None and activity >= opts.cutoffs[s.agent]:
            return Kept(s.agent, s.id, Reason.UPDATED, f"written at {rfc3339(activity)}")
        purge = opts.purge is not None
        static = static_reason(s, evidence, activity, purge=purge, under_lease=True)
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
        parents = Parents()
        try:
            written = None
            if not act.opts.dry_run:
                try:
                    with self.clock.phase("journal"):
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
                with self.clock.phase("removal"):
                    outcome = self._remove(s, act.opts, parents)
                if isinstance(outcome, Removed) and r.own is not None and not act.opts.dry_run:
                    r.own.discard()  # the session is gone: its lease file too
                _release(r.locks)
                if isinstance(outcome, Removed):
                    act.removed_one(outcome)
                else:
                    act.fail(outcome, s)
                    unfinished.append(r)
                if n % COLLECT_EVERY == COLLECT_EVERY - 1:
                    gc.collect(0)
            if written is not None:
                with self.clock.phase("journal"):
                    self._end_batch(written, unfinished, act.opts)
        finally:
            parents.close()
            for r in batch:
                _release(r.locks)
            gc.collect(0)  # see COLLECT_EVERY

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

    def _remove(self, s: Session, opts: PruneOptions, parents: Parents) -> Removed | Failed:
        try:
            removal = self.removal(
                s, dry_run=opts.dry_run, trash_for=opts.trash_for, now=opts.now, parents=parents
            )
        except (trash.TrashError, OSError) as exc:
            return Failed(s.agent, s.id, f"cannot open its trash entry: {exc}")
        try:
            self.adapters[s.agent].remove(s, removal)
        except (RemovalError, OSError) as exc:
            log.error("removal failed", agent=s.agent, id=s.id, error=str(exc))
            return Failed(s.agent, s.id, f"{type(exc).__name__}: {exc}")
        finally:
            self.close_trash(removal)
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
            self.activity(s),
            list(removal.removed),
            list(removal.residuals),
            removal.trash.entry.bytes if removal.trash is not None else 0,
        )

    def removal(
        self,
        s: Session,
        *,
        dry_run: bool,
        trash_for: float,
        now: float,
        parents: Parents | None = None,
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
                last_activity=self.activity(s),
            )
        return SessionRemoval(
            s.agent, s.id, dry_run=dry_run, trash=writer, same_fs_as=self.state_dir, parents=parents
        )

    @staticmethod
    def close_trash(removal: SessionRemoval) -> None:
        if removal.trash is None:
            return
        try:
            removal.trash.close()
        except OSError as exc:  # never hide the removal's own outcome
            log.error(
                "trash entry could not be saved", path=str(removal.trash.path), error=str(exc)
            )
