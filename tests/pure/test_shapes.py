"""The retention shapes beside age, in the pure plan (no disk, no process):
keep_last and max_size, each on its own and combined with age and with
every keep rule (the 24-hour floor, live, held, pinned, undated, unsafe,
ancestors)."""

from __future__ import annotations

import pytest

from agentkeep.model import Artifact, Holder, HolderKind, Reason, Session, Shape
from agentkeep.prune.evidence import Observed
from agentkeep.prune.plan import AGE, SIZE, PrunePlan, decide
from agentkeep.prune.report import PruneOptions

NOW = 1_800_000_000.0
DAY = 86400.0
CUTOFF = NOW - 30 * DAY
MB = 1 << 20


def session(
    sid: str,
    idle_days: float,
    *,
    ws: str | None = "/w",
    mb: int = 1,
    parent: str | None = None,
    agent: str = "claude",
    undated: bool = False,
    linked: bool = False,
) -> Session:
    t = NOW - idle_days * DAY
    art = Artifact(
        f"/x/{agent}/{sid}.jsonl",
        "transcript",
        mb * MB,
        None if undated else t,
        primary=True,
        linked=linked,
        disk_bytes=mb * MB,
    )
    return Session(agent, sid, workspace=ws, parent=parent, artifacts=[art], bytes=mb * MB)


def plan_of(
    sessions: list[Session],
    *,
    cutoff: float | None = CUTOFF,
    keep_last: int = 0,
    max_mb: int | None = None,
    group: str = "*",
    evidence: Observed | None = None,
    agents: tuple[str, ...] = (),
) -> PrunePlan:
    by_agent: dict[str, list[Session]] = {a: [] for a in agents}
    for s in sessions:
        by_agent.setdefault(s.agent, []).append(s)
    shape = Shape(keep_last, None if max_mb is None else max_mb * MB, group)
    opts = PruneOptions(
        cutoffs={a: cutoff for a in by_agent},
        now=NOW,
        shapes={a: shape for a in by_agent},
    )
    return decide(by_agent, evidence or Observed(), opts)


def ids(plan: PrunePlan) -> list[str]:
    return [s.id for s in plan.candidates]


def kept(plan: PrunePlan) -> dict[str, Reason]:
    return {k.id: k.reason for k in plan.kept}


# -- keep_last ----------------------------------------------------------------


def test_keep_last_keeps_the_most_recent_of_each_workspace_however_idle() -> None:
    sessions = [
        session("a1", 100, ws="/a"),
        session("a2", 90, ws="/a"),
        session("a3", 80, ws="/a"),
        session("b1", 200, ws="/b"),
        session("u1", 70, ws=None),
        session("u2", 60, ws=None),
    ]
    plan = plan_of(sessions, keep_last=2)
    assert ids(plan) == ["a1"]
    assert kept(plan) == {
        "a2": Reason.RECENT,
        "a3": Reason.RECENT,
        "b1": Reason.RECENT,
        "u1": Reason.RECENT,
        "u2": Reason.RECENT,
    }
    detail = {k.id: k.detail for k in plan.kept}
    assert detail["a3"] == "one of the 2 most recently active in /a"


def test_keep_last_counts_recent_sessions_too() -> None:
    """The N most recent of a workspace may be young: then no old one is kept."""
    sessions = [session("old", 60), session("new1", 2), session("new2", 1)]
    plan = plan_of(sessions, keep_last=2)
    assert ids(plan) == ["old"] and kept(plan) == {}


def test_another_keep_rule_is_reported_before_recent() -> None:
    held = Observed(leased={("claude", "a"): "lease /x"})
    plan = plan_of([session("a", 40), session("b", 50)], keep_last=1, evidence=held)
    assert kept(plan) == {"a": Reason.HELD}
    assert ids(plan) == ["b"]


def test_the_parent_of_a_recent_session_stays_as_its_ancestor() -> None:
    sessions = [session("p", 80), session("c", 40, parent="p")]
    plan = plan_of(sessions, keep_last=1)
    assert kept(plan) == {"c": Reason.RECENT, "p": Reason.ANCESTOR}
    assert ids(plan) == []


def test_keep_last_is_per_agent() -> None:
    sessions = [session("c1", 50), session("c2", 40), session("x1", 45, agent="codex")]
    plan = plan_of(sessions, keep_last=1)
    assert kept(plan) == {"c2": Reason.RECENT, "x1": Reason.RECENT}


