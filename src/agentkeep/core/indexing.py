"""The index brought up to the disk: a full scan (spread over child processes
in a big home), a re-list of named sessions (watch events), and reconcile,
which re-lists only what changed. A permission change moves no mtime, so a
reconcile scans an agent again when a directory of it that could not be
listed now can, or the reverse."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from agentkeep import disk, fsio
from agentkeep.adapters import base
from agentkeep.adapters.base import (
    Adapter,
    Known,
    ScanPart,
    Split,
    WholeScan,
    listing_again_is_cheaper,
)
from agentkeep.children.scan import run_parts, worth_spreading
from agentkeep.core.context import Context
from agentkeep.index import Rows
from agentkeep.progress import Progress, Tally, estimate
from agentkeep.trash.entries import TrashError
from agentkeep.trash.restored import restored_at

log = structlog.get_logger("agentkeep.core")


def scan(ctx: Context, progress: Progress | None = None) -> dict[str, Any]:
    """The contract's scan counts, and `unreadable` (the places that could
    not be listed, by agent) when there are some."""
    started = time.monotonic()
    counts = _scan(ctx, list(ctx.adapters), progress)
    doc: dict[str, Any] = {
        "sessions": {agent: n for agent, (n, _, _) in counts.items()},
        "artifacts": sum(a for _, a, _ in counts.values()),
        "bytes": sum(b for _, _, b in counts.values()),
        "seconds": round(time.monotonic() - started, 3),
    }
    unreadable = ctx.index.unreadable()
    if unreadable:
        doc["unreadable"] = unreadable
    return doc


def _scan(
    ctx: Context, agents: list[str], progress: Progress | None = None
) -> dict[str, tuple[int, int, int]]:
    """Scan `agents` into the index in one transaction: counts per agent."""
    # Taken before anything is listed: a directory that changes during the
    # scan then differs at the next reconcile, which lists it again.
    unlisted = {agent: base.unlisted(ctx.adapters[agent]) for agent in agents}
    signatures = {a: _dir_signatures(ctx.adapters[a], unlisted[a])[1] for a in agents}
    split_of = {agent: ctx.adapters[agent].split() for agent in agents}
    hints = {agent: split.expected() if split else None for agent, split in split_of.items()}
    estimates = {a: estimate(hint, ctx.index.count(a)) for a, hint in hints.items()}
    expected = sum(n or 0 for n in estimates.values())
    # Agents that list here before they hand out parts go last: children
    # run the others' parts meanwhile, and the progress total is known early.
    order = sorted(agents, key=lambda agent: hints[agent] is not None)
    # One agent that does not split its scan would be one part: nothing to spread.
    splits = len(agents) > 1 or any(hint is not None for hint in hints.values())
    spread = splits and worth_spreading(expected)
    with collector_paused(), ctx.index.replacing(agents) as replacement:
        tally = Tally(progress, "scanning", estimates)
        parts = (
            (agent, part)
            for agent in order
            for part in tally.parts(agent, _parts(ctx.adapters[agent], split_of[agent]))
        )
        for agent, rows in run_parts(parts, _restored(ctx), spread=spread):
            replacement.add(agent, _counted(tally, agent, rows))
        tally.finish()
    for agent, signature in signatures.items():
        ctx.index.set_dir_signatures(agent, signature)
        ctx.index.set_unlisted(agent, unlisted[agent])
    return replacement.counts


def _parts(adapter: Adapter, split: Split | None) -> Iterator[ScanPart]:
    """The agent's scan as the parts its split() makes, else whole."""
    return split.parts() if split is not None else iter([WholeScan(adapter)])


def _counted(tally: Tally, agent: str, rows: Iterable[Rows]) -> Iterator[Rows]:
    """One part's rows, counted as the index takes them."""
    for batch in rows:
        yield batch
        tally.add(agent, len(batch.sessions))
    tally.part_done(agent)


