"""The Codex adapter against real Codex-shaped trees: real files, real SQLite,
real processes, the real removal engine, and a fake `codex` binary."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
import zstandard
from structlog.testing import capture_logs

from agentkeep import rmtree
from agentkeep.adapters.base import listed, load
from agentkeep.adapters.codex import CodexAdapter
from agentkeep.errors import RemovalError
from agentkeep.model import Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.removal import SessionRemoval
from build_codex import (
    HOLD_OPEN,
    HOLD_WRITE_LOCK,
    CodexTree,
    build_codex,
    calls,
    install_fake_codex,
    new_id,
    seen,
    without,
)
from fakehome import FakeHome
from trees import file_times, kept_files

OLD = 1_700_000_000.0  # 2023-11-14


@pytest.fixture
def tree(fake_home: FakeHome) -> CodexTree:
    # No real codex is ever run: PATH keeps no directory that has one.
    fake_home.environ["PATH"] = without(fake_home, "codex")
    return build_codex(fake_home)


def adapter(fake_home: FakeHome) -> CodexAdapter:
    return CodexAdapter(Env.from_environ(fake_home.environ))


def by_id(fake_home: FakeHome) -> dict[str, Session]:
    return {s.id: s for s in adapter(fake_home).sessions()}


def paths(session: Session) -> set[str]:
    return {a.path for a in session.artifacts}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- finding and attributing ----------------------------------------------------


def test_scan_attributes_every_artifact_to_its_session(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    sid = tree.full_session(mtime=OLD)
    other = tree.full_session(cwd="/home/u/other")
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    tui = tree.root / "tui-thread-reference-capabilities" / sid

    sessions = by_id(fake_home)

    assert set(sessions) == {sid, other}
    s = sessions[sid]
    # A row in every table of the six databases that holds one (FIELD-NOTES).
    rows = tree.naming(sid)
    assert len(rows) == 15 and len({r.partition("#")[0] for r in rows}) == 6
    assert paths(s) == {str(rollout), str(tui)} | rows
    assert {a.path for a in s.primary} == {str(rollout), f"{tree.state_db}#threads"}
    assert {a.kind for a in s.artifacts if a.path.endswith("#threads")} == {"row"}
    assert s.workspace == "/home/u/proj"
    assert s.parent is None
    assert s.residual == [str(tree.index)]
    assert s.bytes == rollout.stat().st_size + tui.stat().st_size
    assert s.updated == 1_767_600_000
    # The row is newer than the file: activity is the newest of both.
    assert s.last_activity() == 1_767_600_000
    # Row artifacts name a table; files are each one session's only.
    assert not {p for p in paths(s) & paths(sessions[other]) if "#" not in p}
    assert len(paths(sessions[other])) == len(paths(s))
    assert sessions[other].workspace == "/home/u/other"
    # load lists the same session again from disk.
    assert load(adapter(fake_home), sid) == s
    assert load(adapter(fake_home), sid.upper()) == s


def test_a_session_with_only_a_row_is_still_a_session(fake_home: FakeHome, tree: CodexTree) -> None:
    # Deleting only the file makes the session reappear from the database.
    sid = new_id()
    tree.thread(sid, parent=None)
    s = load(adapter(fake_home), sid)
    assert s is not None
    assert [(a.path, a.primary) for a in s.artifacts] == [(f"{tree.state_db}#threads", True)]


def test_file_mtime_counts_when_newer_than_the_row(fake_home: FakeHome, tree: CodexTree) -> None:
    sid = new_id()
    path = tree.rollout(sid)
    tree.thread(sid, rollout=path, updated_at=int(OLD))
    s = load(adapter(fake_home), sid)
    assert s is not None
    assert s.last_activity() == pytest.approx(path.stat().st_mtime)


@pytest.mark.parametrize(
    ("updated_at", "updated_at_ms", "expected"),
    [
        (1_767_600_000, None, 1_767_600_000.0),  # seconds
        (1_767_600_000_250, None, 1_767_600_000.25),  # milliseconds
        ("1767600000", None, 1_767_600_000.0),  # a number stored as text
        ("2026-01-05T08:00:00Z", None, 1_767_600_000.0),  # RFC 3339 text
        (1_767_500_000, 1_767_600_000_000, 1_767_600_000.0),  # newest of both columns
        ("yesterday", None, None),  # unreadable: undated
        ("2026-01-05 08:00:00", None, None),  # no zone: ambiguous, undated
        (1_767_600_000, "soon", None),  # one column unreadable: undated
    ],
)
def test_row_update_time_in_every_shape(
    fake_home: FakeHome,
    tree: CodexTree,
    updated_at: object,
    updated_at_ms: object,
    expected: float | None,
) -> None:
    sid = new_id()
    tree.rollout(sid, mtime=OLD)
    tree.thread(sid, updated_at=updated_at, updated_at_ms=updated_at_ms)
    s = load(adapter(fake_home), sid)
    assert s is not None
    assert s.updated == expected
    assert s.last_activity() == expected


def test_parents_of_forks_and_subagents(fake_home: FakeHome, tree: CodexTree) -> None:
    root, fork, sub, by_row = new_id(), new_id(), new_id(), new_id()
    tree.rollout(root)
    tree.rollout(fork, forked_from=root)
    tree.rollout(sub, spawned_by=fork, zst=True)
    tree.thread(by_row, parent=fork)  # no rollout: the row's parent_thread_id
    sessions = by_id(fake_home)
    assert sessions[root].parent is None
    assert sessions[fork].parent == root
    assert sessions[sub].parent == fork
    assert sessions[by_row].parent == fork


def test_zst_rollout_is_read(fake_home: FakeHome, tree: CodexTree) -> None:
    parent, sid = new_id(), new_id()
    packed = tree.rollout(sid, forked_from=parent, archived=True, zst=True, cwd="/home/u/zst")
    assert packed.name.endswith(".jsonl.zst") and packed.parent.name == "archived_sessions"
    s = load(adapter(fake_home), sid)
    assert s is not None
    assert [(a.path, a.kind, a.primary) for a in s.artifacts] == [
        (str(packed), "archived-rollout", True)
    ]
    assert (s.parent, s.workspace) == (parent, "/home/u/zst")


def test_load_follows_the_rollout_from_plain_to_zst(fake_home: FakeHome, tree: CodexTree) -> None:
    sid = new_id()
    plain = tree.rollout(sid, forked_from=(parent := new_id()))
    assert paths(load(adapter(fake_home), sid)) == {str(plain)}  # type: ignore[arg-type]

    # Mid-compression both names exist: both are the session's.
    packed = plain.with_name(plain.name + ".zst")
    packed.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    assert paths(load(adapter(fake_home), sid)) == {str(plain), str(packed)}  # type: ignore[arg-type]

    plain.unlink()
    s = load(adapter(fake_home), sid)
    assert s is not None
    assert paths(s) == {str(packed)}
    assert s.parent == parent
    assert adapter(fake_home).session_for_path(str(packed)) == sid


# -- bad input -------------------------------------------------------------------


def test_malformed_entries_are_skipped_with_a_log_line(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    good = tree.full_session()
    truncated = new_id()
    tree.rollout(truncated, first_line='{"type": "session_meta", "payload": {"id": "')
    liar = new_id()
    tree.rollout(
        liar,
        first_line=json.dumps(
            {"type": "session_meta", "payload": {"id": good, "forked_from_id": good}}
        ),
    )
    day = tree.root / "sessions" / "2026" / "01" / "05"
    (day / "rollout-2026-01-05T09-30-00-not-a-uuid-at-all-here-00000000.jsonl").write_text("{}\n")
    (day / f"rollout-2026-01-05T09-30-00-{new_id().upper()}.jsonl").write_text("{}\n")
    (day / f"rollout-2026-01-05T09-30-00-{new_id()}.jsonl").mkdir()
    tree.thread("../../etc/passwd")
    tree.thread("a/b")
    (tree.root / "tui-thread-reference-capabilities" / "..hidden").write_text("x")

    with capture_logs() as logs:
        sessions = by_id(fake_home)

    assert set(sessions) == {good, truncated, liar}
    # Truncated and lying first lines: the file is the session's (its name
    # says so), but nothing is taken from its content.
    assert sessions[truncated].parent is None and sessions[truncated].workspace is None
    assert sessions[liar].parent is None
    attributed = set().union(*(paths(s) for s in sessions.values()))
    assert not any("not-a-uuid" in p or "etc/passwd" in p or "..hidden" in p for p in attributed)
    events = {entry["event"] for entry in logs}
    assert "rollout first line is not JSON; parent and workspace unknown" in events
    assert "session_meta names another id; ignored" in events
    assert "rollout name without a session id; skipped" in events
    assert "threads row id is not a canonical UUID; skipped" in events
    assert "a directory named like a rollout; skipped" in events
    assert load(adapter(fake_home), "../../etc/passwd") is None


def test_a_first_line_nested_past_the_parser_is_malformed_not_fatal(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    """A first line (or a session_index.jsonl line) nested deeper than the
    JSON parser recurses is read as malformed: the listing goes on, as for
    any other bad line, instead of ending with a RecursionError."""
    good = tree.full_session()
    deep = new_id()
    tree.rollout(deep, first_line="[" * 50_000)
    with tree.index.open("a") as index:
        index.write("[" * 50_000 + "\n")
    sessions = by_id(fake_home)
    assert set(sessions) == {good, deep}
    assert sessions[deep].workspace is None and sessions[deep].parent is None


@pytest.mark.parametrize("damage", ["not-a-database", "corrupt"])
def test_unreadable_state_database_makes_sessions_undated(
    fake_home: FakeHome, tree: CodexTree, damage: str
) -> None:
    sid = tree.full_session(mtime=OLD)
    if damage == "not-a-database":
        tree.state_db.write_text("this is not a database\n" * 200)
    else:
        with tree.state_db.open("r+b") as f:  # keep the header, wreck the schema page
            f.seek(100)
            f.write(os.urandom(3000))
    with capture_logs() as logs:
        s = load(adapter(fake_home), sid)
    assert s is not None
    assert not any(a.path.endswith("#threads") for a in s.artifacts)
    assert s.undated and s.last_activity() is None
    assert "state database unreadable; codex sessions undated" in {e["event"] for e in logs}
    # Its row may be in there: removing the files alone would half remove it.
    with pytest.raises(RemovalError, match="cannot read"):
        adapter(fake_home).remove(s, remover(sid))
    assert all(os.path.exists(a.path) for a in s.artifacts if a.kind != "row")


def test_unreadable_history_database_attributes_nothing(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    sid = tree.full_session()
    tree.history_db.write_text("garbage" * 100)
    with capture_logs() as logs:
        s = load(adapter(fake_home), sid)
    assert s is not None and not s.undated
    assert not any(a.path.startswith(str(tree.history_db)) for a in s.artifacts)
    assert f"{tree.root / 'goals_1.sqlite'}#thread_goals" in paths(s)  # the others still read
    assert "codex database unreadable; its rows not attributed" in {e["event"] for e in logs}


def test_ids_and_paths(fake_home: FakeHome, tree: CodexTree) -> None:
    a = adapter(fake_home)
    sid = new_id()
    assert a.canonical_id(sid.upper()) == sid
    for bad in ("../x", sid + "/..", sid[:-1], "", sid + "0"):
        assert a.canonical_id(bad) is None
    day = tree.root / "sessions" / "2026" / "01" / "05"
    assert a.session_for_path(str(day / f"rollout-2026-01-05T09-30-00-{sid}.jsonl")) == sid
    assert (
        a.session_for_path(str(tree.root / "archived_sessions" / f"rollout-x-{sid}.jsonl.zst"))
        == sid
    )
    assert a.session_for_path(str(tree.root / "tui-thread-reference-capabilities" / sid)) == sid
    assert a.session_for_path(str(tree.state_db)) is None
    assert a.session_for_path(f"/elsewhere/rollout-x-{sid}.jsonl") is None
    tree.rollout(sid)
    assert set(a.watch_dirs()) == {
        tree.root,
        tree.root / "sessions",
        tree.root / "archived_sessions",
        tree.root / "sessions" / "2026",
        tree.root / "sessions" / "2026" / "01",
        day,
    }


# -- reading changes nothing -----------------------------------------------------------


def test_scanning_changes_no_time_and_writes_no_row(fake_home: FakeHome, tree: CodexTree) -> None:
    sid = tree.full_session(mtime=OLD)
    tree.rollout(new_id(), archived=True, zst=True, mtime=OLD)
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    # An atime older than the mtime is what relatime would move on a read.
    os.utime(rollout, (OLD - 1000, OLD))
    control = tree.root / "control"
    control.write_text("x")
    os.utime(control, (OLD - 1000, OLD))
    control.read_text()
    atimes_tracked = control.stat().st_atime != OLD - 1000
    before, db_before = file_times(tree.root), (digest(tree.state_db), digest(tree.history_db))
    rows_before = (tree.thread_ids(), tree.item_ids())

    list(adapter(fake_home).sessions())
    load(adapter(fake_home), sid)

    assert file_times(tree.root) == before
    assert (digest(tree.state_db), digest(tree.history_db)) == db_before
    assert (tree.thread_ids(), tree.item_ids()) == rows_before
    if atimes_tracked:
        assert rollout.stat().st_atime == OLD - 1000


# -- in use ---------------------------------------------------------------------------


def test_in_use_by_a_command_line_naming_the_id(
    fake_home: FakeHome, tree: CodexTree, spawn
) -> None:
    sid, other = tree.full_session(), tree.full_session()
    proc = spawn(
        [
            sys.executable,
            "-c",
            "import time; print('up', flush=True); time.sleep(60)",
            "resume",
            sid,
        ],
        ready=True,
    )
    a = adapter(fake_home)
    procs = ProcessTable.snapshot()
    assert proc.pid in {h.pid for h in a.holders(load(a, sid), procs)}  # type: ignore[arg-type]
    assert proc.pid not in {h.pid for h in a.holders(load(a, other), procs)}  # type: ignore[arg-type]


def test_in_use_by_a_process_holding_the_rollout_open(
    fake_home: FakeHome, tree: CodexTree, spawn
) -> None:
    sid = tree.full_session()
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    proc = spawn([sys.executable, "-c", HOLD_OPEN, str(rollout)], ready=True)
    fds = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")]
    assert str(rollout) in fds, "SETUP INVALID: the helper does not hold the rollout"
    a = adapter(fake_home)
    holders = a.holders(load(a, sid), ProcessTable.snapshot())  # type: ignore[arg-type]
    assert [h.detail for h in holders if h.pid == proc.pid] == [f"has {rollout.name} open"]


# -- removal ----------------------------------------------------------------------------


def remover(sid: str, *, dry_run: bool = False) -> SessionRemoval:
    return SessionRemoval("codex", sid, dry_run=dry_run, trash=None)


def test_remove_without_codex_takes_the_row_first(
    fake_home: FakeHome, tree: CodexTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, other = tree.full_session(), tree.full_session()
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    tui = tree.root / "tui-thread-reference-capabilities" / sid
    rows, other_rows = tree.naming(sid), tree.naming(other)
    row_present_when_rollout_removed: list[bool] = []

    def before_leaf(path: str) -> None:
        if path == str(rollout):
            row_present_when_rollout_removed.append(sid in tree.thread_ids())

    monkeypatch.setattr(rmtree, "_before_leaf", before_leaf)
    a, r = adapter(fake_home), remover(sid)
    a.remove(load(a, sid), r)  # type: ignore[arg-type]

    assert row_present_when_rollout_removed, "SETUP INVALID: the rollout was never removed"
    assert row_present_when_rollout_removed == [False]
    assert r.removed[:3] == [f"{tree.state_db}#threads", str(rollout), str(tui)]
    # Every other row of every database, after the files.
    assert sorted(r.removed[3:]) == sorted(rows - {f"{tree.state_db}#threads"})
    assert r.residuals == [str(tree.index)]
    assert not rollout.exists() and not tui.exists()
    assert tree.naming(sid) == set()
    assert sid in tree.index.read_text()  # Codex's own index is never edited
    assert load(a, sid) is None
    assert load(a, other) is not None and tree.naming(other) == other_rows


def test_rows_of_tables_a_later_codex_adds_are_the_sessions(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    """Tables come from the schema: a new table with a thread_id column, in a
    known database or a new one, holds the session's rows; a table that only
    mentions the id elsewhere is not read (looking again reports it)."""
    sid, other = tree.full_session(), tree.full_session()
    goals, future = tree.root / "goals_1.sqlite", tree.root / "future_3.sqlite"
    for db, sql in (
        (goals, "CREATE TABLE thread_notes (thread_id TEXT, note TEXT)"),
        (future, "CREATE TABLE scratch (id INTEGER PRIMARY KEY, thread_id TEXT)"),
        (future, "CREATE TABLE opaque (ref TEXT)"),
    ):
        conn = sqlite3.connect(db)
        with conn:
            conn.execute(sql)
            table = sql.split()[2]
            column = "ref" if table == "opaque" else "thread_id"
            for owner in (sid, other):
                conn.execute(f"INSERT INTO {table} ({column}) VALUES (?)", (owner,))
        conn.close()
    a = adapter(fake_home)
    assert future in a.databases() and goals in a.databases()
    s = load(a, sid)
    assert s is not None
    assert {f"{goals}#thread_notes", f"{future}#scratch"} <= paths(s)
    assert f"{future}#opaque" not in paths(s)

    a.remove(s, remover(sid))

    assert tree.naming(sid) == {f"{future}#opaque"}
    assert {f"{goals}#thread_notes", f"{future}#scratch", f"{future}#opaque"} <= tree.naming(other)


def test_rows_a_table_keys_by_session_id_are_the_sessions_too(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    """Codex 0.171's state_5.sqlite#session_model_ids names the session by a
    `session_id` column (codex delete clears it): its rows are the
    session's, and go with it; another session's stay."""
    sid, other = tree.full_session(), tree.full_session()
    conn = sqlite3.connect(tree.state_db)
    with conn:
        conn.execute("CREATE TABLE session_model_ids (session_id TEXT NOT NULL, model TEXT)")
        for owner in (sid, other):
            conn.execute("INSERT INTO session_model_ids VALUES (?, 'gpt-5')", (owner,))
    conn.close()
    table = f"{tree.state_db}#session_model_ids"
    a = adapter(fake_home)
    s = load(a, sid)
    assert s is not None and table in paths(s)

    a.remove(s, remover(sid))

    assert tree.naming(sid) == set()
    assert table in tree.naming(other)


def test_a_subagent_is_a_child_by_its_spawn_edge(fake_home: FakeHome, tree: CodexTree) -> None:
    """0.169 keeps a subagent's parent in thread_spawn_edges (threads has no
    parent column any more): the edge is a row of both threads."""
    parent, child = tree.full_session(), new_id()
    tree.thread(child, parent=parent)  # a row and an edge, no rollout
    edge = f"{tree.state_db}#thread_spawn_edges"
    sessions = by_id(fake_home)
    assert sessions[child].parent == parent
    assert edge in paths(sessions[child]) and edge in paths(sessions[parent])

    adapter(fake_home).remove(sessions[child], remover(child))

    assert load(adapter(fake_home), child) is None
    assert edge not in paths(load(adapter(fake_home), parent))  # type: ignore[arg-type]
    assert parent in tree.thread_ids()


def test_the_older_layout_is_still_read(fake_home: FakeHome) -> None:
    """Before 0.169: threads with a parent_thread_id column, thread_items of
    three columns, no other database."""
    old = CodexTree(build_codex(fake_home).root, legacy=True)
    parent = old.full_session()
    sid = new_id()
    old.thread(sid, parent=parent)
    old.items(sid)
    s = load(adapter(fake_home), sid)
    assert s is not None and s.parent == parent
    assert paths(s) == {f"{old.state_db}#threads", f"{old.history_db}#thread_items"}
    assert paths(load(adapter(fake_home), parent)) == {  # type: ignore[arg-type]
        str(next(old.root.glob(f"sessions/*/*/*/rollout-*-{parent}.jsonl"))),
        str(old.root / "tui-thread-reference-capabilities" / parent),
        f"{old.state_db}#threads",
        f"{old.history_db}#thread_items",
    }
    adapter(fake_home).remove(s, remover(sid))
    assert sid not in old.thread_ids() and sid not in old.item_ids()


def test_a_half_removed_session_is_listed_and_finished(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    sid = tree.full_session()
    next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl")).unlink()
    conn = sqlite3.connect(tree.state_db)
    with conn:
        conn.execute("DELETE FROM threads WHERE id = ?", (sid,))
    conn.close()
    tui = tree.root / "tui-thread-reference-capabilities" / sid
    rows = tree.naming(sid)
    a = adapter(fake_home)
    s = load(a, sid)
    assert s is not None and s.primary == [] and sid in by_id(fake_home)
    assert paths(s) == {str(tui)} | rows
    # Codex installed: it cannot find a session by rows alone (it fails
    # without a row or a rollout), so they are removed here, kept in the trash.
    log = install_fake_codex(fake_home)
    r = remover(sid)
    a.remove(s, r)
    assert calls(log) == []
    assert r.removed[0] == str(tui) and set(r.removed[1:]) == rows
    assert load(a, sid) is None and tree.naming(sid) == set()


def test_remove_with_codex_moves_the_rollout_first_and_finishes_what_it_left(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    sid, other = tree.full_session(), tree.full_session()
    other_rows = tree.naming(other)
    packed = tree.rollout(sid, archived=True, zst=True)  # a second rollout of the same session
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    # A table this Codex does not know: its rows are left, and reported.
    log = install_fake_codex(fake_home, skip=("logs",))
    tui = tree.root / "tui-thread-reference-capabilities" / sid
    a, r = adapter(fake_home), remover(sid)

    a.remove(load(a, sid), r)  # type: ignore[arg-type]

    # Without --force and a terminal the real codex refuses to delete.
    assert calls(log) == [["--version"], ["delete", "--force", sid]]
    # The rollouts went first (Codex lists no thread without one), the
    # threads row was still there for codex to find the session by.
    assert seen(log) == [{"id": sid, "rollouts": 0, "threads": 1}]
    assert not packed.exists() and not rollout.exists() and sid not in tree.thread_ids()
    assert not tui.exists()  # a file of the session it left: ours
    assert r.removed == [str(packed), str(rollout), f"codex delete --force {sid}", str(tui)]
    assert r.residuals == [f"{tree.root / 'logs_2.sqlite'}#logs"]  # rows it left: reported
    assert tree.naming(sid) == {f"{tree.root / 'logs_2.sqlite'}#logs"}
    assert load(a, other) is not None and tree.naming(other) == other_rows


def test_codex_delete_is_not_run_while_a_subagent_thread_stays(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    """`codex delete` removes the session's subagent threads with it: one
    still on disk refuses the parent's removal (descendants go first)."""
    parent = tree.full_session()
    child = tree.full_session(spawned_by=parent)
    tree.spawn_edge(parent, child)
    log = install_fake_codex(fake_home)
    before = file_times(tree.root)
    a = adapter(fake_home)

    with pytest.raises(RemovalError, match=f"subagent thread {child} is still present"):
        a.remove(load(a, parent), remover(parent))  # type: ignore[arg-type]
    assert calls(log) == [] and file_times(tree.root) == before

    a.remove(load(a, child), remover(child))  # type: ignore[arg-type]
    a.remove(load(a, parent), remover(parent))  # type: ignore[arg-type]
    assert calls(log) == [["--version"], ["delete", "--force", child]] * 1 + [
        ["--version"],
        ["delete", "--force", parent],
    ]
    assert tree.naming(parent) == set() and tree.naming(child) == set()


