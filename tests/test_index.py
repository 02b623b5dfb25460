"""The index: a SQLite cache of what the adapters list from the disk.

Rebuilt from real trees by the real adapters; every write is idempotent
(a watcher repeats itself), reads come oldest first with undated sessions
last, and building it never changes a timestamp on the disk it reads.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep import adapters
from agentkeep.adapters import base
from agentkeep.adapters.base import Known
from agentkeep.adapters.claude import ClaudeAdapter
from agentkeep.adapters.zero import ZeroAdapter
from agentkeep.core import indexing
from agentkeep.core.context import Context
from agentkeep.core.indexing import reconcile, refresh, scan
from agentkeep.core.sessions import session_json
from agentkeep.index import IDLE_TAIL, Index, IndexedSession, written_as_python
from agentkeep.jsontext import folded_item
from agentkeep.model import Artifact, Session, State, rfc3339
from agentkeep.paths import Env
from build_agents import make_zero_session, mtimes, zero_root
from build_claude import make_session
from fakehome import FakeHome
from trees import settle

DAY = 86400.0


def context() -> Context:
    return Context.open(Env.from_environ())


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
    return list(ClaudeAdapter(Env.from_environ()).sessions())


@pytest.fixture
def index(fake_home: FakeHome) -> Index:
    fake_home.state.mkdir(parents=True, mode=0o700)
    return Index(fake_home.state / "index.sqlite")


def test_scanning_twice_gives_the_same_rows(fake_home: FakeHome) -> None:
    parent = make_session(fake_home, age_days=40)
    make_session(fake_home, parent=parent.id, age_days=3)
    make_zero_session(zero_root(fake_home.data), "z1", days=10)
    ctx = context()

    first = scan(ctx)
    once = rows(ctx.index.path)
    second = scan(ctx)
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
    zero = list(ZeroAdapter(Env.from_environ()).sessions())
    index.replace_agent("zero", zero, {})

    n, arts, nbytes = index.replace_agent("claude", claude_sessions(), {})
    assert (n, arts) == (2, len(a.artifact_set()) + len(b.artifact_set()))
    assert nbytes == sum(s.bytes for s in claude_sessions())
    assert {s.id for s in index.sessions()} == {a.id, b.id, "z1"}

    only_b = [s for s in claude_sessions() if s.id == b.id]
    assert index.replace_agent("claude", only_b, {})[0] == 1
    assert [s.id for s in index.sessions("claude")] == [b.id]
    assert [s.id for s in index.sessions("zero")] == ["z1"], "other agents are left alone"

    assert index.replace_agent("claude", [], {}) == (0, 0, 0)
    assert index.sessions("claude") == [] and index.count() == 1


def test_a_closed_index_opens_again_on_its_next_use(fake_home: FakeHome, index: Index) -> None:
    """The daemon closes a thread's connection after start-up and after each
    answer (daemon.memory); its status line asks the index again on the
    same thread."""
    make_session(fake_home, age_days=20)
    index.replace_agent("claude", claude_sessions(), {})
    index.close()
    assert index.count() == 1
    index.close()
    index.close()  # closing what is closed is nothing
    assert [s.agent for s in index.sessions()] == ["claude"]


def test_a_scan_with_every_agent_disabled_indexes_nothing(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40)
    fake_home.write_config("enabled = []\n")
    done = fake_home.cli("scan", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sessions"] == {}


def test_put_and_delete_are_idempotent(fake_home: FakeHome, index: Index) -> None:
    a = make_session(fake_home, age_days=40)
    (session,) = claude_sessions()

    index.put([session])
    once = rows(index.path)
    index.put([session])

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
        sum(x.disk_bytes for x in session.artifacts),
    )
    assert got is not None and got.disk_bytes > 0

    index.delete([("claude", a.id)])
    index.delete([("claude", a.id)])
    index.delete([("claude", "never-there")])
    assert index.get("claude", a.id) is None
    assert index.artifacts("claude", a.id) == [] and index.count() == 0


def test_a_restore_time_counts_as_activity(fake_home: FakeHome, index: Index) -> None:
    a = make_session(fake_home, age_days=40)
    (session,) = claude_sessions()
    restored = session.last_activity() + 30 * DAY

    index.put([session], {session.key: restored})
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
    index.replace_agent("zero", ZeroAdapter(Env.from_environ()).sessions(), {})

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
    index.replace_agent("zero", ZeroAdapter(Env.from_environ()).sessions(), {})
    index.set_dir_signatures("zero", {"/x": 1})

    index.forget_agents(["claude"])

    assert {s.agent for s in index.sessions()} == {"claude"}
    assert index.dir_signatures("zero") == {}

    index.forget_agents([])
    assert index.count() == 0


def test_a_disabled_agent_leaves_the_index_when_the_config_says_so(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40, full=False)
    make_zero_session(zero_root(fake_home.data), "z1", days=5)
    scan(context())
    fake_home.write_config('enabled = ["zero"]\n')

    ctx = context()

    assert [s.id for s in ctx.index.sessions()] == ["z1"]


def test_the_index_file_is_private(fake_home: FakeHome) -> None:
    ctx = context()
    assert stat.S_IMODE(os.stat(ctx.index.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(ctx.state_dir).st_mode) == 0o700


# The CLI under a Python whose SQLite is older than the index needs: the
# version it reports is all that can be made old here.
_OLD_SQLITE = """
import sqlite3
sqlite3.sqlite_version_info, sqlite3.sqlite_version = (3, 30, 1), "3.30.1"
from agentkeep.cli import main
main()
"""


def test_an_sqlite_too_old_for_the_index_is_named(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40)
    done = subprocess.run(
        [sys.executable, "-c", _OLD_SQLITE, "scan"],
        env=fake_home.environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "needs SQLite 3.31 or later" in done.stderr and "SQLite 3.30.1" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (fake_home.state / "index.sqlite").exists(), "nothing was written"


# Each older schema's sessions table, with the row it held.
_OLDER_SESSIONS = {
    1: """CREATE TABLE sessions (agent TEXT, id TEXT, workspace TEXT, parent TEXT,
            last_activity REAL, bytes INTEGER, artifacts INTEGER, unsafe TEXT,
            PRIMARY KEY (agent, id));
        INSERT INTO sessions VALUES ('claude', 'stale', NULL, NULL, 1.0, 1, 1, NULL);""",
    2: """CREATE TABLE sessions (agent TEXT, id TEXT, workspace TEXT, parent TEXT,
            last_activity REAL, bytes INTEGER, artifacts INTEGER, unsafe TEXT,
            disk_bytes INTEGER, PRIMARY KEY (agent, id));
        INSERT INTO sessions VALUES ('claude', 'stale', NULL, NULL, 1.0, 1, 1, NULL, 1);""",
}


@pytest.mark.parametrize("version", sorted(_OLDER_SESSIONS))
def test_an_index_of_another_schema_is_dropped_and_built_again(
    fake_home: FakeHome, version: int
) -> None:
    """Version 1 had no disk_bytes, version 2 no listing text: such an index
    is a cache like any other, dropped on open (its directory signatures
    too), so that the next reconcile scans every agent rather than keep
    rows without them."""
    s = make_session(fake_home, age_days=40)
    fake_home.state.mkdir(parents=True, mode=0o700)
    db = sqlite3.connect(fake_home.state / "index.sqlite")
    db.executescript(
        _OLDER_SESSIONS[version]
        + f"""
        CREATE TABLE artifacts (agent TEXT, session_id TEXT, path TEXT, kind TEXT,
            bytes INTEGER, mtime REAL, root TEXT, is_primary INTEGER, linked INTEGER,
            is_dir INTEGER);
        CREATE TABLE dirs (path TEXT PRIMARY KEY, agent TEXT, mtime_ns INTEGER);
        INSERT INTO dirs VALUES ('/nowhere', 'claude', 1);
        PRAGMA user_version = {version};
        """
    )
    db.close()

    ctx = context()

    assert ctx.index.count() == 0 and ctx.index.dir_signatures("claude") == {}
    reconcile(ctx)
    got = ctx.index.get("claude", s.id)
    assert got is not None and got.disk_bytes > 0
    assert [sid for _, sid, _ in ctx.index.listing_rows()] == [s.id]
    assert Index(ctx.index.path).count() == 1, "a second open keeps what the first built"


def test_the_few_artifacts_holders_read_come_from_a_partial_index(
    fake_home: FakeHome,
) -> None:
    """Listing many sessions reads their registry files and rollouts: from
    an index of those alone, remade when the kinds it holds change."""
    for n in range(3):
        make_session(fake_home, pid=4_200_000 + n)  # pids Linux never hands out
    ctx = context()
    scan(ctx)
    kinds = adapters.evidence_kinds()
    assert {"registry", "rollout"} <= kinds

    ran: list[str] = []
    ctx.index._db().set_trace_callback(ran.append)
    found = ctx.index.all_artifacts("claude", {"registry"})
    ctx.index._db().set_trace_callback(None)

    assert len(found) == 3 and all(a.kind == "registry" for v in found.values() for a in v)
    db = sqlite3.connect(ctx.index.path)
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'artifacts_evidence'")
    assert "kind = 'registry' OR" in sql.fetchone()[0]
    (query,) = [q for q in ran if q.startswith("SELECT")]
    plan = db.execute(f"EXPLAIN QUERY PLAN {query}").fetchall()
    assert "USING INDEX artifacts_evidence" in str(plan), (query, plan)
    db.close()

    Index(ctx.index.path, {"registry"})  # another version's kinds
    db = sqlite3.connect(ctx.index.path)
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'artifacts_evidence'")
    assert sql.fetchone()[0].endswith("WHERE (kind = 'registry')")
    db.close()
    assert Index(ctx.index.path, kinds).all_artifacts("claude", {"registry"}) == found


def test_building_the_index_changes_no_timestamp_it_reads(fake_home: FakeHome) -> None:
    parent = make_session(fake_home, age_days=40)
    make_session(fake_home, parent=parent.id, age_days=40)
    make_zero_session(zero_root(fake_home.data), "z1", days=40)
    roots = [fake_home.claude, fake_home.root / "tmp", zero_root(fake_home.data)]
    before = {r: mtimes(r) for r in roots}

    ctx = context()
    scan(ctx)
    reconcile(ctx)
    refresh(ctx, "claude", parent.id)

    assert {r: mtimes(r) for r in roots} == before
    assert ctx.index.count() == 3


# Times within half a microsecond of a second print as that second (Python
# rounds to the microsecond first); negative and fractional ones too.
EDGE_TIMES = [
    1_790_000_000.0,
    1_790_000_000.9999995,
    1_790_000_000.9999994,
    1_790_000_000.99999949,
    1_790_000_000.4,
    86_399.9999996,
    0.0,
    -0.4,
    -0.5000001,
    -1.9999996,
    -86_400.25,
]


def test_listing_writes_what_the_cli_prints(fake_home: FakeHome, index: Index) -> None:
    plain = 'a "quoted" back\\slash, \\" and \\\\", {"x": [1]}'
    odd = ["tab\t", "new\nline", "ü", "\u2028", "\x7f", "\x01"]
    for n, mtime in enumerate([*EDGE_TIMES, None]):
        artifact = Artifact(f"/x/{n}", "transcript", n * 1000, mtime)
        parent = f"p{n}" if n % 2 else None
        index.put(
            [Session("claude", f"s{n:02}", plain if n % 3 else None, parent, [artifact], bytes=n)]
        )
    for n, text in enumerate(odd):
        index.put([Session("zero", f"z{n}", text, None, [Artifact(f"/z{n}", "t", 1, 5.0)])])
    index.put([Session("zero", "zp", "/w", odd[2], [Artifact("/zp", "t", 1, 5.0)])])

    listed = list(index.listing_rows())

    sessions = index.sessions()
    assert [(a, i) for a, i, _ in listed] == [(s.agent, s.id) for s in sessions]
    flagged = set()
    for (_, sid, text), s in zip(listed, sessions, strict=True):
        assert json.loads(text) == session_json(s, State.IDLE)
        assert text.endswith(IDLE_TAIL)
        if written_as_python(text):
            assert text == folded_item(session_json(s, State.IDLE))
        else:
            flagged.add(sid)
    # Control characters are escaped as Python does; DEL and non-ASCII not.
    assert flagged == {"z2", "z3", "z4", "zp"}
    printed = {i: json.loads(t)["last_activity"] for _, i, t in listed}
    for n, mtime in enumerate(EDGE_TIMES):
        assert printed[f"s{n:02}"] == rfc3339(mtime), mtime
    assert printed[f"s{len(EDGE_TIMES):02}"] is None


def test_listing_filters_by_agent_and_idle_time(fake_home: FakeHome, index: Index) -> None:
    for n, mtime in enumerate([10.0, 20.0, 30.0, None]):
        index.put([Session("claude", f"c{n}", None, None, [Artifact(f"/c{n}", "t", 1, mtime)])])
    index.put([Session("zero", "z", None, None, [Artifact("/z", "t", 1, 15.0)])])

    assert [i for _, i, _ in index.listing_rows("claude")] == ["c0", "c1", "c2", "c3"]
    assert [i for _, i, _ in index.listing_rows(idle_before=20.0)] == ["c0", "z"]
    assert [i for _, i, _ in index.listing_rows("zero", idle_before=15.0)] == []
    assert [i for _, i, _ in index.listing_rows("nosuch")] == []


def test_sessions_of_reads_the_sessions_asked_for(fake_home: FakeHome, index: Index) -> None:
    for sid in ("a", "b", 'q"uote'):
        index.put([Session("claude", sid, None, None, [Artifact(f"/{sid}", "t", 1, 1.0)])])
    index.put([Session("zero", "a", None, None, [Artifact("/za", "t", 1, 1.0)])])

    got = index.sessions_of("claude", ["a", 'q"uote', "missing"])

    assert sorted((s.agent, s.id) for s in got) == [("claude", "a"), ("claude", 'q"uote')]
    assert index.sessions_of("claude", []) == []


def test_evidence_artifacts_of_one_agent(fake_home: FakeHome, index: Index) -> None:
    index.put(
        [
            Session(
                "claude",
                "a",
                None,
                None,
                [Artifact("/a/t", "transcript", 1, 1.0), Artifact("/a/r", "registry", 1, 1.0)],
            )
        ]
    )
    index.put([Session("codex", "b", None, None, [Artifact("/b/r", "registry", 1, 1.0)])])

    assert index.all_artifacts("claude", ["registry"]) == {
        ("claude", "a"): [Artifact("/a/r", "registry", 1, 1.0)]
    }
    assert set(index.all_artifacts(None, ["registry"])) == {("claude", "a"), ("codex", "b")}
    assert index.all_artifacts("claude", []) == {}


@pytest.mark.parametrize(("touched", "batched"), [(3, True), (9, False)])
def test_reconcile_relists_in_batches_and_agrees_with_a_scan(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch, touched: int, batched: bool
) -> None:
    """A few changed sessions are listed again a batch at a time (one
    listing pass per batch); past a quarter of the agent's sessions, one
    scan. Either way the index ends as a fresh scan would write it."""
    sessions = [
        make_session(fake_home, cwd=f"/w/p{i % 3}", age_days=40, full=False) for i in range(20)
    ]
    ctx = context()
    settle(ctx.adapters["claude"].watch_dirs())
    scan(ctx)
    monkeypatch.setattr(indexing, "RELIST_BATCH", 2)
    monkeypatch.setattr(base, "LOOKUPS_ALONE", 2)
    passes: list[int] = []
    listing = ClaudeAdapter.sessions

    def counting(
        self: ClaudeAdapter, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        if names is not None:
            passes.append(len(names))
        return listing(self, names, known)

    monkeypatch.setattr(ClaudeAdapter, "sessions", counting)
    later = sessions[0].transcript.stat().st_mtime + 3600
    for s in sessions[1:touched]:
        os.utime(s.transcript, (later, later))
    for path in sorted(sessions[0].all_paths(), key=lambda p: -len(p.parts)):
        path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    fresh = make_session(fake_home, cwd="/w/p0", age_days=35, full=False)

    relisted_count = reconcile(ctx)
    relisted = rows(ctx.index.path)

    # The changed ones, the one gone and the new one: no other session; or
    # every session of the agent, scanned.
    assert relisted_count == (touched + 1 if batched else len(sessions))
    if batched:
        assert sum(passes) == touched + 1 and max(passes) == 2, passes
    else:
        assert passes == [], "over a quarter of the sessions changed: one scan instead"
    assert {s.id for s in ctx.index.sessions()} == {s.id for s in [*sessions[1:], fresh]}
    scan(ctx)
    assert relisted == rows(ctx.index.path)


def test_a_session_made_in_the_clock_tick_of_the_change_signed_is_found_by_reconcile(
    fake_home: FakeHome,
) -> None:
    """A directory's mtime comes from a coarse clock (FAT's in 2 s steps):
    a session made in the same tick as the change the index signed leaves
    the directory's mtime as it was signed. A mtime that recent is signed
    as unknown, so the next reconcile looks at the directory again."""
    first = make_session(fake_home, cwd="/w/p", age_days=40, full=False)
    adapter = ClaudeAdapter(Env.from_environ())
    # A stamp no clock has reached yet: racy whenever it is read.
    tick = time.time_ns() + 60 * 10**9
    os.utime(first.transcript.parent, ns=(tick, tick))
    ctx = context()
    scan(ctx)
    stamps = {os.fspath(d): os.stat(d).st_mtime_ns for d in adapter.watch_dirs()}

    made = make_session(fake_home, cwd="/w/p", age_days=40, full=False)
    for d, ns in stamps.items():
        os.utime(d, ns=(ns, ns))  # the coarse clock: no mtime moved
    new_dirs = {os.fspath(d) for d in adapter.watch_dirs()} - set(stamps)
    assert not new_dirs, f"SETUP INVALID: the new session made directories {new_dirs}"
    assert made.transcript.parent == first.transcript.parent, "SETUP INVALID: another project"

    reconcile(ctx)

    assert {s.id for s in ctx.index.sessions()} == {first.id, made.id}
