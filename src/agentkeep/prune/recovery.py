"""Finishing the journal: a removal killed half way is finished by the
next run (invariant 5), held to the rules of a fresh removal."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Protocol, cast

import structlog

from agentkeep import disk, leases, trash
from agentkeep.adapters.base import Adapter
from agentkeep.errors import RemovalError
from agentkeep.journal import Journal, JournalEntry
from agentkeep.model import Reason, Session, rfc3339
from agentkeep.prune.evidence import Watch
from agentkeep.prune.plan import ancestors, static_reason
from agentkeep.prune.report import Failed, Kept, PruneReport, Removed
from agentkeep.prune.view import DiskView
from agentkeep.removal import SessionRemoval

log = structlog.get_logger("agentkeep.prune")


class Remover(Protocol):
    """What finishing needs of the prune's act (act.Pruner)."""

    adapters: dict[str, Adapter]
    state_dir: Path
    journal: Journal
    watch: Watch
    restored: dict[tuple[str, str], float]

    def activity(self, s: Session) -> float | None: ...

    def removal(
        self, s: Session, *, dry_run: bool, trash_for: float, now: float
    ) -> SessionRemoval: ...

    def close_trash(self, removal: SessionRemoval) -> None: ...


def finish_journal(
    p: Remover, views: dict[str, DiskView], report: PruneReport, trash_for: float
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
    unsettled = p.journal.pending()
    # Descendants first, as a plan orders them: a child finished here
    # no longer keeps its parent.
    unsettled.sort(key=lambda e: -_journal_depth(p, e, views))
    removed: set[tuple[str, str]] = set()
    for entry in list(unsettled):
        adapter = p.adapters.get(entry.agent)
        if adapter is None:
            continue
        try:
            lease = leases.try_exclusive(leases.lease_path(p.state_dir, entry.agent, entry.id))
        except leases.LeaseError as exc:
            report.failed.append(Failed(entry.agent, entry.id, f"finishing: {exc}"))
            continue
        if lease is None:
            # Held: kept, and finished by a later run.
            report.kept.append(Kept(entry.agent, entry.id, Reason.HELD, "finishing: lease held"))
            continue
        try:
            done = _finish_one(p, adapter, entry, views, removed, report, trash_for)
        except (RemovalError, trash.TrashError, OSError) as exc:
            report.failed.append(Failed(entry.agent, entry.id, f"finishing: {exc}"))
            lease.release()
            continue
        if done is not None:
            lease.discard()  # the session is gone: so is its lease file
        lease.release()
        unsettled = [e for e in unsettled if e is not entry]
        p.journal.settle(entry, unsettled)
        if done is not None:
            removed.add((done.agent, done.id))
            report.removed.append(done)
            report.residual.extend((done.agent, done.id, p) for p in done.residual)
            finished = True
    return finished


def _journal_depth(p: Remover, entry: JournalEntry, views: dict[str, DiskView]) -> int:
    view = views.get(entry.agent)
    return sum(1 for _ in ancestors(entry.id, view.parent_of)) if view else 0


def _finish_one(
    p: Remover,
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
    kept = _finishing_keeps(p, s, entry, views.get(entry.agent), removed)
    if kept is not None:
        log.info("an interrupted removal is not finished", agent=s.agent, id=s.id, why=kept.reason)
        report.kept.append(kept)
        return None
    removal = p.removal(
        s, dry_run=False, trash_for=trash_for if entry.trash else 0.0, now=time.time()
    )
    try:
        adapter.remove(s, removal)
    finally:
        p.close_trash(removal)
    log.info("finished an interrupted removal", agent=s.agent, id=s.id)
    trashed = removal.trash.entry.bytes if removal.trash is not None else 0
    return Removed(
        s.agent, s.id, s.bytes, p.activity(s), removal.removed, removal.residuals, trashed
    )


def _finishing_activity(p: Remover, s: Session) -> float | None:
    """The session's activity, with the directories' own mtimes left out:
    the interrupted removal moved them, and only a write says the
    session was used since (a file's mtime)."""
    times = [p.restored.get(s.key), s.updated]
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
    p: Remover,
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
    activity = _finishing_activity(p, s)
    if activity is None and not purge:
        return Kept(s.agent, s.id, Reason.UNDATED, "finishing: a time of it cannot be read")
    since = entry.started if purge else min(entry.started, cast(float, entry.cutoff))
    if activity is not None and activity >= since:
        return Kept(s.agent, s.id, Reason.UPDATED, f"finishing: written at {rfc3339(activity)}")
    evidence = p.watch.evidence(fresh=True)
    static = static_reason(s, evidence, p.activity(s), purge=purge, under_lease=True)
    if static is not None:
        return static
    children = [] if view is None else view.children(s.id)
    staying = [c for c in children if (s.agent, c) not in removed]
    if staying:
        return Kept(s.agent, s.id, Reason.ANCESTOR, f"parent of {staying[0]}")
    return None
