"""Finishing the journal: a removal killed half way is finished by the next
run (invariant 5), through the steps of a fresh removal (Removing.take,
plan.check_again, Removing.remove)."""

from __future__ import annotations

import math
import time
from typing import cast

import structlog

from agentkeep import disk
from agentkeep.adapters.base import load
from agentkeep.errors import RemovalError
from agentkeep.journal import Journal, JournalEntry
from agentkeep.model import Artifact, Session
from agentkeep.prune.plan import AGE, PURGE, ancestors, check_again
from agentkeep.prune.remove import Removing
from agentkeep.prune.report import Failed, Kept, PruneReport, Removed
from agentkeep.prune.view import DiskView
from agentkeep.trash.entries import TrashError

log = structlog.get_logger("agentkeep.prune")


def finish_journal(
    removing: Removing,
    journal: Journal,
    views: dict[str, DiskView],
    report: PruneReport,
    trash_for: float,
) -> bool:
    """Finish each removal the journal names, descendants first, each taken,
    listed again and checked again as a fresh removal is. A session whose
    primary record is there is left to the plan. What is finished or kept
    is in the report (invariant 9). True when anything was removed."""
    pending = journal.pending()
    pending.sort(key=lambda e: -_depth(e, views))
    removed: set[tuple[str, str]] = set()
    for entry in list(pending):
        if entry.agent not in removing.adapters:
            continue
        try:
            done = _finish(removing, entry, views, removed, report, trash_for)
        except (RemovalError, TrashError, OSError) as exc:
            report.failed.append(Failed(entry.agent, entry.id, f"finishing: {exc}"))
            continue
        if done is False:
            continue  # held: finished by a later run
        pending = [e for e in pending if e is not entry]
        journal.settle(entry, pending)
        if isinstance(done, Removed):
            removed.add((done.agent, done.id))
            report.removed.append(done)
            report.residual.extend((done.agent, done.id, p) for p in done.residual)
    return bool(removed)


def _depth(entry: JournalEntry, views: dict[str, DiskView]) -> int:
    view = views.get(entry.agent)
    return sum(1 for _ in ancestors(entry.id, view.parent_of)) if view else 0


def _finish(
    removing: Removing,
    entry: JournalEntry,
    views: dict[str, DiskView],
    removed: set[tuple[str, str]],
    report: PruneReport,
    trash_for: float,
) -> Removed | None | bool:
    """One journaled removal: Removed when finished; None when there is
    nothing to finish (gone, or left to the plan); False when it waits for
    a later run (held, or kept and no listing shows it)."""
    adapter = removing.adapters[entry.agent]
    taken = removing.take(Session(entry.agent, entry.id), dry_run=False)
    if isinstance(taken, Kept):
        report.kept.append(Kept(taken.agent, taken.id, taken.reason, f"finishing: {taken.detail}"))
        return False
    try:
        s = load(adapter, entry.id)
        if s is None or s.primary:
            return None
        view = views.get(entry.agent)
        children = [] if view is None else view.children(s.id)
        purge = entry.cutoff is None
        # Activity since the removal began keeps it, or since the cutoff it
        # began under (a purge: whatever its age, not whatever is written since).
        since = entry.started if purge else min(entry.started, cast(float, entry.cutoff))
        kept = check_again(
            s,
            _activity(removing, s),
            since=since,
            evidence=removing.watch.evidence(fresh=True),
            children=[c for c in children if (s.agent, c) not in removed],
            purge=purge,
        )
        if kept is not None:
            log.info("an interrupted removal is not finished", agent=s.agent, id=s.id, why=kept)
            report.kept.append(kept)
            # One the listing shows is the plan's from here on; one it does not
            # (rows left without their record) has only this entry: it waits.
            return None if view is not None and s.id in view.sessions else False
        done = removing.remove(
            s,
            dry_run=False,
            trash_for=trash_for if entry.trash else 0.0,
            now=time.time(),
            why=PURGE if purge else AGE,
        )
        if isinstance(done, Failed):
            raise RemovalError(done.reason)
        log.info("finished an interrupted removal", agent=s.agent, id=s.id)
        taken.discard()  # the session is gone: so is its lease file
        return done
    finally:
        taken.release()


def _activity(removing: Removing, s: Session) -> float | None:
    """The session's activity without the directories' own mtimes (the
    interrupted removal moved them) and without undated rows (_undated_rows)."""
    if s.undated:
        return None
    times = [removing.restored.get(s.key), s.updated]
    for a in s.own_artifacts:
        if _undated_rows(a):
            continue
        # A file, or rows: as listed; a directory: its newest file.
        t = a.mtime if a.root is None or not a.is_dir else disk.newest_file_mtime(a.path)
        if t is None:
            return None
        times.append(t)
    known = [t for t in times if t is not None and t != -math.inf]
    return max(known) if known else -math.inf


def _undated_rows(artifact: Artifact) -> bool:
    """Rows with no time of their own: an adapter dates rows by the record the
    session is listed by, which a removal takes first (invariant 5), so they
    say nothing of a use since; taken for an unreadable time they would keep
    a half-removed session `undated` for good."""
    return artifact.root is None and not artifact.primary and artifact.mtime is None
