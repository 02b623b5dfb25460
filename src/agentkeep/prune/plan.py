"""The prune's plan, a pure value: which sessions go, in which order, and why
every other old session stays. decide() touches no disk and no process
itself (the evidence it is given may look)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from agentkeep.config.values import MIN_RETENTION
from agentkeep.model import Reason, Session, rfc3339
from agentkeep.prune import shapes
from agentkeep.prune.evidence import Evidence
from agentkeep.prune.report import Kept, PruneOptions, PruneRefused

Key = tuple[str, str]
AGE, SIZE, PURGE = "age", "size", "purge"


@dataclass(frozen=True)
class PrunePlan:
    """`candidates` in removal order, with `why` each goes (AGE, SIZE or
    PURGE); `kept`: every old session that stays, with why, in the order found."""

    candidates: tuple[Session, ...]
    kept: tuple[Kept, ...]
    cutoffs: Mapping[str, float | None]
    why: Mapping[Key, str]


def check_floor(cutoffs: Mapping[str, float | None], now: float) -> None:
    """Invariant 1: nothing updated in the last 24 hours is ever pruned,
    enforced inside the prune whatever the caller checked."""
    for agent, cutoff in cutoffs.items():
        if cutoff is not None and (not math.isfinite(cutoff) or cutoff > now - MIN_RETENTION):
            raise PruneRefused(
                f"refused: the cutoff for {agent} is less than 24 hours ago; "
                "nothing updated in the last 24 hours is ever pruned"
            )


def ancestors(session_id: str, parent_of: Callable[[str], str | None]) -> Iterator[str]:
    """Every ancestor of a session, nearest first; survives cycles."""
    seen = {session_id}
    current = parent_of(session_id)
    while current is not None and current not in seen:
        seen.add(current)
        yield current
        current = parent_of(current)


def descendants(session_id: str, children_of: Callable[[str], Iterable[str]]) -> list[str]:
    """Every descendant of a session, each after its parent; survives cycles."""
    out: list[str] = []
    stack, seen = [session_id], {session_id}
    while stack:
        for child in children_of(stack.pop()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                stack.append(child)
    return out


def known_activity(s: Session, restored: float | None) -> float | None:
    """The newest time of the session that could be read (for ordering and age
    only: an unreadable time keeps it, see static_reason)."""
    times = [a.mtime for a in s.own_artifacts if a.mtime is not None]
    times += [t for t in (s.updated, restored) if t is not None]
    return max(times) if times else None


def static_reason(
    s: Session,
    evidence: Evidence,
    activity: float | None,
    *,
    purge: bool = False,
    under_lease: bool = False,
) -> Kept | None:
    """Why a session stays whatever its age (invariants 2 and 4); a purge
    ignores age, and so an unreadable time. `under_lease`: the caller holds
    every lease of it exclusively (leases.take_session), so nobody else does."""
    if not purge and activity is None:
        if s.unsafe:  # a place that cannot be listed leaves it undated too: say why
            return Kept(s.agent, s.id, Reason.UNSAFE, s.unsafe)
        return Kept(s.agent, s.id, Reason.UNDATED, "a time of it cannot be read")
    holders = evidence.holders(s)
    if holders:
        return Kept(s.agent, s.id, Reason.LIVE, holders[0].describe())
    held = None if under_lease else evidence.lease(s)
    if held:
        return Kept(s.agent, s.id, Reason.HELD, held)
    if evidence.pinned(s):
        return Kept(s.agent, s.id, Reason.PINNED, "pinned")
    if s.unsafe:
        return Kept(s.agent, s.id, Reason.UNSAFE, s.unsafe)
    return None


def check_again(
    s: Session,
    activity: float | None,
    *,
    since: float,
    evidence: Evidence,
    children: Sequence[str],
    purge: bool,
) -> Kept | None:
    """Invariant 4, the last word before a removal, for `s` listed again from
    the disk under all its leases: written at or after `since`, live,
    pinned, unsafe, or the parent of one of `children` (still there): it
    stays. The act and the journal's finish both decide here."""
    if not purge and activity is None:
        return Kept(s.agent, s.id, Reason.UNDATED, "a time of it cannot be read")
    if activity is not None and activity >= since:
        return Kept(s.agent, s.id, Reason.UPDATED, f"written at {rfc3339(activity)}")
    static = static_reason(s, evidence, activity, purge=purge, under_lease=True)
    if static is not None:
        return static
    if children:
        return Kept(s.agent, s.id, Reason.ANCESTOR, f"parent of {children[0]}")
    return None


