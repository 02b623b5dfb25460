"""The Copilot adapter against real session trees in a fake home (built as
Copilot 1.0.102 writes them: build_copilot), with real processes for the
holders and a real database for the rows."""

from __future__ import annotations

import fcntl
import hashlib
import json
import sqlite3
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from structlog.testing import capture_logs

from agentkeep import lookagain
from agentkeep.adapters.base import load
from agentkeep.adapters.copilot import CopilotAdapter
from agentkeep.errors import RemovalError
from agentkeep.model import HolderKind, Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.removal import SessionRemoval
from build_agents import mtimes
from build_codex import HOLD_OPEN
from build_copilot import DEAD_PID, DIR_ENTRIES, ROW_TABLES, CopilotTree, count_rows, new_id
from fakehome import FakeHome, Spawn
from trees import file_times

DAY = 86400.0
BAD_IDS = ["", ".", "..", "a/b", "../x", "0b7c", "x" * 36, "../" + new_id(), new_id() + "/x"]
# Takes the `inuse` pair of a session the way a running Copilot does: the
# pid in `inuse.<pid>.lock`, `inuse.<pid>.hold` flocked for its whole life.
INUSE = textwrap.dedent(
    """
    import fcntl, os, sys, time
    d = os.environ["SESSION_DIR"]
    open(os.path.join(d, f"inuse.{os.getpid()}.lock"), "w").write(f"{os.getpid()}\\n")
    hold = open(os.path.join(d, f"inuse.{os.getpid()}.hold"), "w")
    fcntl.flock(hold, fcntl.LOCK_EX)
    print("ready", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def adapter(fake_home: FakeHome) -> CopilotAdapter:
    return CopilotAdapter(Env.from_environ(fake_home.environ))


@pytest.fixture
def tree(fake_home: FakeHome) -> CopilotTree:
    env = fake_home.environ
    return CopilotTree(
        Path(env["COPILOT_HOME"]), Path(env["TMPDIR"]), Path(env["XDG_STATE_HOME"]) / ".copilot"
    )


def scan(adapter: CopilotAdapter) -> dict[str, Session]:
    return {s.id: s for s in adapter.sessions()}


def remover(sid: str) -> SessionRemoval:
    return SessionRemoval("copilot", sid, dry_run=False, trash=None)


def below(*paths: Path) -> set[str]:
    found = set()
    for path in paths:
        found.add(str(path))
        if path.is_dir() and not path.is_symlink():
            found.update(str(p) for p in path.rglob("*"))
    return found


def digest(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


# -- where and what --------------------------------------------------------------


def test_roots_follow_copilot_home_and_xdg_state_home(fake_home: FakeHome) -> None:
    env = dict(fake_home.environ, COPILOT_HOME=str(fake_home.root / "elsewhere"))
    adapter = CopilotAdapter(Env.from_environ(env))
    legacy = Path(env["XDG_STATE_HOME"]) / ".copilot"
    assert [(r.path, r.kind) for r in adapter.roots()] == [
        (fake_home.root / "elsewhere", "home"),
        (legacy, "legacy"),
    ]
    del env["COPILOT_HOME"]
    assert CopilotAdapter(Env.from_environ(env)).roots()[0].path == fake_home.home / ".copilot"
    assert adapter.watch_dirs() == []  # nothing to watch before Copilot ran


def test_every_artifact_is_found_and_nothing_of_another(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    when = time.time() - 40 * DAY
    twin = new_id()
    # Another session whose id shares all but its last digit.
    other = tree.session(twin[:-1] + ("0" if twin[-1] != "0" else "1"), when=when + 60)
    s_made = tree.session(twin, when=when, outputs=1, cwd="/work/alpha")
    shared = tree.shared(s_made, when=when)
    s = scan(adapter)[twin]
    assert s_made.dir is not None and s_made.oplock is not None
    files = {str(s_made.dir / name) for name in DIR_ENTRIES} | {str(s_made.dir)}
    files |= {str(s_made.oplock), str(s_made.outputs[0])}
    rows = {f"{tree.db}#{t}" for t in ROW_TABLES}
    assert {a.path for a in s.artifacts} == files | rows
    assert [a.path for a in s.primary] == [str(s_made.events)] == [s.artifacts[0].path]
    assert s.workspace == "/work/alpha" and s.parent is None and not s.undated
    assert s.updated is not None and abs(s.updated - when) < 1
    last = s.last_activity()
    assert last is not None and abs(last - when) < 1
    assert s.bytes == sum(a.bytes for a in s.artifacts) > s_made.outputs[0].stat().st_size
    assert sorted(s.residual) == sorted(str(p) for p in shared)
    assert not any(other.id in a.path for a in s.artifacts)
    assert load(adapter, twin) == s
    assert adapter.watch_dirs() == [tree.state, tree.oplocks]
    assert adapter.databases() == [tree.db]


def test_bad_ids_reach_nothing_and_paths_map_to_their_session(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    made = tree.session(when=time.time(), outputs=1)
    assert made.dir is not None and made.oplock is not None
    for raw in BAD_IDS:
        assert adapter.canonical_id(raw) is None, raw
        assert load(adapter, raw) is None, raw
    assert adapter.session_for_path(str(made.dir / "events.jsonl")) == made.id
    assert adapter.session_for_path(str(made.dir / "checkpoints" / "index.md")) == made.id
    assert adapter.session_for_path(str(made.oplock)) == made.id
    assert adapter.session_for_path(str(tree.oplocks / f"{made.id}.txt")) is None
    assert adapter.session_for_path(str(made.outputs[0])) is None
    assert adapter.session_for_path(str(tree.db)) is None


def test_an_id_keeps_the_case_it_was_given(adapter: CopilotAdapter, tree: CopilotTree) -> None:
    """`--session-id` takes an upper-case UUID and Copilot names the dir so."""
    upper = new_id().upper()
    tree.session(upper, when=time.time())
    assert set(scan(adapter)) == {upper}
    assert load(adapter, upper.lower()) is None


def test_package_caches_are_never_sessions(
    adapter: CopilotAdapter, tree: CopilotTree, fake_home: FakeHome
) -> None:
    made = tree.session(when=time.time())
    tree.package_caches(Path(fake_home.environ["XDG_CACHE_HOME"]))
    assert set(scan(adapter)) == {made.id}


# -- in use ----------------------------------------------------------------------


def test_a_stale_inuse_pair_holds_nothing_and_its_tool_output_is_the_sessions(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    """A crash leaves `inuse.<pid>` of a dead pid, and a tool output that its
    events never name: the pid in the output's name is the link."""
    if psutil.pid_exists(DEAD_PID):
        pytest.fail("SETUP INVALID: the dead pid is alive")
    made = tree.session(when=time.time() - 40 * DAY, inuse=DEAD_PID)
    assert made.dir is not None and made.events is not None
    (crash_output,) = made.outputs
    assert crash_output.name not in made.events.read_text(), "SETUP INVALID: named in events"
    s = scan(adapter)[made.id]
    assert str(crash_output) in {a.path for a in s.artifacts}
    assert adapter.holders(s, ProcessTable.snapshot()) == []
    assert adapter.lock_files(s) == [made.oplock, made.dir / f"inuse.{DEAD_PID}.hold"]


def test_a_live_inuse_pair_is_a_holder(
    adapter: CopilotAdapter, tree: CopilotTree, spawn: Spawn, fake_home: FakeHome
) -> None:
    made = tree.session(when=time.time() - 40 * DAY)
    env = dict(fake_home.environ, SESSION_DIR=str(made.dir))
    proc = spawn([sys.executable, "-c", INUSE], env, ready=True)
    if ProcessTable.snapshot().naming(made.id):
        pytest.fail("SETUP INVALID: the holder's command line names the session")
    s = scan(adapter)[made.id]
    holders = adapter.holders(s, ProcessTable.snapshot())
    assert [(h.pid, h.kind, h.detail) for h in holders] == [
        (proc.pid, HolderKind.REGISTRY, f"inuse.{proc.pid}.lock")
    ]
    assert made.dir is not None
    hold = made.dir / f"inuse.{proc.pid}.hold"
    assert hold in adapter.lock_files(s)
    with hold.open("rb") as f, pytest.raises(BlockingIOError):
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_command_line_naming_the_id_is_a_holder(
    adapter: CopilotAdapter, tree: CopilotTree, spawn: Spawn
) -> None:
    made = tree.session(when=time.time())
    code = "import time; print('ready', flush=True); time.sleep(600)"
    proc = spawn([sys.executable, "-c", code, f"--resume={made.id}"], ready=True)
    s = load(adapter, made.id)
    assert s is not None
    assert proc.pid in [h.pid for h in adapter.holders(s, ProcessTable.snapshot())]


# -- lineage ---------------------------------------------------------------------


def test_a_fork_names_its_parent_in_its_own_fork_event_only(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    """A fork's events are a copy: its parent's fork events (naming other
    children) and lines naming the parent come along and make no link."""
    when = time.time() - 40 * DAY
    parent = tree.session(when=when, outputs=1)
    child = tree.fork(parent.id, when=when + 60)
    grandchild = tree.fork(child.id, when=when + 120)
    second = tree.fork(parent.id, when=when + 180)  # its copy says "forked into <child>"
    assert second.events is not None and child.id in second.events.read_text()
    assert parent.outputs[0].name in second.events.read_text()
    sessions = scan(adapter)
    assert sessions[parent.id].parent is None
    # The tool output its copy names was written before the fork: the parent's.
    outputs = {s.id for s in sessions.values() for a in s.artifacts if a.kind == "tool-output"}
    assert outputs == {parent.id}
    assert sessions[child.id].parent == parent.id
    assert sessions[grandchild.id].parent == child.id
    assert sessions[second.id].parent == parent.id


def test_a_line_naming_a_fork_that_is_no_json_object_makes_no_link(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    made = tree.session(when=time.time() - 40 * DAY)
    assert made.events is not None
    with made.events.open("a") as f:
        f.write(json.dumps(f'Forked from "x" ({new_id()}) as "y" ({made.id}).') + "\n")
    session = scan(adapter)[made.id]
    assert session.parent is None and not session.undated


# -- the legacy dir ----------------------------------------------------------------


def test_a_session_only_in_the_legacy_dir_is_found_and_removed(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    home = tree.session(when=time.time() - 40 * DAY)
    old = tree.session(
        when=time.time() - 40 * DAY,
        state=tree.legacy / "session-state",
        db=tree.legacy / "session-store.db",
    )
    s = scan(adapter)[old.id]
    assert {a.root for a in s.artifacts if a.root} == {str(tree.legacy)}
    assert f"{tree.legacy / 'session-store.db'}#sessions" in {a.path for a in s.artifacts}
    assert s.unsafe is None and adapter.watch_dirs()[2] == tree.legacy / "session-state"
    adapter.remove(s, remover(old.id))
    assert load(adapter, old.id) is None and not any(p.exists() for p in old.files())
    assert count_rows(tree.legacy / "session-store.db", "sessions", old.id) == 0
    assert load(adapter, home.id) is not None


def test_the_links_left_in_the_legacy_dir_count_a_session_once(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    made = tree.session(when=time.time() - 40 * DAY)
    links = tree.legacy_links()
    s = scan(adapter)[made.id]
    paths = [a.path for a in s.artifacts]
    assert len(paths) == len(set(paths)) and not any(str(tree.legacy) in p for p in paths)
    assert s.unsafe is None and not any(a.linked for a in s.artifacts)
    assert adapter.databases() == [tree.db]
    assert adapter.watch_dirs() == [tree.state, tree.oplocks]
    adapter.remove(s, remover(made.id))
    assert all(link.is_symlink() for link in links)
    assert load(adapter, made.id) is None


def test_a_legacy_dir_linked_elsewhere_is_read_and_never_removed(
    adapter: CopilotAdapter, tree: CopilotTree, fake_home: FakeHome
) -> None:
    elsewhere = fake_home.root / "elsewhere" / "session-state"
    made = tree.session(when=time.time() - 40 * DAY, state=elsewhere, rows=False)
    tree.legacy.mkdir(parents=True)
    (tree.legacy / "session-state").symlink_to(elsewhere)
    s = scan(adapter)[made.id]
    assert s.unsafe is not None and all(a.linked for a in s.artifacts)
    r = remover(made.id)
    adapter.remove(s, r)
    assert all(p.exists() for p in made.files())
    assert str(tree.legacy / "session-state" / made.id / "events.jsonl") in r.residuals


# -- what is malformed, and what Copilot's own delete leaves ------------------------------


def test_malformed_entries_are_skipped_with_a_log_line(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    when = time.time() - 40 * DAY
    garbled = tree.session(when=when, events=["{not json", '{"type": "user.message"}'])
    other = tree.session(when=when)
    assert other.events is not None
    liar = tree.session(when=when, events=other.events.read_text().splitlines())
    cut = tree.session(when=when)
    assert cut.events is not None
    with cut.events.open("a") as f:
        f.write('{"type":"assistant.message","data":{"content":"He')  # a crash mid-line
    (tree.state / "not-a-session").mkdir()
    (tree.state / "stray.txt").write_text("x")
    with capture_logs() as logs:
        sessions = scan(adapter)
    assert set(sessions) == {garbled.id, other.id, liar.id, cut.id}
    assert sessions[garbled.id].undated and sessions[garbled.id].last_activity() is None
    assert sessions[liar.id].undated
    assert not sessions[cut.id].undated and not sessions[other.id].undated
    events = " ".join(str(e["event"]) for e in logs)
    for expected in ("malformed first event", "events name another session", "not a copilot"):
        assert expected in events, expected


def test_the_rows_and_lock_copilots_own_delete_leaves_are_a_session(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    when = time.time() - 40 * DAY
    made = tree.deleted(when=when)
    s = scan(adapter)[made.id]
    assert {a.kind for a in s.artifacts} == {"row", "operation-lock"} and s.primary == []
    last = s.last_activity()
    assert last is not None and abs(last - when) < 1
    r = remover(made.id)
    adapter.remove(s, r)
    assert [count_rows(tree.db, t, made.id) for t in ROW_TABLES] == [0] * len(ROW_TABLES)
    assert load(adapter, made.id) is None and made.oplock is not None
    assert not made.oplock.exists()


# -- removal ---------------------------------------------------------------------


def test_removal_takes_events_first_every_row_and_leaves_what_is_shared(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    when = time.time() - 40 * DAY
    gone = tree.session(when=when, outputs=1)
    kept = tree.session(when=when)
    shared = tree.shared(gone, when=when) + tree.shared(kept, when=when)
    before = digest(sorted(set(shared)))
    s = load(adapter, gone.id)
    assert s is not None
    r = remover(gone.id)
    adapter.remove(s, r)
    assert r.removed[0] == str(gone.events)
    assert r.removed[-len(ROW_TABLES) :] == [f"{tree.db}#{t}" for t in ROW_TABLES]
    assert not any(p.exists() for p in gone.files())
    assert [count_rows(tree.db, t, gone.id) for t in ROW_TABLES] == [0] * len(ROW_TABLES)
    assert [count_rows(tree.db, t, kept.id) for t in ROW_TABLES] == [1] * len(ROW_TABLES)
    conn = sqlite3.connect(f"file:{tree.db}?mode=ro", uri=True)
    found = conn.execute("SELECT session_id FROM search_index WHERE search_index MATCH 'hello'")
    assert [row[0] for row in found] == [kept.id]
    conn.close()
    assert digest(sorted(set(shared))) == before, "shared files are never touched"
    assert sorted(r.residuals) == sorted(str(p) for p in set(shared[:3]))
    # Looking again finds what names it: the shared files, nothing else.
    left = {what for _, what in lookagain.residual(adapter, [gone.id])}
    assert left <= set(r.residuals) | {str(p) for p in shared}


def test_rows_stay_while_a_process_has_the_database_open_and_go_later(
    adapter: CopilotAdapter, tree: CopilotTree, spawn: Spawn
) -> None:
    """Every running Copilot keeps session-store.db open: the files go, the
    rows stay (reported) and make a session of their own, removed later."""
    made = tree.session(when=time.time() - 40 * DAY)
    holder = spawn([sys.executable, "-c", HOLD_OPEN, str(tree.db)], ready=True)
    s = load(adapter, made.id)
    assert s is not None
    r = remover(made.id)
    adapter.remove(s, r)
    assert not any(p.exists() for p in made.files())
    assert {f"{tree.db}#{t}" for t in ROW_TABLES} <= set(r.residuals)
    assert [count_rows(tree.db, t, made.id) for t in ROW_TABLES] == [1] * len(ROW_TABLES)
    holder.kill()
    holder.wait(timeout=10)
    left = load(adapter, made.id)
    assert left is not None and {a.kind for a in left.artifacts} == {"row"}
    adapter.remove(left, remover(made.id))
    assert load(adapter, made.id) is None


def test_scans_change_no_timestamp(adapter: CopilotAdapter, tree: CopilotTree) -> None:
    when = time.time() - 40 * DAY
    for i in range(3):
        made = tree.session(when=when + i, outputs=1, inuse=DEAD_PID if i == 0 else None)
        tree.shared(made, when=when + i)
    read = [tree.state, tree.tmp, tree.home / "logs", tree.home / "sidebar-sessions-state"]

    def times() -> dict[str, object]:
        # The database's files by content and mtime: SQLite's own -wal and
        # -shm beside it (and so its dir's mtime) are the one exception.
        found: dict[str, object] = dict(file_times(tree.home))
        for path in read:
            found.update(mtimes(path))
        return found

    before = times()
    for s in scan(adapter).values():
        load(adapter, s.id)
        adapter.session_for_path(s.artifacts[0].path)
    adapter.watch_dirs()
    assert times() == before


def test_an_unreadable_session_store_keeps_sessions_undated_and_blocks_removal(
    adapter: CopilotAdapter, tree: CopilotTree
) -> None:
    made = tree.session(when=time.time() - 40 * DAY, rows=False)
    tree.db.write_bytes(b"this is not a database\n" * 64)
    with capture_logs() as logs:
        s = scan(adapter)[made.id]
    assert s.undated
    assert "session-store.db unreadable; copilot sessions undated" in [e["event"] for e in logs]
    with pytest.raises(RemovalError, match="cannot read"):
        adapter.remove(s, remover(made.id))
    assert all(p.exists() for p in made.files())


def test_a_tool_output_that_is_not_the_users_file_is_not_the_sessions(
    adapter: CopilotAdapter, tree: CopilotTree, fake_home: FakeHome
) -> None:
    made = tree.session(when=time.time(), outputs=1)
    (output,) = made.outputs
    target = fake_home.root / "not-an-output.txt"
    target.write_text("the user's own file")
    output.unlink()
    output.symlink_to(target)
    s = load(adapter, made.id)
    assert s is not None and str(output) not in {a.path for a in s.artifacts}


# -- through the real CLI ------------------------------------------------------------


def rows_of(db: Path, sid: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the session, table by table (read-only)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        found = {}
        for table in ROW_TABLES:
            column = "id" if table == "sessions" else "session_id"
            sql = f'SELECT * FROM "{table}" WHERE {column} = ? ORDER BY 1'
            found[table] = conn.execute(sql, (sid,)).fetchall()
        return found
    finally:
        conn.close()


def files_of(made_files: list[Path]) -> dict[str, str | None]:
    return {
        p: hashlib.sha256(Path(p).read_bytes()).hexdigest() if Path(p).is_file() else None
        for path in made_files
        for p in sorted(below(path))
    }


def test_purge_then_restore_puts_files_and_rows_back_and_copilots_search_finds_it(
    fake_home: FakeHome, tree: CopilotTree
) -> None:
    fake_home.write_config('trash = "7d"\n')
    made = tree.session(when=time.time() - 3 * DAY, outputs=1, inuse=DEAD_PID)
    files, rows = files_of(made.files()), rows_of(tree.db, made.id)
    assert all(rows.values()), "SETUP INVALID: a table without its row"

    purged = fake_home.cli("purge", "copilot", made.id, "--json")
    assert purged.returncode == 0, purged.stderr
    assert not any(p.exists() for p in made.files())
    assert not any(rows_of(tree.db, made.id).values())

    restored = fake_home.cli("restore", "copilot", made.id, "--json")
    assert restored.returncode == 0, restored.stderr
    assert files_of(made.files()) == files
    assert rows_of(tree.db, made.id) == rows
    conn = sqlite3.connect(f"file:{tree.db}?mode=ro", uri=True)
    hits = conn.execute("SELECT session_id FROM search_index WHERE search_index MATCH 'hello'")
    assert [h[0] for h in hits] == [made.id]
    conn.close()


def test_a_prune_while_copilot_has_the_database_open_leaves_rows_a_later_prune_takes(
    fake_home: FakeHome, tree: CopilotTree, spawn: Spawn
) -> None:
    made = tree.session(when=time.time() - 40 * DAY)
    holder = spawn([sys.executable, "-c", HOLD_OPEN, str(tree.db)], ready=True)

    first = fake_home.cli("prune", "--older-than", "30d", "--json")
    doc = json.loads(first.stdout)
    assert first.returncode == 0, first.stderr
    assert [r["id"] for r in doc["removed"]] == [made.id] and doc["failed"] == []
    assert {f"{tree.db}#{t}" for t in ROW_TABLES} <= {r["path"] for r in doc["residual"]}
    assert not any(p.exists() for p in made.files()) and all(rows_of(tree.db, made.id).values())

    holder.kill()
    holder.wait(timeout=10)
    second = fake_home.cli("prune", "--older-than", "30d", "--json")
    doc = json.loads(second.stdout)
    assert second.returncode == 0, second.stderr
    removed = [(r["id"], r["paths"]) for r in doc["removed"]]
    assert removed == [(made.id, [f"{tree.db}#{t}" for t in ROW_TABLES])]
    assert not any(rows_of(tree.db, made.id).values())