# -- max_size -------------------------------------------------------------------


def test_max_size_alone_takes_the_longest_idle_until_it_fits() -> None:
    sessions = [session(f"s{d}", d, mb=10) for d in (2, 5, 10, 20, 40)]
    plan = plan_of(sessions, cutoff=None, max_mb=25)
    assert ids(plan) == ["s40", "s20", "s10"]
    assert set(plan.why.values()) == {SIZE}


def test_max_size_never_goes_under_the_24_hour_floor() -> None:
    sessions = [session("today", 0.5, mb=100), session("older", 3, mb=1)]
    plan = plan_of(sessions, cutoff=None, max_mb=10)
    assert ids(plan) == ["older"], "what is over the cap and younger than a day stays"


def test_age_goes_first_then_size_and_each_is_said() -> None:
    sessions = [session("ancient", 60, mb=5), session("mid", 10, mb=10), session("new", 2, mb=10)]
    plan = plan_of(sessions, max_mb=15)
    assert ids(plan) == ["ancient", "mid"]
    assert plan.why == {("claude", "ancient"): AGE, ("claude", "mid"): SIZE}


def test_sessions_kept_for_any_reason_count_and_never_go_for_size() -> None:
    sessions = [
        session("live", 40, mb=10),
        session("pinned", 30.5, mb=10),
        session("undated", 20, mb=10, undated=True),
        session("unsafe", 15, mb=10, linked=True),
        session("idle", 5, mb=10),
        session("idle2", 4, mb=10),
    ]
    evidence = Observed(
        holding={("claude", "live"): [Holder(9, HolderKind.PROCESS)]},
        pins=frozenset({("claude", "pinned")}),
    )
    plan = plan_of(sessions, max_mb=25, evidence=evidence)
    # 60 MB; nothing kept may go, so the two idle ones go and 40 MB stay.
    assert ids(plan) == ["idle", "idle2"]
    assert kept(plan) == {
        "live": Reason.LIVE,
        "pinned": Reason.PINNED,
        "undated": Reason.UNDATED,
    }


def test_a_recent_session_of_keep_last_is_never_taken_for_size() -> None:
    sessions = [session("a", 10, mb=10), session("b", 9, mb=10)]
    plan = plan_of(sessions, cutoff=None, max_mb=5, keep_last=1)
    assert ids(plan) == ["a"]


def test_a_parent_goes_for_size_only_after_its_children() -> None:
    sessions = [
        session("parent", 50, mb=10),
        session("child", 8, mb=10, parent="parent"),
        session("young", 3, mb=10),
    ]
    plan = plan_of(sessions, cutoff=None, max_mb=15)
    # The parent is idlest but its child stays at first; the child goes,
    # then the parent may: children before parents in the order too.
    assert ids(plan) == ["child", "parent"]


def test_a_parent_whose_child_must_stay_never_goes_for_size() -> None:
    sessions = [session("parent", 50, mb=10), session("child", 0.2, mb=1, parent="parent")]
    plan = plan_of(sessions, cutoff=None, max_mb=1)
    assert ids(plan) == []


def test_a_shared_cap_counts_every_agent_and_waits_for_all_of_them() -> None:
    sessions = [session("c", 10, mb=10), session("x", 20, mb=10, agent="codex")]
    assert ids(plan_of(sessions, cutoff=None, max_mb=15)) == ["x"]
    alone = plan_of([sessions[0]], cutoff=None, max_mb=15)
    assert ids(alone) == []  # codex's sessions are not listed here: the cap waits


def test_a_cap_of_its_own_counts_its_agent_alone() -> None:
    sessions = [session("c", 10, mb=10), session("x", 20, mb=10, agent="codex")]
    by_agent = {"claude": [sessions[0]], "codex": [sessions[1]]}
    opts = PruneOptions(
        cutoffs={"claude": None, "codex": None},
        now=NOW,
        shapes={"claude": Shape(max_size=5 * MB, size_group="claude"), "codex": Shape()},
    )
    assert ids(decide(by_agent, Observed(), opts)) == ["c"]


@pytest.mark.parametrize("mb", [50, 1000])
def test_under_the_cap_nothing_goes_for_size(mb: int) -> None:
    sessions = [session("a", 10, mb=10), session("b", 20, mb=10)]
    assert ids(plan_of(sessions, cutoff=None, max_mb=mb)) == []
