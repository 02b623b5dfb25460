"""The prune's act: the plan carried out a batch at a time. Each candidate's
leases are taken exclusively, the batch is listed again from the disk and
checked again under them, journaled once, and removed."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from agentkeep import descriptors, leases
from agentkeep.config.values import MIN_RETENTION
from agentkeep.journal import Journal, JournalEntry
from agentkeep.model import Reason, Session
from agentkeep.prune.plan import AGE, PURGE, SIZE, ancestors, check_again
from agentkeep.prune.remove import Removing
from agentkeep.prune.report import Failed, Kept, PruneOptions, PruneReport, Removed
from agentkeep.prune.view import DiskView
from agentkeep.rmtree import Parents

log = structlog.get_logger("agentkeep.prune")

# Sessions checked under their leases and journaled together (one durable
# write per batch); each holds its leases until it is removed.
BATCH = 1024
# Descriptors a held session takes at most (its lease, its agent's lock
# file), and those the rest of a prune uses meanwhile.
FDS_PER_SESSION = 2
FDS_BESIDE = 128

# Set by the daemon when it is told to stop: a run in flight finishes the
# session it is removing and keeps the rest (`capped`) for the next run.
STOP = threading.Event()


def _batch_size() -> int:
    """BATCH, or as many sessions as fit with their leases in the files this
    process may open (its limit first raised towards what BATCH needs)."""
    soft = descriptors.allow(BATCH * FDS_PER_SESSION + FDS_BESIDE)
    return max(1, min(BATCH, (soft - FDS_BESIDE) // FDS_PER_SESSION))


def since(why: str, agent: str, opts: PruneOptions) -> float:
    """Activity from this time on keeps a planned session (invariant 4):
    the cutoff it is idle past; for one going for size, the 24-hour floor
    (it may be younger than any retention); for a purge, its start."""
    if why == PURGE:
        return opts.now
    cutoff = opts.cutoffs.get(agent)
    if why == SIZE or cutoff is None:
        return opts.now - MIN_RETENTION
    return cutoff


@dataclass
class _Held:
    """A planned session whose leases are held (once checked, as listed again)."""

    session: Session
    taken: leases.Taken
    why: str

    def entry(self, opts: PruneOptions) -> JournalEntry:
        """Its journal entry."""
        s = self.session
        paths = [a.path for a in s.artifacts]
        cutoff = None if self.why == PURGE else since(self.why, s.agent, opts)
        return JournalEntry(s.agent, s.id, time.time(), paths, opts.trash_for > 0, cutoff)


class Act:
    """One run's act on its plan, told to the report (and opts.progress) as it goes."""

    def __init__(
        self,
        removing: Removing,
        journal: Journal,
        views: dict[str, DiskView],
        opts: PruneOptions,
        report: PruneReport,
    ) -> None:
        self.removing = removing
        self.journal = journal
        self.views = views
        self.opts = opts
        self.report = report
        self.planned: set[tuple[str, str]] = set()
        self.kept = {(k.agent, k.id) for k in report.kept}
        self.removed: set[tuple[str, str]] = set()
        self._before = (len(report.removed), len(report.kept), len(report.failed))
        self._to_cap = False
        self.goal = 0

    def run(self, plan: list[Session], why: Mapping[tuple[str, str], str]) -> None:
        """Act on `plan` (in removal order; `why` each goes) a batch at a
        time: a batch ends at _batch_size(), before a session whose child
        waits in it (a parent is checked once its children are gone), and
        at max_removals."""
        self._count(plan)
        size = _batch_size()
        batch: list[_Held] = []
        waiting: set[tuple[str, str]] = set()
        for s in plan:
            if s.key in self.kept:
                continue
            if batch and (
                len(batch) == size or self._parent_of_any(s, waiting) or self._capped(len(batch))
            ):
                self._remove_batch(self._checked(batch))
                batch, waiting = [], set()
            if STOP.is_set():
                self._stay(Kept(s.agent, s.id, Reason.CAPPED, "agentkeep is stopping"))
            elif self._capped():
                self._stay(Kept(s.agent, s.id, Reason.CAPPED, "over max_removals"))
            elif isinstance(taken := self.removing.take(s, dry_run=self.opts.dry_run), Kept):
                self._stay(taken)
            else:
                batch.append(_Held(s, taken, why.get(s.key, AGE)))
                waiting.add(s.key)
        if batch:
            self._remove_batch(self._checked(batch))

    def _parent_of_any(self, s: Session, waiting: set[tuple[str, str]]) -> bool:
        return any((s.agent, child) in waiting for child in self.views[s.agent].children(s.id))

    def _capped(self, pending: int = 0) -> bool:
        """max_removals caps every prune; a purge names its sessions and is not counted."""
        if self.opts.purge is not None or self.opts.max_removals is None:
            return False
        return len(self.report.removed) + pending >= self.opts.max_removals

    def _checked(self, batch: list[_Held]) -> list[_Held]:
        """Invariant 4: with every lease of the batch held, its sessions listed
        from the disk again and each checked again (plan.check_again). Those
        still to go, in the plan's order, as listed again; the rest released."""
        fresh: dict[str, dict[str, Session | None]] = {}
        for agent in dict.fromkeys(h.session.agent for h in batch):
            view = self.views[agent]
            fresh[agent] = view.listed_again(
                [h.session.id for h in batch if h.session.agent == agent]
            )
            view.refresh()  # a fork made after the plan shows as a child from here on
        # Read with every lease held: a process started since the plan shows.
        evidence = self.removing.watch.evidence(fresh=True)
        ready = []
        for held in batch:
            agent = held.session.agent
            s = fresh[agent][held.session.id]
            kept = None
            if s is not None:
                kept = check_again(
                    s,
                    self.removing.activity(s),
                    since=since(held.why, agent, self.opts),
                    evidence=evidence,
                    children=[
                        c
                        for c in self.views[agent].children(s.id)
                        if (agent, c) not in self.removed
                    ],
                    purge=held.why == PURGE,
                )
            if s is None or kept is not None:
                held.taken.release()  # gone already, or it stays
                if kept is not None:
                    self._stay(kept)
            else:
                held.session = s
                ready.append(held)
        return ready

    def _remove_batch(self, batch: list[_Held]) -> None:
        """Remove sessions held and checked. Invariant 5: the batch's journal
        entry is durable before anything is removed."""
        if not batch:
            return
        parents = Parents()
        try:
            written = self._journal(batch)
            if written is None and not self.opts.dry_run:
                return
            unfinished = [r for n, r in enumerate(batch) if not self._remove_one(n, r, parents)]
            if written is not None:
                self._end_batch(written, unfinished)
        finally:
            parents.close()
            for r in batch:
                r.taken.release()

    def _journal(self, batch: list[_Held]) -> Path | None:
        """The batch journaled (None for a dry run); a journal that cannot be
        written fails the batch: a removal nobody can finish must not begin."""
        if self.opts.dry_run:
            return None
        try:
            return self.journal.begin_batch([r.entry(self.opts) for r in batch])
        except OSError as exc:
            why = f"cannot write the journal {self.journal.dir}: {exc.strerror or exc}"
            log.error("journal write failed; this batch removes nothing", error=why)
            for r in batch:
                self._fail(Failed(r.session.agent, r.session.id, why), r.session)
            return None

    def _remove_one(self, n: int, held: _Held, parents: Parents) -> bool:
        """Remove one session of a batch; False when it failed half way (its
        journal entry stays). Told to stop, the rest of the batch stays."""
        s = held.session
        if n and STOP.is_set():
            self._stay(Kept(s.agent, s.id, Reason.CAPPED, "agentkeep is stopping"))
            return True
        outcome = self.removing.remove(
            s,
            dry_run=self.opts.dry_run,
            trash_for=self.opts.trash_for,
            now=self.opts.now,
            gone=lambda sid: (s.agent, sid) in self.removed,
            parents=parents,
            why=held.why,
        )
        if isinstance(outcome, Removed):
            if not self.opts.dry_run:
                held.taken.discard()  # the session is gone: its lease file too
            held.taken.release()
            self._removed_one(outcome)
            return True
        held.taken.release()
        self._fail(outcome, s)
        return False

    def _end_batch(self, written: Path, unfinished: list[_Held]) -> None:
        """Forget the batch, except the removals that failed half way."""
        if not unfinished:
            self.journal.end_batch(written)
            return
        try:
            self.journal.narrow_batch(written, [r.entry(self.opts) for r in unfinished])
        except OSError as exc:
            # The whole batch stays: the next run finds the rest gone.
            log.error("journal not narrowed", path=str(written), error=str(exc))

    def _count(self, plan: list[Session]) -> None:
        """What opts.progress is told: the planned sessions decided so far, or,
        when max_removals stops the run first, the removals toward it."""
        self.planned = {s.key for s in plan}
        opts, removed = self.opts, self._before[0]
        room = None if opts.max_removals is None else max(0, opts.max_removals - removed)
        self._to_cap = opts.purge is None and room is not None and room < len(plan)
        self.goal = room if self._to_cap and room is not None else len(plan)
        self._tell()

    def _tell(self) -> None:
        if self.opts.progress is None:
            return
        r, (removed, kept, failed) = self.report, self._before
        done = len(r.removed) - removed
        if not self._to_cap:
            done += len(r.kept) - kept + len(r.failed) - failed
        self.opts.progress("checking" if self.opts.dry_run else "pruning", done, self.goal)

    def _removed_one(self, outcome: Removed) -> None:
        self.report.removed.append(outcome)
        self.report.residual.extend((outcome.agent, outcome.id, p) for p in outcome.residual)
        self.removed.add((outcome.agent, outcome.id))
        self._tell()

    def _stay(self, outcome: Kept) -> None:
        """`outcome` stays, and so does every ancestor waiting in the plan."""
        self.report.kept.append(outcome)
        self.kept.add((outcome.agent, outcome.id))
        self._ancestors_stay(outcome.agent, outcome.id)
        self._tell()

    def _fail(self, outcome: Failed, session: Session) -> None:
        """`session` failed: its ancestors stay."""
        self.report.failed.append(outcome)
        self._ancestors_stay(session.agent, session.id)
        self._tell()

    def _ancestors_stay(self, agent: str, sid: str) -> None:
        """A session stays: so does every ancestor still waiting in the plan
        (recent ancestors stay anyway and are not old enough to report)."""
        for parent in ancestors(sid, self.views[agent].parent_of):
            if (agent, parent) not in self.kept and (agent, parent) in self.planned:
                self.kept.add((agent, parent))
                self.report.kept.append(Kept(agent, parent, Reason.ANCESTOR, f"parent of {sid}"))