def test_a_failing_codex_leaves_the_session_listed_and_fails(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    sid = tree.full_session()
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    rows = tree.naming(sid)
    log = install_fake_codex(fake_home, fail=True)
    a = adapter(fake_home)
    r = remover(sid)
    with pytest.raises(RemovalError, match="codex delete failed .*still listed"):
        a.remove(load(a, sid), r)  # type: ignore[arg-type]
    assert r.removed == [str(rollout)]  # codex did nothing: only the rollout went
    assert calls(log) == [["--version"], ["delete", "--force", sid]]
    assert tree.naming(sid) == rows
    # Codex no longer offers it; the next run (a journal's) finishes it.
    log = install_fake_codex(fake_home)
    a.remove(load(a, sid), remover(sid))  # type: ignore[arg-type]
    assert seen(log) == [{"id": sid, "rollouts": 0, "threads": 1}]
    assert load(a, sid) is None and tree.naming(sid) == set()


@pytest.mark.parametrize("with_codex", [False, True])
def test_every_row_and_the_rollout_go_into_the_trash(
    fake_home: FakeHome, tree: CodexTree, with_codex: bool
) -> None:
    """What a purge takes is kept for restore: the rollout is moved into the
    trash, every row (the ones `codex delete` deletes too) is copied there
    before it goes, and restore puts all of it back."""
    sid, other = tree.full_session(), tree.full_session()
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    content, rows = rollout.read_bytes(), tree.naming(sid)
    expected = {
        (db, table): _rows_of(Path(db), table, sid)
        for db, _, table in (r.partition("#") for r in rows)
    }
    log = install_fake_codex(fake_home) if with_codex else None

    fake_home.cli("purge", "codex", sid, "--json", check=True)

    assert (calls(log)[-1] == ["delete", "--force", sid]) if log else True
    assert tree.naming(sid) == set() and not rollout.exists()
    entry = next((fake_home.state / "trash" / "codex").iterdir())
    kept = kept_files(entry)
    moved = [data for name, data in kept.items() if name.endswith(f"/{rollout.name}")]
    assert moved == [content]
    rows_db = fake_home.root / "rows.sqlite"
    rows_db.write_bytes(kept["rows.sqlite"])
    assert _kept_rows(rows_db) == expected
    assert load(adapter(fake_home), other) is not None
    [listed] = json.loads(fake_home.cli("trash", "--json", check=True).stdout)["entries"]
    assert listed["partial"] is False, "all that was taken waits in the trash"

    fake_home.cli("restore", "codex", sid, check=True)
    assert rollout.read_bytes() == content
    assert {(db, t): _rows_of(Path(db), t, sid) for db, t in expected} == expected


def _rows_of(db: Path, table: str, sid: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        where = " OR ".join(f'"{c}" = ?' for c in cols)
        return sorted(conn.execute(f'SELECT * FROM "{table}" WHERE {where}', [sid] * len(cols)))
    finally:
        conn.close()


def _kept_rows(path: Path) -> dict[tuple[str, str], list[tuple[object, ...]]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        listed = conn.execute("SELECT n, db, name FROM tables").fetchall()
        return {(db, name): sorted(conn.execute(f"SELECT * FROM t{n}")) for n, db, name in listed}
    finally:
        conn.close()


def test_a_codex_without_delete_is_not_asked_to_delete(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    sid = tree.full_session()
    log = install_fake_codex(fake_home, version="0.120.3")
    a, r = adapter(fake_home), remover(sid)
    a.remove(load(a, sid), r)  # type: ignore[arg-type]
    assert calls(log) == [["--version"]]
    assert r.removed[0] == f"{tree.state_db}#threads"
    assert load(a, sid) is None


def test_a_database_held_for_writing_refuses_before_anything_is_removed(
    fake_home: FakeHome, tree: CodexTree, spawn
) -> None:
    sid = tree.full_session()
    before = file_times(tree.root)
    holder = spawn([sys.executable, "-c", HOLD_WRITE_LOCK, str(tree.history_db)], ready=True)
    probe = sqlite3.connect(tree.history_db, timeout=0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        probe.execute("BEGIN IMMEDIATE")  # SETUP: the write lock is really held
    probe.close()
    a, r = adapter(fake_home), remover(sid)

    with pytest.raises(
        RemovalError, match=f"database .*thread_history_1.sqlite in use by pid {holder.pid}"
    ):
        a.remove(load(a, sid), r)  # type: ignore[arg-type]

    assert r.removed == [] and file_times(tree.root) == before
    assert sid in tree.thread_ids() and sid in tree.item_ids()


def test_dry_run_decides_the_same_and_changes_nothing(fake_home: FakeHome, tree: CodexTree) -> None:
    sid = tree.full_session()
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    rows = tree.naming(sid)
    before, ids = file_times(tree.root), (tree.thread_ids(), tree.item_ids())
    a, r = adapter(fake_home), remover(sid, dry_run=True)

    a.remove(load(a, sid), r)  # type: ignore[arg-type]

    assert r.removed[:3] == [
        f"{tree.state_db}#threads",
        str(rollout),
        str(tree.root / "tui-thread-reference-capabilities" / sid),
    ]
    assert set(r.removed[3:]) == rows - {f"{tree.state_db}#threads"}
    assert file_times(tree.root) == before and (tree.thread_ids(), tree.item_ids()) == ids

    log = install_fake_codex(fake_home)
    r = remover(sid, dry_run=True)
    adapter(fake_home).remove(load(a, sid), r)  # type: ignore[arg-type]
    assert calls(log) == []  # a dry run runs no binary
    # What a real run finishes after `codex delete` (it leaves the TUI
    # reference) is reported too: the same steps, nothing run.
    assert r.removed == [
        str(rollout),
        f"codex delete --force {sid}",
        str(tree.root / "tui-thread-reference-capabilities" / sid),
    ]
    assert file_times(tree.root) == before and (tree.thread_ids(), tree.item_ids()) == ids
    assert tree.naming(sid) == rows


def test_linked_rollout_dir_is_never_removed(fake_home: FakeHome, tree: CodexTree) -> None:
    elsewhere = fake_home.root / "elsewhere"
    sid = new_id()
    real = CodexTree(elsewhere)
    path = real.rollout(sid)
    (tree.root / "sessions").mkdir()
    os.symlink(elsewhere / "sessions" / "2026", tree.root / "sessions" / "2026")
    s = load(adapter(fake_home), sid)
    assert s is not None and all(a.linked for a in s.artifacts)
    assert s.unsafe
    with pytest.raises(RemovalError):
        adapter(fake_home).remove(s, remover(sid))
    assert path.exists()


def test_listing_many_at_once_equals_listing_each(fake_home: FakeHome, tree: CodexTree) -> None:
    """listed() (a prune's batch, a reconcile) goes over the date dirs and
    databases once, and finds exactly what load() finds for each."""
    ids = [tree.full_session(cwd=f"/home/u/p{i}") for i in range(3)]
    wanted = [*ids, ids[1].upper(), new_id(), "not-an-id"]

    many = listed(adapter(fake_home), wanted)

    assert set(many) == set(wanted)
    assert all(many[sid] is not None for sid in ids)
    for sid in wanted:
        assert many[sid] == load(adapter(fake_home), sid), sid
