"""The prune's plan as a pure value: decide() on plain sessions and plain
evidence (no disk, no process), for invariants 1 (the floor), 2 (live and
held sessions stay), 3 (ancestors stay, children go first) and 9 (every old
session is accounted for); and the same rules as ls, show, du and purge's
--cascade read them (evidence.state, evidence.indexed, plan.descendants)."""

from __future__ import annotations

import random

import pytest

from agentkeep.index import IndexedSession
from agentkeep.model import Artifact, Holder, HolderKind, Reason, Session, State
from agentkeep.prune.evidence import Observed, indexed, state
from agentkeep.prune.plan import PrunePlan, decide, descendants
from agentkeep.prune.report import PruneOptions, PruneRefused

NOW = 1_800_000_000.0
DAY = 86400.0
CUTOFF = NOW - 30 * DAY


def session(
    sid: str, idle_days: float, parent: str | None = None, agent: str = "claude"
) -> Session:
    t = NOW - idle_days * DAY
    art = Artifact(f"/x/{agent}/{sid}.jsonl", "transcript", 10, t, primary=True)
    return Session(agent, sid, parent=parent, artifacts=[art], bytes=10)


def plan_of(
    sessions: list[Session],
    evidence: Observed | None = None,
    cutoff: float = CUTOFF,
    purge: list[tuple[str, str]] | None = None,
) -> PrunePlan:
    by_agent: dict[str, list[Session]] = {}
    for s in sessions:
        by_agent.setdefault(s.agent, []).append(s)
    opts = PruneOptions(cutoffs={a: cutoff for a in by_agent}, now=NOW, purge=purge)
    return decide(by_agent, evidence or Observed(), opts)


def ids(plan: PrunePlan) -> list[str]:
    return [s.id for s in plan.candidates]


def reasons(plan: PrunePlan) -> dict[str, tuple[Reason, str]]:
    return {k.id: (k.reason, k.detail) for k in plan.kept}


# -- invariant 1: the floor ---------------------------------------------------
@pytest.mark.parametrize("cutoff", [NOW - DAY + 1, NOW, NOW + DAY, float("nan"), float("inf")])
def test_a_cutoff_under_the_floor_is_refused(cutoff: float) -> None:
    with pytest.raises(PruneRefused, match="less than 24 hours ago"):
        plan_of([session("a", 40)], cutoff=cutoff)


def test_nothing_updated_in_the_last_24_hours_is_a_candidate() -> None:
    rng = random.Random(7)
    sessions = [session(f"s{n}", rng.uniform(0, 3)) for n in range(200)]
    plan = plan_of(sessions, cutoff=NOW - DAY)  # the floor itself
    assert plan.candidates, "SETUP INVALID: nothing is old enough"
    for s in plan.candidates:
        activity = s.last_activity()
        assert activity is not None and activity < NOW - DAY, s.id
    assert plan.cutoffs == {"claude": NOW - DAY}


# -- invariant 2: live, held, pinned, undated and unsafe sessions stay ----------
def test_live_held_pinned_undated_unsafe_stay_with_their_reason() -> None:
    undated = session("undated", 40)
    undated.undated = True
    unsafe = session("unsafe", 40)
    unsafe.artifacts = [unsafe.artifacts[0]._replace(linked=True)]
    sessions = [session(n, 40) for n in ("live", "held", "pinned", "both", "idle")]
    evidence = Observed(
        holding={
            ("claude", "live"): [Holder(42, HolderKind.PROCESS, "claude")],
            ("claude", "both"): [Holder(None, HolderKind.REGISTRY, "registry")],
        },
        leased={("claude", "held"): "lease /s/held.lock", ("claude", "both"): "lease /b"},
        pins=frozenset({("claude", "pinned")}),
    )
    plan = plan_of([*sessions, undated, unsafe], evidence)
    assert ids(plan) == ["idle"]
    assert reasons(plan) == {
        "live": (Reason.LIVE, "pid 42 (claude)"),
        "held": (Reason.HELD, "lease /s/held.lock"),
        "pinned": (Reason.PINNED, "pinned"),
        "both": (Reason.LIVE, "registry"),  # a process before a lease
        "undated": (Reason.UNDATED, "a time of it cannot be read"),
        "unsafe": (Reason.UNSAFE, unsafe.unsafe or ""),
    }


def test_a_purge_ignores_age_but_not_use() -> None:
    recent = [session("named", 0.01), session("live", 0.01), session("other", 40)]
    evidence = Observed(holding={("claude", "live"): [Holder(7, HolderKind.PROCESS)]})
    plan = plan_of(recent, evidence, purge=[("claude", "named"), ("claude", "live")])
    assert ids(plan) == ["named"]
    assert reasons(plan) == {"live": (Reason.LIVE, "pid 7")}


# -- invariant 3: ancestors stay; children go before their parents -------------
def test_every_ancestor_of_a_session_that_stays_stays() -> None:
    chain = [session("root", 50), session("mid", 45, "root"), session("leaf", 40, "mid")]
    evidence = Observed(leased={("claude", "leaf"): "lease /l"})
    plan = plan_of([*chain, session("alone", 60)], evidence)
    assert ids(plan) == ["alone"]
    assert reasons(plan) == {
        "leaf": (Reason.HELD, "lease /l"),
        "mid": (Reason.ANCESTOR, "parent of leaf"),
        "root": (Reason.ANCESTOR, "parent of leaf"),
    }


