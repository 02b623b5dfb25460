"""The opencode adapter against real opencode-shaped data dirs: JSON storage,
a real opencode.db, real processes, the real removal engine, and a fake
`opencode` binary (a real one would migrate the database)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentkeep import rmtree
from agentkeep.adapters.base import listed, load
from agentkeep.adapters.opencode import OpencodeAdapter
from agentkeep.errors import RemovalError
from agentkeep.model import Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.removal import SessionRemoval
from agentkeep.trash.entries import entry_dir
from agentkeep.trash.writing import open_entry
from build_codex import HOLD_OPEN, HOLD_WRITE_LOCK, calls, without
from build_opencode import (
    TABLES,
    UPDATED_MS,
    OpencodeTree,
    build_opencode,
    install_fake_opencode,
    new_id,
)
from fakehome import FakeHome
from trees import file_times

ROW_TABLES = list(TABLES)
V2_TABLES = ["session_v2", "event", "event_sequence"]
# What the 2.x `opencode session delete` leaves, for agentkeep to delete.
LEGACY_TABLES = [t for t in ROW_TABLES if t not in V2_TABLES]


@pytest.fixture
def tree(fake_home: FakeHome) -> OpencodeTree:
    # No real opencode is ever run: PATH keeps no directory that has one.
    fake_home.environ["PATH"] = without(fake_home, "opencode")
    return build_opencode(fake_home)


def adapter(fake_home: FakeHome) -> OpencodeAdapter:
    return OpencodeAdapter(Env.from_environ(fake_home.environ))


def by_id(fake_home: FakeHome) -> dict[str, Session]:
    return {s.id: s for s in adapter(fake_home).sessions()}


def paths(session: Session) -> set[str]:
    return {a.path for a in session.artifacts}


def files_under(*roots: Path) -> int:
    total = 0
    for root in roots:
        if root.is_file():
            total += root.stat().st_size
        for dirpath, _dirs, names in os.walk(root):
            total += sum(os.lstat(os.path.join(dirpath, n)).st_size for n in names)
    return total


def storage_of(tree: OpencodeTree, sid: str) -> list[Path]:
    """The session's JSON storage in the order it is removed: session file,
    part dirs, the message dir that names them, todo, diff."""
    messages = tree.storage / "message" / sid
    parts = [tree.storage / "part" / m.stem for m in sorted(messages.glob("*.json"))]
    return [
        tree.storage / "session" / "global" / f"{sid}.json",
        *parts,
        messages,
        tree.storage / "todo" / f"{sid}.json",
        tree.storage / "session_diff" / f"{sid}.json",
    ]


def remover(sid: str, *, dry_run: bool = False) -> SessionRemoval:
    return SessionRemoval("opencode", sid, dry_run=dry_run, trash=None)


# -- finding and attributing -------------------------------------------------------


def test_scan_attributes_every_artifact_to_its_session(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    sid, other = tree.full_session(), tree.full_session()
    files = storage_of(tree, sid)
    assert len(files) == 6

    sessions = by_id(fake_home)

    assert set(sessions) == {sid, other}
    s = sessions[sid]
    assert paths(s) == {str(p) for p in files} | {f"{tree.db}#{t}" for t in ROW_TABLES}
    assert {a.path for a in s.primary} == {
        str(files[0]),
        f"{tree.db}#session",
        f"{tree.db}#session_v2",
    }
    assert s.workspace == "/home/u/proj"
    assert s.updated == UPDATED_MS / 1000
    assert s.bytes == files_under(*files)
    assert not {p for p in paths(s) & paths(sessions[other]) if "#" not in p}
    assert load(adapter(fake_home), sid) == s


def test_a_storage_folder_behind_a_link_is_found_and_marked_linked(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    """A scan lists each storage folder once; one that is a link is not
    listed through, so its files are looked up one by one, and found all
    the same (as linked: never removed)."""
    sid = tree.full_session()
    outside = fake_home.root / "elsewhere-parts"
    (tree.storage / "part").rename(outside)
    (tree.storage / "part").symlink_to(outside)
    parts = {str(tree.storage / "part" / p.name) for p in outside.iterdir()}
    assert len(parts) == 2, "SETUP INVALID: the session's part dirs moved behind the link"

    s = by_id(fake_home)[sid]

    found = {a.path: a for a in s.artifacts}
    assert parts <= found.keys()
    assert all(found[p].linked for p in parts)
    assert not any(a.linked for p, a in found.items() if p not in parts and "#" not in p)
    assert load(adapter(fake_home), sid) == s


def test_parents_down_to_depth_three(fake_home: FakeHome, tree: OpencodeTree) -> None:
    root, child, grandchild, great = new_id(), new_id(), new_id(), new_id()
    tree.full_session(root)
    tree.session_json(child, parent=root)  # 1.x: parentID
    tree.session_rows(grandchild, parent=child, v2=False)  # 1.2: session.parent_id
    tree.session_rows(great, parent=grandchild, legacy=False)  # 2.x: session_v2.parent_id
    sessions = by_id(fake_home)
    assert [sessions[s].parent for s in (root, child, grandchild, great)] == [
        None,
        root,
        child,
        grandchild,
    ]


def test_an_older_database_without_the_new_tables(fake_home: FakeHome, tree: OpencodeTree) -> None:
    tree.create_db(v2=False)
    sid = new_id()
    tree.session_rows(sid, v2=False)
    s = load(adapter(fake_home), sid)
    assert s is not None
    assert paths(s) == {f"{tree.db}#{t}" for t in LEGACY_TABLES}
    # A first 1.2 database: only a session table, with another time column.
    tree.db.unlink()
    conn = sqlite3.connect(tree.db)
    with conn:
        conn.execute("CREATE TABLE session (id TEXT PRIMARY KEY, updated_at INTEGER)")
        conn.execute("INSERT INTO session VALUES (?, ?)", (sid, UPDATED_MS))
    conn.close()
    s = load(adapter(fake_home), sid)
    assert s is not None and s.updated == UPDATED_MS / 1000
    assert paths(s) == {f"{tree.db}#session"}


def test_data_dir_follows_xdg_data_home_wherever_it_points(fake_home: FakeHome) -> None:
    """As opencode does (`opencode debug paths` prints `data <XDG_DATA_HOME>/opencode`
    for a data home outside the home too); whose the place is, is the root
    check's to say. A relative value is no XDG value at all."""
    for value in (fake_home.home / "data", fake_home.root / "shared"):
        fake_home.environ["XDG_DATA_HOME"] = str(value)
        assert adapter(fake_home).root == Path(value) / "opencode"
    fake_home.environ["XDG_DATA_HOME"] = "/srv/../data"
    assert adapter(fake_home).root == Path("/data/opencode")
    fake_home.environ["XDG_DATA_HOME"] = "relative/data"
    assert adapter(fake_home).root == fake_home.home / ".local" / "share" / "opencode"