def decide(
    sessions: Mapping[str, Sequence[Session]],
    evidence: Evidence,
    options: PruneOptions,
    restored: Mapping[Key, float] | None = None,
) -> PrunePlan:
    """The plan for `sessions` (each agent's, as listed). `restored`: when a
    session was last restored from the trash. Refused under the floor.

    Old enough to go: idle past the agent's cutoff (or named by a purge). Of
    those, each stays that static_reason keeps or that is one of the
    keep_last most recent; then every ancestor of one that stays. Last,
    while a max_size is exceeded, the longest idle others go too."""
    restored = restored or {}
    purge = options.purge is not None
    if not purge:
        check_floor(options.cutoffs, options.now)
    by_id = {agent: {s.id: s for s in listed} for agent, listed in sessions.items()}
    kept: dict[Key, Kept] = {}
    candidates: list[Session] = []
    staying: list[Key] = []
    recent_keys: set[Key] = set()
    for agent, listed in by_id.items():
        targets = _targets(agent, listed.values(), options, restored)
        shape = options.shapes.get(agent)
        recent: dict[str, str] = {}
        if shape is not None and not purge:
            recent = shapes.recent(
                listed.values(), shape.keep_last, lambda s: known_activity(s, restored.get(s.key))
            )
        recent_keys.update((agent, sid) for sid in recent)
        for s in listed.values():
            if s.id not in targets:
                staying.append(s.key)
                continue
            activity = s.last_activity(restored.get(s.key))
            reason = static_reason(s, evidence, activity, purge=purge)
            if reason is None and s.id in recent:
                reason = Kept(s.agent, s.id, Reason.RECENT, recent[s.id])
            if reason is None:
                candidates.append(s)
            else:
                kept[s.key] = reason
                staying.append(s.key)
    candidate_keys = {c.key for c in candidates}
    for agent, sid in staying:
        # Invariant 3: every ancestor of a session that stays, stays (a recent
        # one is not old enough to be in the report).
        for parent in ancestors(sid, _parents(by_id[agent])):
            if (agent, parent) not in kept and (agent, parent) in candidate_keys:
                kept[(agent, parent)] = Kept(agent, parent, Reason.ANCESTOR, f"parent of {sid}")
    remaining = [s for s in candidates if s.key not in kept]
    why = {s.key: PURGE if purge else AGE for s in remaining}
    if not purge:
        keep = set(kept) | recent_keys
        for s in _for_size(by_id, evidence, options, restored, keep, set(why)):
            remaining.append(s)
            why[s.key] = SIZE
    order = removal_order(remaining, by_id, restored)
    return PrunePlan(tuple(order), tuple(kept.values()), dict(options.cutoffs), why)


def _for_size(
    by_id: Mapping[str, Mapping[str, Session]],
    evidence: Evidence,
    options: PruneOptions,
    restored: Mapping[Key, float],
    keep: set[Key],
    planned: set[Key],
) -> list[Session]:
    """What goes for size under each cap whose agents are all in this run,
    those staying for any reason (`keep`) counted and never taken."""
    groups: dict[str, tuple[int, list[str]]] = {}
    for agent, shape in options.shapes.items():
        if shape.max_size is not None:
            groups.setdefault(shape.size_group, (shape.max_size, []))[1].append(agent)
    children: dict[Key, list[Key]] = {}
    for agent, listed in by_id.items():
        for s in listed.values():
            if s.parent is not None:
                children.setdefault((agent, s.parent), []).append(s.key)
    chosen: list[Session] = []
    for limit, agents in groups.values():
        if not all(agent in by_id for agent in agents):
            continue  # a cap shared with agents this run does not list
        chosen += shapes.over_size(
            limit,
            [s for a in agents for s in by_id[a].values()],
            planned,
            keep,
            activity=lambda s: s.last_activity(restored.get(s.key)),
            floor=options.now - MIN_RETENTION,
            children=lambda s: children.get(s.key, ()),
            stays=lambda s: static_reason(s, evidence, s.last_activity(restored.get(s.key))),
        )
    return chosen


def _parents(listed: Mapping[str, Session]) -> Callable[[str], str | None]:
    def parent_of(session_id: str) -> str | None:
        s = listed.get(session_id)
        return s.parent if s else None

    return parent_of


def _targets(
    agent: str, listed: Iterable[Session], options: PruneOptions, restored: Mapping[Key, float]
) -> set[str]:
    """The sessions old enough to go (a purge: those it names)."""
    if options.purge is not None:
        return {sid for a, sid in options.purge if a == agent}
    cutoff = options.cutoffs[agent]
    if cutoff is None:
        return set()
    return {
        s.id
        for s in listed
        if (known := known_activity(s, restored.get(s.key))) is None or known < cutoff
    }


def removal_order(
    plan: Sequence[Session],
    sessions: Mapping[str, Mapping[str, Session]],
    restored: Mapping[Key, float],
) -> list[Session]:
    """Longest idle first across every agent (max_removals takes the oldest),
    each after its planned descendants, deepest first (invariant 3)."""
    planned = {s.key: s for s in plan}
    activity = {key: known_activity(s, restored.get(key)) for key, s in planned.items()}
    floor = min((t for t in activity.values() if t is not None), default=0.0)
    # Undated ones first: with no time to go by, they count as the oldest.
    rank = {key: (floor if t is None else t, *key) for key, t in activity.items()}
    below: dict[Key, list[Key]] = {}
    parents = {agent: _parents(listed) for agent, listed in sessions.items()}
    for agent, sid in planned:
        parent = parents[agent](sid)
        if parent is not None and (agent, parent) in planned:
            below.setdefault((agent, parent), []).append((agent, sid))
    ordered: list[Session] = []
    placed: set[Key] = set()
    seen: set[Key] = set()  # expanded once: parents may loop
    for first in sorted(planned, key=rank.__getitem__):
        # Iteratively: descendants (deepest first), then the session.
        stack: list[tuple[Key, bool]] = [(first, False)]
        while stack:
            key, expanded = stack.pop()
            if key in placed:
                continue
            if expanded:
                placed.add(key)
                ordered.append(planned[key])
                continue
            if key in seen:
                continue
            seen.add(key)
            stack.append((key, True))
            if children := below.get(key):
                children.sort(key=rank.__getitem__, reverse=True)
                stack.extend((c, False) for c in children if c not in placed)
    return ordered
