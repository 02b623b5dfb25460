"""The index: a SQLite cache of what the adapters list from the disk.

Rebuilt from real trees by the real adapters; every write is idempotent
(a watcher repeats itself), reads come oldest first with undated sessions
last, and building it never changes a timestamp on the disk it reads.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from agentkeep import core
from agentkeep.adapters.claude import ClaudeAdapter
from agentkeep.adapters.zero import ZeroAdapter
from agentkeep.index import Index, IndexedSession
from agentkeep.model import Session
from agentkeep.paths import Env
from build_agents import make_zero_session, mtimes, zero_root
from build_claude import make_session
from fakehome import FakeHome

DAY = 86400.0


def context() -> core.Context:
    return core.Context.open(Env.from_environ())


def rows(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every row of both tables, in a fixed order, read straight from SQLite."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        sessions = db.execute("SELECT * FROM sessions ORDER BY agent, id").fetchall()
        artifacts = db.execute(
            "SELECT * FROM artifacts ORDER BY agent, session_id, path"
        ).fetchall()
    finally:
        db.close()
    return sessions, artifacts


def claude_sessions() -> list[Session]:
    return list(ClaudeAdapter(Env.from_environ()).scan())


@pytest.fixture
def index(fake_home: FakeHome) -> Index:
    fake_home.state.mkdir(parents=True, mode=0o700)
    return Index(fake_home.state / "index.sqlite")


def test_scanning_twice_gives_the_same_rows(fake_home: FakeHome) -> None:
    parent = make_session(fake_home, age_days=40)
    make_session(fake_home, parent=parent.id, age_days=3)
    make_zero_session(zero_root(fake_home.data), "z1", days=10)
    ctx = context()

    first = core.scan(ctx)
    once = rows(ctx.index.path)
    second = core.scan(ctx)
    twice = rows(ctx.index.path)

    assert once == twice
    assert len(once[0]) == 3 and len(once[1]) == first["artifacts"]
    assert {k: v for k, v in first.items() if k != "seconds"} == {
        k: v for k, v in second.items() if k != "seconds"
    }


def test_replace_agent_holds_exactly_what_it_is_given(fake_home: FakeHome, index: Index) -> None:
    a = make_session(fake_home, age_days=40)
    b = make_session(fake_home, age_days=20)
    make_zero_session(zero_root(fake_home.data), "z1", days=5)
    zero = list(ZeroAdapter(Env.from_environ()).scan())
    index.replace_agent("zero", zero, {})

    n, arts, nbytes = index.replace_agent("claude", claude_sessions(), {})
    assert (n, arts) == (2, 20)
    assert nbytes == sum(s.bytes for s in claude_sessions())
    assert {s.id for s in index.sessions()} == {a.id, b.id, "z1"}

    only_b = [s for s in claude_sessions() if s.id == b.id]
    assert index.replace_agent("claude", only_b, {})[0] == 1
    assert [s.id for s in index.sessions("claude")] == [b.id]
    assert [s.id for s in index.sessions("zero")] == ["z1"], "other agents are left alone"

    assert index.replace_agent("claude", [], {}) == (0, 0, 0)
    assert index.sessions("claude") == [] and index.count() == 1


def test_put_and_delete_are_idempotent(fake_home: FakeHome, index: Index) -> None:
    a = make_session(fake_home, age_days=40)
    (session,) = claude_sessions()

    index.put(session)
    once = rows(index.path)
    index.put(session)

    assert rows(index.path) == once
    assert index.count() == 1
    assert len(index.artifacts("claude", a.id)) == len(session.artifacts)
    got = index.get("claude", a.id)
    assert got == IndexedSession(
        "claude",
        a.id,
        a.cwd,
        None,
        session.last_activity(),
        session.bytes,
        len(session.artifacts),
        None,
    )

    index.delete("claude", a.id)
    index.delete("claude", a.id)
    index.delete("claude", "never-there")
    assert index.get("claude", a.id) is None
    assert index.artifacts("claude", a.id) == [] and index.count() == 0


def test_a_restore_time_counts_as_activity(fake_home: FakeHome, index: Index) -> None:
    a = make_session(fake_home, age_days=40)
    (session,) = claude_sessions()
    restored = session.last_activity() + 30 * DAY

    index.put(session, restored_at=restored)
    assert index.get("claude", a.id).last_activity == restored

    index.replace_agent("claude", [session], {("claude", a.id): restored + 1})
    assert index.get("claude", a.id).last_activity == restored + 1


def test_sessions_come_oldest_first_with_undated_ones_last(
    fake_home: FakeHome, index: Index
) -> None:
    mid = make_session(fake_home, age_days=20, full=False)
    oldest = make_session(fake_home, age_days=40, full=False)
    newest = make_session(fake_home, age_days=1, full=False)
    root = zero_root(fake_home.data)
    make_zero_session(root, "z-undated", metadata="{not json", days=50)
    make_zero_session(root, "z-old", days=30)
    index.replace_agent("claude", claude_sessions(), {})
    index.replace_agent("zero", ZeroAdapter(Env.from_environ()).scan(), {})

    ordered = index.sessions()

    assert [s.id for s in ordered] == [oldest.id, "z-old", mid.id, newest.id, "z-undated"]
    assert ordered[-1].last_activity is None
    assert [s.id for s in index.sessions("claude")] == [oldest.id, mid.id, newest.id]
    assert [s.id for s in index.sessions("zero")] == ["z-old", "z-undated"]


def test_children_are_the_sessions_naming_a_parent(fake_home: FakeHome, index: Index) -> None:
    parent = make_session(fake_home, age_days=40, full=False)
    kids = sorted(
        [make_session(fake_home, parent=parent.id, age_days=d, full=False).id for d in (2, 3)]
    )
    grandchild = make_session(fake_home, parent=kids[0], age_days=1, full=False)
    index.replace_agent("claude", claude_sessions(), {})

    assert index.children("claude", parent.id) == kids
    assert index.children("claude", kids[0]) == [grandchild.id]
    assert index.children("claude", grandchild.id) == []
    assert index.children("zero", parent.id) == [], "children are per agent"
    assert index.get("claude", grandchild.id).parent == kids[0]


def test_forget_agents_drops_disabled_agents(fake_home: FakeHome, index: Index) -> None:
    make_session(fake_home, age_days=40, full=False)
    make_zero_session(zero_root(fake_home.data), "z1", days=5)
    index.replace_agent("claude", claude_sessions(), {})
    index.replace_agent("zero", ZeroAdapter(Env.from_environ()).scan(), {})
    index.set_dir_signatures("zero", {"/x": 1})

    index.forget_agents(["claude"])

    assert {s.agent for s in index.sessions()} == {"claude"}
    assert index.dir_signatures("zero") == {}

    index.forget_agents([])
    assert index.count() == 0


def test_a_disabled_agent_leaves_the_index_when_the_config_says_so(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40, full=False)
    make_zero_session(zero_root(fake_home.data), "z1", days=5)
    core.scan(context())
    fake_home.write_config('enabled = ["zero"]\n')

    ctx = context()

    assert [s.id for s in ctx.index.sessions()] == ["z1"]


def test_the_index_file_is_private(fake_home: FakeHome) -> None:
    ctx = context()
    assert stat.S_IMODE(os.stat(ctx.index.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(ctx.state_dir).st_mode) == 0o700


def test_building_the_index_changes_no_timestamp_it_reads(fake_home: FakeHome) -> None:
    parent = make_session(fake_home, age_days=40)
    make_session(fake_home, parent=parent.id, age_days=40)
    make_zero_session(zero_root(fake_home.data), "z1", days=40)
    roots = [fake_home.claude, fake_home.root / "tmp", zero_root(fake_home.data)]
    before = {r: mtimes(r) for r in roots}

    ctx = context()
    core.scan(ctx)
    core.reconcile(ctx)
    core.refresh(ctx, "claude", parent.id)

    assert {r: mtimes(r) for r in roots} == before
    assert ctx.index.count() == 3