def test_a_recent_child_keeps_its_parents_without_reporting_itself() -> None:
    plan = plan_of([session("old", 50), session("new", 0.5, "old")])
    assert ids(plan) == []
    assert reasons(plan) == {"old": (Reason.ANCESTOR, "parent of new")}


def test_children_go_before_their_parents_longest_idle_first() -> None:
    # The parent is idle longest, yet its descendants go first (each after
    # its own, the longest idle first).
    sessions = [
        session("parent", 90),
        session("child", 40, "parent"),
        session("grandchild", 35, "child"),
        session("sibling", 60, "parent"),
        session("other", 80),
    ]
    order = ids(plan_of(sessions))
    assert order == ["sibling", "grandchild", "child", "parent", "other"]


def test_a_loop_of_parents_is_planned_once_each() -> None:
    sessions = [session("a", 40, "b"), session("b", 50, "a")]
    order = ids(plan_of(sessions))
    assert sorted(order) == ["a", "b"]


# -- invariant 9: every old session is accounted for ----------------------------
def test_every_old_session_is_a_candidate_or_kept_exactly_once() -> None:
    rng = random.Random(9)
    sessions: list[Session] = []
    for n in range(300):
        agent = rng.choice(["claude", "codex"])
        same = [s.id for s in sessions if s.agent == agent]
        parent = rng.choice(same) if same and rng.random() < 0.5 else None
        sessions.append(session(f"s{n}", rng.uniform(0, 60), parent, agent))
    evidence = Observed(
        holding={s.key: [Holder(1, HolderKind.PROCESS)] for s in sessions[::17]},
        leased={s.key: "lease x" for s in sessions[::23]},
        pins=frozenset(s.key for s in sessions[::29]),
    )
    plan = plan_of(sessions, evidence)
    old = {s.key for s in sessions if (s.last_activity() or 0) < CUTOFF}
    planned = [s.key for s in plan.candidates]
    kept = [(k.agent, k.id) for k in plan.kept]
    assert plan.kept and plan.candidates, "SETUP INVALID: nothing kept or nothing to go"
    assert len(planned + kept) == len(set(planned + kept)), "a session is accounted twice"
    assert set(planned) | set(kept) == old
    # Longest idle first across the agents (max_removals takes the oldest),
    # but never a parent before one of its planned children.
    position = {key: n for n, key in enumerate(planned)}
    by_key = {s.key: s for s in sessions}
    for key in planned:
        parent = by_key[key].parent
        if parent is not None and (key[0], parent) in position:
            assert position[key] < position[(key[0], parent)]


def test_the_longest_idle_goes_first_across_agents() -> None:
    sessions = [session("c40", 40), session("x50", 50, agent="codex"), session("c70", 70)]
    assert ids(plan_of(sessions)) == ["c70", "x50", "c40"]


# -- the same rules, read by ls, show, du and purge --cascade ------------------
def test_state_names_the_rule_the_plan_keeps_by() -> None:
    """ls/show's state and the plan's reason come from the same evidence:
    a process before a lease before a pin, and idle only when none holds."""
    procs = {("claude", s): (Holder(7, HolderKind.PROCESS, "pid 7"),) for s in ("live", "all")}
    leased = {("claude", s): "lease /l" for s in ("held", "all")}
    pins = frozenset({("claude", "pinned"), ("claude", "all")})
    seen = Observed(procs, leased, pins)
    names = ("live", "held", "pinned", "all", "idle")
    sessions = [session(n, 40) for n in names]
    want = {"live": State.LIVE, "held": State.HELD, "pinned": State.PINNED, "all": State.LIVE}

    assert {s.id: state(seen, s) for s in sessions} == want | {"idle": State.IDLE}
    kept = reasons(plan_of(sessions, seen))
    assert {sid: reason.value for sid, (reason, _) in kept.items()} == {
        sid: st.value for sid, st in want.items()
    }
    assert ids(plan_of(sessions, seen)) == ["idle"]


def test_a_session_read_back_from_the_index_keeps_its_unsafe_reason() -> None:
    row = IndexedSession("claude", "u", None, None, NOW - 40 * DAY, 10, 1, "behind a link", 10)
    s = indexed(row)

    assert s.unsafe == "behind a link" and s.last_activity() == row.last_activity
    assert reasons(plan_of([s])) == {"u": (Reason.UNSAFE, "behind a link")}
    undated = indexed(IndexedSession("claude", "n", None, None, None, 0, 0, None, 0))
    assert reasons(plan_of([undated]))["n"][0] is Reason.UNDATED


def test_descendants_walks_every_generation_once_through_loops() -> None:
    children = {"a": ["b", "c"], "b": ["d"], "d": ["a", "e"], "c": []}

    found = descendants("a", lambda p: children.get(p, []))

    assert sorted(found) == ["b", "c", "d", "e"] and len(found) == 4
    for child in found:  # each after its parent
        parent = next(p for p, cs in children.items() if child in cs and p != child)
        assert parent == "a" or found.index(parent) < found.index(child)
