"""A big prune acts in two processes (prune.spread), each on whole families,
each under its own leases and journal: the same report, the same disk.

The size from which a prune spreads is lowered through its seam, so that a
few sessions are enough. Which process acted on a session is noted from
inside it (the act's `_after_lease` seam, in the child too) as a file on
disk, since the child's memory is not the test's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agentkeep import leases
from agentkeep.model import Session
from agentkeep.prune import act as prune_act
from agentkeep.prune import spread
from agentkeep.prune.plan import halves
from build_claude import make_session
from fakehome import FakeHome, Spawn
from test_prune import lease_file, reasons, removed_ids, run_prune, whole
from waiting import wait_until

# -- the split, a pure value --------------------------------------------------


def _session(sid: str, parent: str | None = None) -> Session:
    return Session("claude", sid, None, parent, [])


def test_halves_keep_each_family_whole_and_the_order() -> None:
    # Descendants first, as the plan orders them: c2 -> c1 -> root, and
    # four sessions of their own.
    plan = [_session("c2", "c1"), _session("c1", "root"), _session("a"), _session("b")]
    plan += [_session("root"), _session("c"), _session("d")]
    parents = {s.id: s.parent for s in plan}

    first, second = halves(plan, {"claude": parents.get})

    assert sorted(s.id for s in first + second) == sorted(s.id for s in plan)
    family = {"c2", "c1", "root"}
    assert family <= {s.id for s in first} or family <= {s.id for s in second}
    for half in (first, second):
        assert half == [s for s in plan if s in half]  # the plan's order
    assert abs(len(first) - len(second)) <= 1


def test_halves_follow_an_ancestor_that_is_not_planned() -> None:
    """Two forks of a parent that stays (recent) are one family: the parent
    is checked by whoever removes them."""
    plan = [_session("x", "kept"), _session("z", "kept"), _session("y")]
    parents = {"x": "kept", "z": "kept", "kept": None}

    first, second = halves(plan, {"claude": parents.get})

    together = {"x", "z"}
    assert together <= {s.id for s in first} or together <= {s.id for s in second}


# -- the act in two processes --------------------------------------------------


@pytest.fixture
def spreading(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Spread from 2 sessions; returns the directory where each process that
    took a session's leases notes it (a file `<id>` holding its pid)."""
    if not spread.worth_spreading(10**9):
        pytest.skip("a prune spreads only where it can fork (Linux, 2 CPUs, one thread)")
    monkeypatch.setattr(spread, "_spread_from", 2)
    noted = tmp_path / "acted-by"
    noted.mkdir()
    monkeypatch.setattr(prune_act, "_after_lease", noting(noted))
    return noted


def noting(
    noted: Path, in_the_child: Callable[[str], object] | None = None
) -> Callable[[str, str], None]:
    """The act's `_after_lease` seam: a file `<id>` in `noted` says which
    process took the session's leases; in the second process only, then
    `in_the_child(id)`."""
    parent = os.getpid()

    def note(agent: str, sid: str) -> None:
        (noted / sid).write_text(str(os.getpid()))
        if in_the_child is not None and os.getpid() != parent:
            in_the_child(sid)

    return note


def acted_by(noted: Path) -> dict[str, int]:
    return {p.name: int(p.read_text()) for p in noted.iterdir()}


def children_in(noted: Path) -> set[int]:
    """The processes but this one that took a session's leases."""
    return set(acted_by(noted).values()) - {os.getpid()}


def test_a_spread_prune_removes_every_idle_session_and_reports_each(
    fake_home: FakeHome, spreading: Path
) -> None:
    idle = [make_session(fake_home, age_days=40) for _ in range(6)]
    recent = make_session(fake_home, age_days=1)

    doc = run_prune(older_than="30d")

    pids = set(acted_by(spreading).values())
    if len(pids) != 2 or os.getpid() not in pids:
        pytest.fail(f"SETUP INVALID: the act did not run in two processes ({pids})")
    assert sorted(removed_ids(doc)) == sorted(s.id for s in idle)
    assert doc["kept"] == [] and doc["failed"] == []
    assert not any(os.path.lexists(p) for s in idle for p in s.all_paths())
    assert whole(recent)
    assert list((fake_home.state / "journal").glob("batch-*")) == []


