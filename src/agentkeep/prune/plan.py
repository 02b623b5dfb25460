"""The prune's plan, a pure value: which sessions go, in which order, and why
every other old session stays. decide() reads the sessions as listed, the
evidence of use and the options; it touches no disk and no process itself
(the evidence it is given may look, see evidence)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from agentkeep.config import MIN_RETENTION
from agentkeep.model import Reason, Session
from agentkeep.prune.evidence import Evidence
from agentkeep.prune.report import Kept, PruneOptions, PruneRefused

Key = tuple[str, str]


@dataclass(frozen=True)
class PrunePlan:
    """`candidates` in removal order (longest idle first across agents, each
    after its descendants); `kept`: every old session that stays, with why,
    in the order found (each ancestor of one that stays among them)."""

    candidates: tuple[Session, ...]
    kept: tuple[Kept, ...]
    cutoffs: Mapping[str, float]


def check_floor(cutoffs: Mapping[str, float], now: float) -> None:
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


def descendants(session_id: str, children_of: Callable[[str], Iterable[str]]) -> list[str]:
    """Every descendant of a session, each after its parent (a purge's
    --cascade); survives cycles."""
    out: list[str] = []
    stack, seen = [session_id], {session_id}
    while stack:
        for child in children_of(stack.pop()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                stack.append(child)
    return out


def halves(
    candidates: Sequence[Session], parent_of: Mapping[str, Callable[[str], str | None]]
) -> tuple[list[Session], list[Session]]:
    """The candidates in two halves of whole families (the sessions under
    one eldest ancestor), each in the candidates' order, near the same
    size: whoever acts on a half checks each of its sessions after its
    descendants, which are all in the same half."""
    families: dict[Key, list[Session]] = {}
    for s in candidates:
        eldest = [s.id, *ancestors(s.id, parent_of[s.agent])][-1]
        families.setdefault((s.agent, eldest), []).append(s)
    sizes = [0, 0]
    half_of: dict[Key, int] = {}
    for family in sorted(families.values(), key=len, reverse=True):
        half = 0 if sizes[0] <= sizes[1] else 1
        sizes[half] += len(family)
        half_of.update((s.key, half) for s in family)
    first = [s for s in candidates if half_of[s.key] == 0]
    second = [s for s in candidates if half_of[s.key] == 1]
    return first, second


def known_activity(s: Session, restored: float | None) -> float | None:
    """The newest time of the session that could be read (ordering and age
    only; an unreadable time keeps it, see static_reason)."""
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
    """Why a session stays whatever its age (invariants 2 and 4). A purge
    ignores age, so an unreadable time does not stop it. Under our own
    exclusive leases (`under_lease`) nobody else can hold them, and the
    evidence is looked at afresh."""
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


def decide(
    sessions: Mapping[str, Sequence[Session]],
    evidence: Evidence,
    options: PruneOptions,
    restored: Mapping[Key, float] | None = None,
) -> PrunePlan:
    """The plan for `sessions` (each agent's, as listed; every agent of
    options.cutoffs). `restored`: when a session was last restored from the
    trash. Refused (PruneRefused) under the floor, as the prune is."""
    restored = restored or {}
    purge = options.purge is not None
    if not purge:
        check_floor(options.cutoffs, options.now)
    by_id = {agent: {s.id: s for s in listed} for agent, listed in sessions.items()}
    kept: dict[Key, Kept] = {}
    candidates: list[Session] = []
    staying: list[Key] = []
    for agent, listed in by_id.items():
        targets = _targets(agent, listed.values(), options, restored)
        for s in listed.values():
            if s.id not in targets:
                staying.append(s.key)
                continue
            activity = s.last_activity(restored.get(s.key))
            reason = static_reason(s, evidence, activity, purge=purge)
            if reason is None:
                candidates.append(s)
            else:
                kept[s.key] = reason
                staying.append(s.key)
    candidate_keys = {c.key for c in candidates}
    for agent, sid in staying:
        _keep_ancestors(agent, sid, _parents(by_id[agent]), kept, candidate_keys)
    remaining = [s for s in candidates if s.key not in kept]
    order = removal_order(remaining, by_id, restored)
    return PrunePlan(tuple(order), tuple(kept.values()), dict(options.cutoffs))


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
    return {
        s.id
        for s in listed
        if (known := known_activity(s, restored.get(s.key))) is None or known < cutoff
    }


def _keep_ancestors(
    agent: str,
    sid: str,
    parent_of: Callable[[str], str | None],
    kept: dict[Key, Kept],
    candidates: set[Key],
) -> None:
    """Invariant 3: every ancestor of a session that stays, stays."""
    for parent in ancestors(sid, parent_of):
        if (agent, parent) in kept or (agent, parent) not in candidates:
            continue  # kept already, or recent: not old enough to be in the report
        kept[(agent, parent)] = Kept(agent, parent, Reason.ANCESTOR, f"parent of {sid}")


def removal_order(
    plan: Sequence[Session],
    sessions: Mapping[str, Mapping[str, Session]],
    restored: Mapping[Key, float],
) -> list[Session]:
    """Longest idle first across every agent (max_removals takes the
    oldest), and each session after its descendants (invariant 3): a
    session's planned descendants are pulled ahead of it, deepest first."""
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