def test_leftovers_of_a_half_removal_are_listed(fake_home: FakeHome, tree: OpencodeTree) -> None:
    sid = tree.full_session()
    files = storage_of(tree, sid)
    files[0].unlink()
    conn = sqlite3.connect(tree.db)
    with conn:
        conn.execute("DELETE FROM session WHERE id = ?", (sid,))
        conn.execute("DELETE FROM session_v2 WHERE id = ?", (sid,))
    conn.close()
    s = load(adapter(fake_home), sid)
    assert s is not None and s.primary == []
    assert paths(s) == {str(p) for p in files[1:]} | {f"{tree.db}#{t}" for t in ROW_TABLES[2:]}
    assert sid in by_id(fake_home)


# -- bad input ---------------------------------------------------------------------


def test_malformed_entries_are_skipped_with_a_log_line(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    good = tree.full_session()
    truncated, liar = new_id(), new_id()
    tree.session_json(truncated, raw='{"id": "' + truncated + '", "time": {"upd', parent=good)
    tree.session_json(liar, raw=json.dumps({"id": good, "parentID": good}))
    folder = tree.storage / "session" / "global"
    (folder / "bad id!.json").write_text("{}")
    (folder / ".json").write_text("{}")
    (tree.storage / "message" / good / "not a msg!.json").write_text("{}")
    (tree.storage / "part" / "not a msg!").mkdir()
    conn = sqlite3.connect(tree.db)
    with conn:
        for bad in ("../evil", "a/b", ""):
            conn.execute(
                "INSERT INTO session (id, project_id, slug, directory, title, version,"
                " time_created, time_updated) VALUES (?, 'global', 's', '/', 't', '1', 1, 1)",
                (bad,),
            )
            conn.execute("INSERT INTO message VALUES (?, ?, 1, 1, '{}')", (new_id("msg"), bad))
    conn.close()

    with capture_logs() as logs:
        sessions = by_id(fake_home)

    assert set(sessions) == {good, truncated, liar}
    for odd in (truncated, liar):  # named by the file, but nothing read from it
        assert sessions[odd].undated and sessions[odd].parent is None
        assert paths(sessions[odd]) == {str(folder / f"{odd}.json")}
    attributed = set().union(*(paths(s) for s in sessions.values()))
    assert not any("evil" in p or "bad id" in p or "not a msg" in p for p in attributed)
    events = {e["event"] for e in logs}
    assert "session file is not JSON (truncated?); undated" in events
    assert "session file names another session; undated" in events
    assert "session file name is not a session id; skipped" in events
    assert "session row id is not a session id; skipped" in events
    assert load(adapter(fake_home), "../evil") is None


@pytest.mark.parametrize("damage", ["not-a-database", "corrupt"])
def test_an_unreadable_database_makes_sessions_undated_and_blocks_removal(
    fake_home: FakeHome, tree: OpencodeTree, damage: str
) -> None:
    sid = tree.full_session()
    if damage == "not-a-database":
        for side in ("-wal", "-shm"):
            Path(f"{tree.db}{side}").unlink(missing_ok=True)
        tree.db.write_text("SQLite format 2\n" * 300)
    else:
        with tree.db.open("r+b") as f:
            f.seek(100)
            f.write(os.urandom(3000))
    with capture_logs() as logs:
        s = load(adapter(fake_home), sid)
    assert s is not None and s.undated and s.last_activity() is None
    assert not any(a.kind == "row" for a in s.artifacts)
    assert "opencode database unreadable; opencode sessions undated" in {e["event"] for e in logs}
    with pytest.raises(RemovalError, match="cannot read"):
        adapter(fake_home).remove(s, remover(sid))
    assert all(p.exists() for p in storage_of(tree, sid))


def test_ids_and_paths(fake_home: FakeHome, tree: OpencodeTree) -> None:
    a = adapter(fake_home)
    sid = new_id()
    assert a.canonical_id(sid) == sid
    for bad in ("../x", "a/b", "", "-lead", "x" * 129, "a b", "ses.1"):
        assert a.canonical_id(bad) is None
    s = tree.storage
    assert a.session_for_path(str(s / "session" / "global" / f"{sid}.json")) == sid
    assert a.session_for_path(str(s / "message" / sid / "msg_1.json")) == sid
    assert a.session_for_path(str(s / "todo" / f"{sid}.json")) == sid
    assert a.session_for_path(str(s / "part" / "msg_1" / "prt_1.json")) is None
    assert a.session_for_path(str(tree.db)) is None
    assert a.session_for_path(f"/elsewhere/storage/message/{sid}") is None
    tree.session_json(sid, project="p1")
    assert set(a.watch_dirs()) == {
        tree.data,
        s / "session",
        s / "message",
        s / "session" / "p1",
    }


def test_scanning_changes_no_time_and_writes_no_row(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    sid = tree.full_session()
    info = storage_of(tree, sid)[0]
    os.utime(info, (1_600_000_000, 1_700_000_000))
    control = tree.data / "control"
    control.write_text("x")
    os.utime(control, (1_600_000_000, 1_700_000_000))
    control.read_text()
    atimes_tracked = control.stat().st_atime != 1_600_000_000
    before = file_times(tree.data)
    db_before = hashlib.sha256(tree.db.read_bytes()).hexdigest()
    rows_before = tree.row_counts(sid)

    list(adapter(fake_home).sessions())
    load(adapter(fake_home), sid)

    assert file_times(tree.data) == before
    assert hashlib.sha256(tree.db.read_bytes()).hexdigest() == db_before
    assert tree.row_counts(sid) == rows_before
    if atimes_tracked:
        assert info.stat().st_atime == 1_600_000_000


# -- in use ------------------------------------------------------------------------


def test_in_use_by_a_command_line_naming_the_id(
    fake_home: FakeHome, tree: OpencodeTree, spawn
) -> None:
    sid, other = tree.full_session(), tree.full_session()
    proc = spawn(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)", "-s", sid],
        ready=True,
    )
    a, procs = adapter(fake_home), ProcessTable.snapshot()
    assert proc.pid in {h.pid for h in a.holders(load(a, sid), procs)}  # type: ignore[arg-type]
    assert proc.pid not in {h.pid for h in a.holders(load(a, other), procs)}  # type: ignore[arg-type]


def test_in_use_by_a_process_with_the_database_open_but_not_the_service(
    fake_home: FakeHome, tree: OpencodeTree, spawn
) -> None:
    sid = tree.full_session()
    service = spawn(
        [sys.executable, "-c", HOLD_OPEN, str(tree.db), "serve", "--service"], ready=True
    )
    tui = spawn([sys.executable, "-c", HOLD_OPEN, str(tree.db)], ready=True)
    for proc in (service, tui):
        fds = [
            os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")
        ]
        assert str(tree.db) in fds, "SETUP INVALID: the helper does not hold the database"
    a = adapter(fake_home)
    holders = a.holders(load(a, sid), ProcessTable.snapshot())  # type: ignore[arg-type]
    assert [(h.pid, h.detail) for h in holders] == [(tui.pid, "has opencode.db open")]


# -- removal -----------------------------------------------------------------------


def test_remove_without_opencode_takes_the_session_rows_first(
    fake_home: FakeHome, tree: OpencodeTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, other = tree.full_session(), tree.full_session()
    files = storage_of(tree, sid)
    rows_when_file_removed: list[dict[str, int]] = []

    def before_leaf(path: str) -> None:
        if path == str(files[0]):
            rows_when_file_removed.append(tree.row_counts(sid))

    monkeypatch.setattr(rmtree, "_before_leaf", before_leaf)
    a, r = adapter(fake_home), remover(sid)
    a.remove(load(a, sid), r)  # type: ignore[arg-type]

    assert rows_when_file_removed, "SETUP INVALID: the session file was never removed"
    assert rows_when_file_removed[0]["session"] == rows_when_file_removed[0]["session_v2"] == 0
    assert r.removed == [f"{tree.db}#{t}" for t in ROW_TABLES] + [str(p) for p in files]
    assert r.residuals == []
    assert set(tree.row_counts(sid).values()) == {0}
    assert not any(p.exists() for p in files)
    assert load(a, sid) is None
    assert set(tree.row_counts(other).values()) != {0}
    assert all(p.exists() for p in storage_of(tree, other))


def test_remove_with_opencode_then_the_legacy_rows_and_files(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    sid, other = tree.full_session(), tree.full_session()
    log = install_fake_opencode(fake_home)
    files = storage_of(tree, sid)
    a, r = adapter(fake_home), remover(sid)

    a.remove(load(a, sid), r)  # type: ignore[arg-type]

    assert calls(log) == [["debug", "paths"], ["session", "delete", sid]]
    # The rows it took (read first, for the trash), then ours.
    assert r.removed == [f"{tree.db}#{t}" for t in V2_TABLES + LEGACY_TABLES] + [
        str(p) for p in files
    ]
    assert set(tree.row_counts(sid).values()) == {0}
    assert not any(p.exists() for p in files)
    assert load(a, sid) is None
    assert 0 not in tree.row_counts(other).values()


def test_opencode_is_not_asked_to_delete_a_session_with_a_child(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    """`opencode session delete` (1.18) takes the children too, unkept: the
    pruner removes children first, so a child here was made since; the
    removal fails, changing nothing, and is tried again next time."""
    sid = tree.full_session()
    child = tree.full_session(parent=sid)
    log = install_fake_opencode(fake_home, every_row=True)
    rows, before = tree.row_counts(sid), file_times(tree.data)
    a, r = adapter(fake_home), remover(sid)

    with pytest.raises(RemovalError, match=f"has child sessions {child}, which opencode"):
        a.remove(load(a, sid), r)  # type: ignore[arg-type]

    assert calls(log) == [["debug", "paths"]]
    assert r.removed == [] and file_times(tree.data) == before
    assert tree.row_counts(sid) == rows
    kept = load(a, child)
    assert kept is not None and kept.parent == sid


def test_opencode_on_another_data_dir_is_not_asked_to_delete(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    sid = tree.full_session()
    log = install_fake_opencode(fake_home, data_dir=fake_home.root / "other-opencode")
    a, r = adapter(fake_home), remover(sid)
    a.remove(load(a, sid), r)  # type: ignore[arg-type]
    assert calls(log) == [["debug", "paths"]]
    assert r.removed[:2] == [f"{tree.db}#session", f"{tree.db}#session_v2"]
    assert load(a, sid) is None


def test_a_failing_opencode_leaves_the_session_and_fails(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    sid = tree.full_session()
    rows = tree.row_counts(sid)
    log = install_fake_opencode(fake_home, fail=True)
    a = adapter(fake_home)
    r = remover(sid)
    with pytest.raises(RemovalError, match="opencode session delete failed .*still listed"):
        a.remove(load(a, sid), r)  # type: ignore[arg-type]
    assert r.removed == []  # it did nothing: nothing is reported removed
    assert calls(log) == [["debug", "paths"], ["session", "delete", sid]]
    assert tree.row_counts(sid) == rows and all(p.exists() for p in storage_of(tree, sid))


def test_opencode_failing_on_a_legacy_only_session_is_finished_by_us(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    sid = new_id()
    tree.session_json(sid)
    tree.messages_json(sid)
    tree.session_rows(sid, v2=False)
    log = install_fake_opencode(fake_home)
    a = adapter(fake_home)
    a.remove(load(a, sid), remover(sid))  # type: ignore[arg-type]
    assert calls(log) == [["debug", "paths"], ["session", "delete", sid]]  # "not found": exit 1
    assert load(a, sid) is None and set(tree.row_counts(sid).values()) == {0}


@pytest.mark.parametrize("with_binary", [False, True])
def test_a_database_held_for_writing_refuses_before_anything_is_removed(
    fake_home: FakeHome, tree: OpencodeTree, spawn, with_binary: bool
) -> None:
    sid = tree.full_session()
    log = install_fake_opencode(fake_home) if with_binary else None
    before, rows = file_times(tree.data), tree.row_counts(sid)
    holder = spawn([sys.executable, "-c", HOLD_WRITE_LOCK, str(tree.db)], ready=True)
    probe = sqlite3.connect(tree.db, timeout=0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        probe.execute("BEGIN IMMEDIATE")  # SETUP: the write lock is really held
    probe.close()
    a, r = adapter(fake_home), remover(sid)

    with pytest.raises(RemovalError, match=f"database .*opencode.db in use by pid {holder.pid}"):
        a.remove(load(a, sid), r)  # type: ignore[arg-type]

    if log is not None:
        assert calls(log) == [["debug", "paths"]]  # never asked to delete
    assert r.removed == [] and file_times(tree.data) == before
    holder.kill()
    holder.wait()
    assert tree.row_counts(sid) == rows


def test_the_service_holding_the_database_keeps_rows_unwritten(
    fake_home: FakeHome, tree: OpencodeTree, spawn
) -> None:
    # The service is no evidence of use, but nothing writes under an open database.
    sid = tree.full_session()
    service = spawn(
        [sys.executable, "-c", HOLD_OPEN, str(tree.db), "serve", "--service"], ready=True
    )
    a = adapter(fake_home)
    s = load(a, sid)
    assert s is not None and a.holders(s, ProcessTable.snapshot()) == []
    with pytest.raises(RemovalError, match=f"in use by pid {service.pid}"):
        a.remove(s, remover(sid))
    assert all(p.exists() for p in storage_of(tree, sid))


def test_dry_run_decides_the_same_and_changes_nothing(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    sid = tree.full_session()
    files = storage_of(tree, sid)
    before, rows = file_times(tree.data), tree.row_counts(sid)
    a, r = adapter(fake_home), remover(sid, dry_run=True)

    a.remove(load(a, sid), r)  # type: ignore[arg-type]

    assert r.removed == [f"{tree.db}#{t}" for t in ROW_TABLES] + [str(p) for p in files]
    assert file_times(tree.data) == before and tree.row_counts(sid) == rows

    log = install_fake_opencode(fake_home)
    r = remover(sid, dry_run=True)
    adapter(fake_home).remove(load(a, sid), r)  # type: ignore[arg-type]
    assert calls(log) == []  # a dry run runs no binary
    assert r.removed == [f"opencode session delete {sid}"] + [
        f"{tree.db}#{t}" for t in LEGACY_TABLES
    ] + [str(p) for p in files]
    assert r.residuals == []
    assert file_times(tree.data) == before and tree.row_counts(sid) == rows


def test_listing_many_at_once_equals_listing_each(fake_home: FakeHome, tree: OpencodeTree) -> None:
    """listed() goes over the storage and the database once, and finds
    exactly what load() finds for each."""
    ids = [tree.full_session() for _ in range(3)]
    wanted = [*ids, new_id(), "not an id"]

    many = listed(adapter(fake_home), wanted)

    assert set(many) == set(wanted)
    assert all(many[sid] is not None for sid in ids)
    for sid in wanted:
        assert many[sid] == load(adapter(fake_home), sid), sid


# -- the 1.18 tables, tables found in the schema, tables never a session's ----------


def test_every_session_table_goes_with_the_session_and_no_other_table_is_touched(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    """1.18's session_message, session_input and session_context_epoch, and a
    later opencode's table with a session_id column (read from the schema),
    are the session's; tables that are never a session's (accounts,
    permissions, a workspace table even with a session_id column) stay."""
    sid, other = tree.full_session(), tree.full_session()
    conn = sqlite3.connect(tree.db)
    with conn:
        conn.execute("CREATE TABLE session_later (id TEXT PRIMARY KEY, session_id TEXT)")
        conn.execute("CREATE TABLE workspace (id TEXT PRIMARY KEY, session_id TEXT)")
        for s in (sid, other, new_id()):  # the last names no session: no session of its own
            conn.execute("INSERT INTO session_later VALUES (?, ?)", (new_id("lat"), s))
            conn.execute("INSERT INTO workspace VALUES (?, ?)", (new_id("wrk"), s))
    conn.close()
    shared = ("account", "permission", "project", "workspace")
    before = {t: tree.rows(f"SELECT * FROM {t}") for t in shared}
    later = f"{tree.db}#session_later"

    sessions = by_id(fake_home)

    assert set(sessions) == {sid, other}
    rows = {p for p in paths(sessions[sid]) if "#" in p}
    assert rows == {f"{tree.db}#{t}" for t in ROW_TABLES} | {later}
    a, r = adapter(fake_home), remover(sid)
    a.remove(sessions[sid], r)
    assert r.removed[: len(rows)] == [f"{tree.db}#{t}" for t in ROW_TABLES] + [later]
    assert set(tree.row_counts(sid).values()) == {0}
    assert tree.rows("SELECT count(*) FROM session_later WHERE session_id = ?", sid) == [(0,)]
    assert tree.rows("SELECT count(*) FROM session_later") == [(2,)]
    assert {t: tree.rows(f"SELECT * FROM {t}") for t in shared} == before
    assert 0 not in tree.row_counts(other).values()


# -- tool outputs --------------------------------------------------------------------


def test_a_tool_output_is_the_session_s_whose_parts_alone_point_at_it(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    """A fork's copied parts point at its parent's tool outputs: such a file
    is neither's while both use it, and goes with the last of them."""
    sid, fork, other = tree.full_session(), tree.full_session(), tree.full_session()
    shared, own, others = tree.tool_output(sid), tree.tool_output(fork), tree.tool_output(other)
    tree.point_at(fork, shared)
    orphan = tree.data / "tool-output" / new_id("tool")  # no part points at it
    orphan.write_text("x")

    sessions = by_id(fake_home)

    def outputs(s: Session) -> set[str]:
        return {a.path for a in s.artifacts if a.kind == "tool-output"}

    assert [outputs(sessions[s]) for s in (sid, fork, other)] == [
        set(),
        {str(own)},
        {str(others)},
    ]
    a = adapter(fake_home)
    r = remover(sid)
    a.remove(sessions[sid], r)
    assert shared.exists() and str(shared) not in r.removed + r.residuals
    s = load(a, fork)
    assert s is not None and outputs(s) == {str(own), str(shared)}, "the fork's alone now"
    r = remover(fork)
    a.remove(s, r)
    # Before the part rows that point at them (nothing else names them).
    part = r.removed.index(f"{tree.db}#part")
    assert r.removed[part - 2 : part] == sorted([str(own), str(shared)])
    assert not shared.exists() and not own.exists()
    assert others.exists() and orphan.exists()
    assert load(a, other) is not None and outputs(load(a, other)) == {str(others)}  # type: ignore[arg-type]


def test_a_tool_output_a_fork_made_since_the_listing_points_at_stays(
    fake_home: FakeHome, tree: OpencodeTree
) -> None:
    sid, fork = tree.full_session(), tree.full_session()
    output = tree.tool_output(sid)
    a = adapter(fake_home)
    s = load(a, sid)
    assert s is not None and str(output) in paths(s), "SETUP INVALID: not the session's"
    tree.point_at(fork, output)  # the fork copies the parts after the listing
    r = remover(sid)

    a.remove(s, r)

    assert output.exists() and str(output) not in r.removed + r.residuals
    assert load(a, sid) is None
    assert str(output) in paths(load(a, fork))  # type: ignore[arg-type]


# -- the trash keeps the rows ----------------------------------------------------------


def kept_rows(entry: Path) -> dict[str, list[tuple[object, ...]]]:
    """The rows a trash entry keeps, by table (read from its rows.sqlite)."""
    conn = sqlite3.connect(f"file:{entry / 'rows.sqlite'}?mode=ro", uri=True)
    try:
        tables = conn.execute("SELECT n, name FROM tables").fetchall()
        return {name: sorted(conn.execute(f"SELECT * FROM t{n}")) for n, name in tables}
    finally:
        conn.close()


@pytest.mark.parametrize("opencode", ["none", "2.x", "1.18"])
def test_every_row_removed_is_kept_in_the_trash_once(
    fake_home: FakeHome, tree: OpencodeTree, opencode: str
) -> None:
    """Rows agentkeep deletes are kept inside its delete transaction; rows
    `opencode session delete` deletes are read before it runs and kept once
    it has: 1.18's takes every row, 2.x's only its own."""
    sid, other = tree.full_session(), tree.full_session()
    output = tree.tool_output(sid)
    keys = {"session": "id", "session_v2": "id", "event": "aggregate_id"}
    keys["event_sequence"] = "aggregate_id"
    before = {
        t: sorted(tree.rows(f"SELECT * FROM {t} WHERE {keys.get(t, 'session_id')} = ?", sid))
        for t in ROW_TABLES
    }
    assert all(before.values()), "SETUP INVALID: a table without the session's rows"
    log = (
        install_fake_opencode(fake_home, every_row=opencode == "1.18")
        if opencode != "none"
        else None
    )
    a = adapter(fake_home)
    entry = entry_dir(fake_home.state, "opencode", sid)

    with open_entry(
        fake_home.state, "opencode", sid, parent=None, keep_for=7 * 86400, now=time.time()
    ) as writer:
        r = SessionRemoval("opencode", sid, dry_run=False, trash=writer)
        a.remove(load(a, sid), r)  # type: ignore[arg-type]

    if log is not None:
        assert calls(log) == [["debug", "paths"], ["session", "delete", sid]]
    assert kept_rows(entry) == before
    assert not r.partial, "everything of it can be put back"
    assert set(tree.row_counts(sid).values()) == {0}
    assert not output.exists() and str(output) in r.removed
    assert load(a, sid) is None
    assert 0 not in tree.row_counts(other).values()