class CollectorPause:
    """Python's cycle collector off while a scan runs (it makes many objects,
    none in a cycle). Counted, as daemon threads may scan at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scans = 0
        self._was_on = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._scans == 0:
                self._was_on = gc.isenabled()
                gc.disable()
            self._scans += 1
        try:
            yield
        finally:
            with self._lock:
                self._scans -= 1
                if self._scans == 0 and self._was_on:
                    gc.enable()


collector_paused = CollectorPause()


def _restored(ctx: Context) -> dict[tuple[str, str], float]:
    """When sessions were last restored; an unreadable record costs the index
    only its restore times (a prune refuses to run without them)."""
    try:
        return restored_at(ctx.state_dir)
    except TrashError as exc:
        log.error("restore times unreadable", error=str(exc))
        return {}


def _dir_signatures(
    adapter: Adapter, unlisted: Collection[str]
) -> tuple[dict[str, int | None], dict[str, int | None]]:
    """The mtimes of the agent's watched directories, and the signature the
    index keeps: None for one too recent to vouch for (disk.signed) or one
    that cannot be listed, so it is looked at again."""
    mtimes, signature = disk.signed(adapter.watch_dirs())
    return mtimes, {d: None if d in unlisted else m for d, m in signature.items()}


def refresh(ctx: Context, agent: str, session_id: str) -> None:
    """List one session again from the disk into the index (watch events)."""
    relist(ctx, agent, [session_id])


# Sessions listed again per pass (and per index transaction) by reconcile.
RELIST_BATCH = 256


def relist(
    ctx: Context, agent: str, session_ids: list[str], vanished: Collection[str] = ()
) -> None:
    """List sessions again from the disk into the index, one listing pass and
    one transaction per batch. Of `vanished` (every path an event named is
    gone), those the index does not know are left alone."""
    adapter = ctx.adapters.get(agent)
    if vanished:
        indexed = {s.id for s in ctx.index.sessions_of(agent, vanished)}
        session_ids = [sid for sid in session_ids if sid not in vanished or sid in indexed]
    if adapter is None or not session_ids:
        return
    restored = _restored(ctx)
    # The index's own view of the disk: a few sessions listed again cost a
    # look at what they had and what changed, not at every shared directory.
    known = Known(ctx.index.dir_signatures(agent))
    for start in range(0, len(session_ids), RELIST_BATCH):
        batch = session_ids[start : start + RELIST_BATCH]
        known.learn(a.path for sid in batch for a in ctx.index.artifacts(agent, sid))
        listed = base.listed(adapter, batch, known)
        gone = [(agent, sid) for sid, s in listed.items() if s is None]
        present = [s for s in listed.values() if s is not None]
        ctx.index.put(present, restored, gone=gone)


def reconcile(ctx: Context, progress: Progress | None = None) -> int:
    """Bring the index up to date cheaply: re-list only sessions whose indexed
    artifacts changed on disk, and those named by entries new in directories
    whose mtime changed. Returns how many were re-listed (or scanned)."""
    olds = {name: ctx.index.dir_signatures(name) for name in ctx.adapters}
    # Never indexed: one full scan of all of them, nothing to re-list after it.
    fresh = [name for name, old in olds.items() if not old]
    done = sum(n for n, _, _ in _scan(ctx, fresh, progress).values()) if fresh else 0
    for name, adapter in ctx.adapters.items():
        if name in fresh:
            continue
        unlisted = base.unlisted(adapter)
        if _listability_changed(ctx, name, unlisted):
            done += _scan(ctx, [name], progress)[name][0]
            continue
        old, (new, signature) = olds[name], _dir_signatures(adapter, unlisted)
        moved = {d for d in new if old.get(d) != new[d]}
        done += _reconcile_agent(ctx, name, adapter, moved, progress)
        ctx.index.set_dir_signatures(name, signature)
    return done


def _listability_changed(ctx: Context, agent: str, now: dict[str, str]) -> bool:
    """Whether a directory of the agent that could not be listed now can (or
    is gone), or one that could now cannot (`now`): then the agent is scanned.
    Recorded meanwhile when nothing changed."""
    recorded = ctx.index.unreadable(agent).get(agent, [])
    cleared = (p for p in recorded if p not in now and fsio.list_problem(p) is None)
    if now.keys() - set(recorded) or any(cleared):
        log.info("listable directories changed; scanning again", agent=agent)
        return True
    if now != ctx.index.unlisted(agent):
        ctx.index.set_unlisted(agent, now)
    return False


def _reconcile_agent(
    ctx: Context, agent: str, adapter: Adapter, moved: set[str], progress: Progress | None
) -> int:
    """What changed of one agent's sessions, listed again (or scanned)."""
    gone, newer, known = _changed_artifacts(ctx, agent, moved)
    unknown = [p for d in sorted(moved) for p in fsio.entry_paths(d) if p not in known]
    if listing_again_is_cheaper(len(gone) + len(newer) + len(unknown), ctx.index.count(agent)):
        return _scan(ctx, [agent], progress)[agent][0]
    # A newer file may name another session now (a registry file rewritten
    # by a /clear); a new entry names a new session or a new artifact.
    sids = set(gone) | {sid for _, sid in newer}
    sids |= base.sessions_named(adapter, (path for path, _ in newer))
    sids |= base.sessions_named(adapter, unknown)
    relist(ctx, agent, sorted(sids))
    return len(sids)


def _changed_artifacts(
    ctx: Context, agent: str, moved: set[str]
) -> tuple[set[str], list[tuple[str, str]], set[str]]:
    """One lstat per indexed artifact: the sessions with an artifact gone,
    (path, session) of those newer on disk (or undated), and the indexed
    paths directly in the `moved` directories (entries there that the index
    does not hold are what is new)."""
    gone: set[str] = set()
    newer: list[tuple[str, str]] = []
    known: set[str] = set()
    for sid, path, mtime in ctx.index.artifact_times(agent):
        if moved and os.path.dirname(path) in moved:
            known.add(path)
        try:
            st = os.lstat(path)
        except OSError:
            gone.add(sid)
            continue
        if mtime is None or st.st_mtime > mtime:
            newer.append((path, sid))
    return gone, newer, known
