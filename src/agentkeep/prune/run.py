"""One prune run, as a short sequence of named steps (Pruner.run)."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from agentkeep import compaction, history, leftovers, lookagain
from agentkeep.adapters.base import Adapter, expected_sessions
from agentkeep.index import Index
from agentkeep.journal import Journal
from agentkeep.model import Session
from agentkeep.paths import Env
from agentkeep.progress import Tally, estimate
from agentkeep.prune.act import Act
from agentkeep.prune.evidence import Watch
from agentkeep.prune.pause import pause_for
from agentkeep.prune.plan import check_floor, decide
from agentkeep.prune.recovery import finish_journal
from agentkeep.prune.remove import Removing
from agentkeep.prune.report import PruneOptions, PruneReport
from agentkeep.prune.view import DiskView
from agentkeep.trash.expiry import Expiry
from agentkeep.trash.restored import restored_at

log = structlog.get_logger("agentkeep.prune")

# Test seam, None in production: called once the plan is made, before the
# act, so a test can change the disk between the two.
_after_plan: Callable[[], None] | None = None


class Pruner:
    """Plans and acts for one user: one adapter per agent, the state dir."""

    def __init__(
        self,
        adapters: dict[str, Adapter],
        state_dir: Path,
        *,
        index: Index | None = None,
        pins: set[tuple[str, str]] | None = None,
        expiry: Expiry | None = None,
        env: Env | None = None,
    ) -> None:
        """`env`: whose tmp dirs hold the runtime leftovers (None: none looked for)."""
        self.adapters = adapters
        self.env = env
        self.state_dir = state_dir
        self.index = index
        self.pins = pins or set()
        self.expiry = expiry or Expiry(state_dir)
        self.journal = Journal(state_dir)
        self.removing = Removing(
            adapters,
            state_dir,
            Watch(adapters, state_dir, self.pins),
            restored_at(state_dir),
            history.Record(state_dir),
        )

    def run(self, opts: PruneOptions) -> PruneReport:
        """One prune (or purge), every session old enough to go ending in the
        report (invariant 9):

        1. refuse a cutoff under the 24-hour floor (invariant 1);
        2. list every agent from the disk, into the index on the way;
        3. a scheduled run pauses, changing nothing, when the clock or the
           home looks wrong (pause);
        4. finish the journal's interrupted removals (recovery) and let the
           trash's due entries go: neither in a dry run;
        5. plan: the pure decision (plan.decide);
        6. act: leases taken, listed and checked again, journaled, removed;
        7. forget the removed sessions in the index;
        8. look again: what still names a removed session is residual;
        9. a prune (not a purge) removes the runtime leftovers;
        10. databases give back the free pages of removed rows (never while
           a process has one open, never in a dry run)."""
        if opts.purge is None:
            check_floor(opts.cutoffs, opts.now)
        report = _report(opts)
        views = self._list_all(opts)
        if opts.scheduled:
            # A paused run changes nothing, not even the trash.
            report.paused = pause_for(self.state_dir, views, opts, self.removing.activity)
            if report.paused:
                return report
        if not opts.dry_run:
            if finish_journal(self.removing, self.journal, views, report, opts.trash_for):
                views = self._list_all(opts)
            self.expiry.run(time.time())
        sessions = {agent: list(view.sessions.values()) for agent, view in views.items()}
        plan = decide(sessions, self.removing.watch.evidence(), opts, self.removing.restored)
        report.kept.extend(plan.kept)
        if _after_plan is not None:
            _after_plan()
        Act(self.removing, self.journal, views, opts, report).run(list(plan.candidates), plan.why)
        if report.removed and not opts.dry_run:
            self._index_write(lambda i: i.delete((r.agent, r.id) for r in report.removed))
        if not opts.dry_run:
            self._look_again(report)
        self._leftovers(report, opts)
        self._compact(report, opts)
        self.removing.record.summary()
        return report

    def _leftovers(self, report: PruneReport, opts: PruneOptions) -> None:
        """A prune takes the files agents leave by the process, not the session."""
        if opts.purge is not None or self.env is None:
            return
        report.leftovers = leftovers.collect(
            self.env.tmp_dirs,
            leftovers.kinds_for(opts.cutoffs),
            leftovers.asking(self.adapters),
            uid=self.env.uid,
            now=opts.now,
            dry_run=opts.dry_run,
        )

    def _compact(self, report: PruneReport, opts: PruneOptions) -> None:
        """Removed rows leave free pages, not free disk: give them back."""
        if opts.dry_run:
            return
        known = {os.fspath(db) for adapter in self.adapters.values() for db in adapter.databases()}
        uid = self.env.uid if self.env is not None else os.getuid()
        report.compacted = compaction.compact_all(
            self.state_dir, report.removed.databases, known, uid
        )

    def _look_again(self, report: PruneReport) -> None:
        """What still names a removed session, looked at again on the disk, is
        residual (an artifact kind the adapter does not know never vanishes)."""
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
            agent: estimate(expected_sessions(self.adapters[agent]), indexed(agent))
            for agent in opts.cutoffs
        }
        tally = Tally(opts.progress, "listing", estimates)
        views = {
            agent: self._list(agent, tally)
            for agent in sorted(opts.cutoffs, key=lambda agent: estimates[agent] is not None)
        }
        return {agent: views[agent] for agent in opts.cutoffs}

    def _list(self, agent: str, tally: Tally | None = None) -> DiskView:
        """The agent listed from the disk into a view, each session on its way
        to the index too. What the index does not take is listed into the
        view all the same; a failure of the listing is the run's, never
        taken for the index's."""
        view = DiskView(self.adapters[agent])
        listing = _listing(agent, self.adapters[agent].sessions(), view, tally)
        try:
            self._index_write(lambda i: i.replace_agent(agent, listing, self.removing.restored))
            for _ in listing:  # what the index did not take
                pass
        except _ListingFailed as failed:
            raise failed.error from None
        if tally is not None:
            tally.finish(agent)
        return view

    def _index_write(self, write: Callable[[Index], object]) -> None:
        """The index is a cache of the disk: a write that fails is logged and
        the prune, which works from the disk, goes on."""
        if self.index is None:
            return
        try:
            write(self.index)
        except (sqlite3.Error, OSError) as exc:
            log.error("index not updated", index=str(self.index.path), error=str(exc))


def _report(opts: PruneOptions) -> PruneReport:
    same = set(opts.cutoffs.values())
    return PruneReport(
        cutoff=same.pop() if len(same) == 1 and opts.purge is None else None,
        cutoffs={} if opts.purge is not None else dict(opts.cutoffs),
        dry_run=opts.dry_run,
        trash_until=opts.now + opts.trash_for if opts.trash_for > 0 else None,
    )


class _ListingFailed(Exception):
    """The adapter's failure, carried through the index's write, which
    would take an OSError for one of its own and go on."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _listing(
    agent: str, sessions: Iterator[Session], view: DiskView, tally: Tally | None
) -> Iterator[Session]:
    """An agent's sessions as listed from the disk, each put into the view."""
    while True:
        try:
            s = next(sessions)
        except StopIteration:
            return
        except Exception as exc:
            raise _ListingFailed(exc) from exc
        view.add(s)
        if tally is not None:
            tally.add(agent, 1)
        yield s
