"""What the sessions take and what a prune would give back (`du`, and the
reclaimable part `du`, `ls` and the first-hour hint show): the prune's own
plan (plan.decide) of the sessions as indexed, so the two never disagree on
a rule."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from agentkeep.core.bykind import Group, du_by_kind
from agentkeep.core.context import Context
from agentkeep.errors import BadParams
from agentkeep.index import IndexedSession
from agentkeep.model import Holder, HolderKind, Session, State, rfc3339
from agentkeep.prune.evidence import Observed, indexed, survey
from agentkeep.prune.plan import PrunePlan, decide
from agentkeep.prune.report import PruneOptions
from agentkeep.verdict import Plans, Verdict

Key = tuple[str, str]

SUGGESTED_RETENTION = "30d"
SUGGESTED_SECONDS = 30 * 86400.0


def du(ctx: Context, by: str = "agent") -> dict[str, Any]:
    """The contract's du shape, by agent, workspace or kind."""
    if by not in ("agent", "workspace", "kind"):
        raise BadParams(f"--by must be agent, workspace or kind, not {by!r}")
    reclaim = reclaimable(ctx)
    if by == "kind":
        return du_by_kind(ctx, reclaim)
    groups: dict[str, Group] = {}
    for s in ctx.index.each_session():
        key = s.agent if by == "agent" else (s.workspace or "(unknown)")
        g = groups.get(key) or groups.setdefault(key, Group(key))
        g.add(s.bytes, s.disk_bytes, reclaimable=(s.agent, s.id) in reclaim)
        g.sessions += 1
    ordered = sorted(groups.values(), key=lambda g: (-g.bytes, g.key))
    return {"by": by, "groups": [asdict(g) for g in ordered]}


def reclaimable(
    ctx: Context,
    retention: float | None = None,
    known: Mapping[Key, str] | None = None,
    rows: list[IndexedSession] | None = None,
) -> set[Key]:
    """Sessions a prune would remove now (ignoring max_removals). `retention`
    overrides the config's; `known`: states just looked at (an `ls`
    listing's); `rows`: the index's sessions, when read already."""
    plan = _indexed_plan(ctx, retention, known, rows)
    return set() if plan is None else {s.key for s in plan.candidates}


def _indexed_plan(
    ctx: Context,
    retention: float | None = None,
    known: Mapping[Key, str] | None = None,
    rows: list[IndexedSession] | None = None,
) -> PrunePlan | None:
    """The prune's own plan (decide) of the sessions as indexed, now; None
    when nothing would be pruned at all (no retention, no size cap)."""
    now = time.time()
    cutoffs = ctx.cutoffs(retention, None, now)
    if not cutoffs:
        return None
    sessions: dict[str, list[Session]] = {agent: [] for agent in cutoffs}
    old: dict[str, list[str]] = {}
    known = known or {}
    for r in ctx.index.sessions() if rows is None else rows:
        if r.agent not in sessions:
            continue  # no retention: it stays, and so do its ancestors
        sessions[r.agent].append(indexed(r))
        cutoff = cutoffs[r.agent]
        # The use of those old enough by age is looked up at once; the plan
        # asks about the rest (a size cap's) one by one, when it must.
        dated_old = cutoff is not None and r.last_activity is not None and r.last_activity < cutoff
        if dated_old and (r.agent, r.id) not in known:
            old.setdefault(r.agent, []).append(r.id)
    watch = ctx.watch()
    looked = survey(watch, ctx.index, old) if old else Observed(pins=frozenset(watch.pins))
    seen = _with_known(looked, known)
    options = PruneOptions(cutoffs=cutoffs, now=now, shapes=ctx.shapes(retention))
    return decide(sessions, seen, options)


def plan_words(ctx: Context, session: dict[str, Any]) -> Verdict:
    """What the plan says of one indexed session (its `ls` row), in words."""
    plan = _indexed_plan(ctx)
    now = time.time()
    if plan is None:
        return Plans(None, "no retention and no max_size are set", now, [session]).of(
            session["agent"], session["id"]
        )
    report = {
        "removed": [
            {"agent": s.agent, "id": s.id, "why": plan.why[s.key]} for s in plan.candidates
        ],
        "kept": [
            {"agent": k.agent, "id": k.id, "reason": k.reason.value, "detail": k.detail}
            for k in plan.kept
        ],
        "failed": [],
        "cutoffs": {a: rfc3339(c) for a, c in plan.cutoffs.items()},
        "trash": {} if ctx.config.trash > 0 else None,
    }
    return Plans(report, None, now, [session]).of(session["agent"], session["id"])


_LISTED_LIVE = Holder(None, HolderKind.PROCESS, "live when listed")


def _with_known(looked: Observed, known: Mapping[Key, str]) -> Observed:
    """`looked`, with the states a listing just gave as the evidence they stand for."""
    return Observed(
        {**looked.holding, **{k: (_LISTED_LIVE,) for k, s in known.items() if s == State.LIVE}},
        {**looked.leased, **{k: "held when listed" for k, s in known.items() if s == State.HELD}},
        looked.pins | {k for k, s in known.items() if s == State.PINNED},
    )


def reclaim_hint(ctx: Context, known: Mapping[Key, str] | None = None) -> dict[str, Any] | None:
    """With no retention configured (and a good config): what a 30-day
    retention would reclaim. `known`: as reclaimable() takes it."""
    if ctx.config.has_retention() or ctx.config_error:
        return None
    rows = ctx.index.sessions()
    keys = reclaimable(ctx, SUGGESTED_SECONDS, known, rows)
    total = sum(s.bytes for s in rows if (s.agent, s.id) in keys)
    return {
        "retention": SUGGESTED_RETENTION,
        "sessions": len(keys),
        "bytes": total,
        "config_line": f'retention = "{SUGGESTED_RETENTION}"',
        "config_path": str(ctx.env.config_path),
    }