def test_a_family_is_acted_on_by_one_process_children_first(
    fake_home: FakeHome, spreading: Path
) -> None:
    root = make_session(fake_home, age_days=50)
    child = make_session(fake_home, parent=root.id, age_days=45)
    grandchild = make_session(fake_home, parent=child.id, age_days=40)
    others = [make_session(fake_home, age_days=40) for _ in range(3)]

    doc = run_prune(older_than="30d")

    by = acted_by(spreading)
    if len(set(by.values())) != 2:
        pytest.fail("SETUP INVALID: the act did not run in two processes")
    assert by[root.id] == by[child.id] == by[grandchild.id]
    order = removed_ids(doc)
    assert order.index(grandchild.id) < order.index(child.id) < order.index(root.id)
    assert sorted(order) == sorted(s.id for s in [root, child, grandchild, *others])


def test_a_held_session_stays_whichever_process_checks_it(
    fake_home: FakeHome, spreading: Path, spawn: Spawn
) -> None:
    idle = [make_session(fake_home, age_days=40) for _ in range(6)]
    held = idle[1::2]
    for s in held:
        path = lease_file(fake_home, s.id)
        spawn(
            ["sh", "-c", 'exec 9<"$LEASE"; flock -s 9 && exec sleep 60'],
            env={**fake_home.environ, "LEASE": str(path)},
        )
        wait_until(lambda path=path: leases.is_held(path), "flock taking the lease")

    doc = run_prune(older_than="30d")

    if len(set(acted_by(spreading).values())) != 2:
        pytest.fail("SETUP INVALID: the act did not run in two processes")
    assert reasons(doc) == {s.id: "held" for s in held}
    assert all(whole(s) for s in held)
    assert sorted(removed_ids(doc)) == sorted(s.id for s in idle if s not in held)


def test_what_a_dead_second_process_never_decided_fails_and_the_next_run_removes_it(
    fake_home: FakeHome, spreading: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle = [make_session(fake_home, age_days=40) for _ in range(6)]
    monkeypatch.setattr(prune_act, "_after_lease", noting(spreading, lambda sid: os._exit(9)))
    doc = run_prune(older_than="30d")

    if not children_in(spreading):
        pytest.fail("SETUP INVALID: no second process took a lease")
    failed = {f["id"]: f["reason"] for f in doc["failed"]}
    assert failed and all("exited 9" in why for why in failed.values())
    # Every session is in the report once: removed here, or failed there.
    assert sorted([*removed_ids(doc), *failed]) == sorted(s.id for s in idle)
    assert all(whole(s) for s in idle if s.id in failed)

    monkeypatch.setattr(prune_act, "_after_lease", None)
    again = run_prune(older_than="30d")
    assert sorted(removed_ids(again)) == sorted(failed)


def test_an_error_in_the_second_process_is_raised_here_once_it_ended(
    fake_home: FakeHome, spreading: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle = [make_session(fake_home, age_days=40) for _ in range(6)]

    def fail(sid: str) -> None:
        raise RuntimeError(f"broken in the second process at {sid}")

    monkeypatch.setattr(prune_act, "_after_lease", noting(spreading, fail))
    with pytest.raises(RuntimeError, match="broken in the second process") as raised:
        run_prune(older_than="30d")

    children = list(children_in(spreading))
    if len(children) != 1:
        pytest.fail("SETUP INVALID: no second process took a lease")
    with pytest.raises(ChildProcessError):
        os.waitpid(children[0], os.WNOHANG)  # reaped: it had ended
    assert str(raised.value).startswith("broken in the second process")
    assert sum(whole(s) for s in idle) >= 1


def test_a_prune_that_cannot_fork_acts_in_one_process(
    fake_home: FakeHome, spreading: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle = [make_session(fake_home, age_days=40) for _ in range(6)]
    forks: list[int] = []

    def no_process_to_spare() -> int:
        forks.append(1)
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(spread.os, "fork", no_process_to_spare)
    doc = run_prune(older_than="30d")

    if not forks:
        pytest.fail("SETUP INVALID: the prune never tried to fork")
    assert set(acted_by(spreading).values()) == {os.getpid()}
    assert sorted(removed_ids(doc)) == sorted(s.id for s in idle)
    assert doc["failed"] == []
