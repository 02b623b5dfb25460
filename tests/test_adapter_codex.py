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

from agentkeep import removal
from agentkeep.adapters.base import RemovalError
from agentkeep.adapters.codex import CodexAdapter
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
    without,
)
from conftest import FakeHome

OLD = 1_700_000_000.0  # 2023-11-14


@pytest.fixture
def tree(fake_home: FakeHome) -> CodexTree:
    # No real codex is ever run: PATH keeps no directory that has one.
    fake_home.environ["PATH"] = without(fake_home, "codex")
    return build_codex(fake_home)


def adapter(fake_home: FakeHome) -> CodexAdapter:
    return CodexAdapter(Env.from_environ(fake_home.environ))


def by_id(fake_home: FakeHome) -> dict[str, Session]:
    return {s.id: s for s in adapter(fake_home).scan()}


def paths(session: Session) -> set[str]:
    return {a.path for a in session.artifacts}


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root with (size, mtime_ns), SQLite's -wal/-shm aside
    (a read-only open may create them: the one allowed exception)."""
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(("-wal", "-shm")):
                continue
            st = os.lstat(os.path.join(dirpath, name))
            found[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime_ns)
    return found


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
    assert paths(s) == {
        str(rollout),
        str(tui),
        f"{tree.state_db}#threads",
        f"{tree.history_db}#thread_items",
    }
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
    assert len(paths(sessions[other])) == 4
    assert sessions[other].workspace == "/home/u/other"
    # load lists the same session again from disk.
    assert adapter(fake_home).load(sid) == s
    assert adapter(fake_home).load(sid.upper()) == s


def test_a_session_with_only_a_row_is_still_a_session(fake_home: FakeHome, tree: CodexTree) -> None:
    # Deleting only the file makes the session reappear from the database.
    sid = new_id()
    tree.thread(sid, parent=None)
    s = adapter(fake_home).load(sid)
    assert s is not None
    assert [(a.path, a.primary) for a in s.artifacts] == [(f"{tree.state_db}#threads", True)]


def test_file_mtime_counts_when_newer_than_the_row(fake_home: FakeHome, tree: CodexTree) -> None:
    sid = new_id()
    path = tree.rollout(sid)
    tree.thread(sid, rollout=path, updated_at=int(OLD))
    s = adapter(fake_home).load(sid)
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
    s = adapter(fake_home).load(sid)
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
    s = adapter(fake_home).load(sid)
    assert s is not None
    assert [(a.path, a.kind, a.primary) for a in s.artifacts] == [
        (str(packed), "archived-rollout", True)
    ]
    assert (s.parent, s.workspace) == (parent, "/home/u/zst")


def test_load_follows_the_rollout_from_plain_to_zst(fake_home: FakeHome, tree: CodexTree) -> None:
    sid = new_id()
    plain = tree.rollout(sid, forked_from=(parent := new_id()))
    assert paths(adapter(fake_home).load(sid)) == {str(plain)}  # type: ignore[arg-type]

    # Mid-compression both names exist: both are the session's.
    packed = plain.with_name(plain.name + ".zst")
    packed.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    assert paths(adapter(fake_home).load(sid)) == {str(plain), str(packed)}  # type: ignore[arg-type]

    plain.unlink()
    s = adapter(fake_home).load(sid)
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
    assert adapter(fake_home).load("../../etc/passwd") is None


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
        s = adapter(fake_home).load(sid)
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
        s = adapter(fake_home).load(sid)
    assert s is not None and not s.undated
    assert not any("thread_items" in a.path for a in s.artifacts)
    assert "thread history unreadable; its rows not attributed" in {e["event"] for e in logs}


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
    before, db_before = snapshot(tree.root), (digest(tree.state_db), digest(tree.history_db))
    rows_before = (tree.thread_ids(), tree.item_ids())

    list(adapter(fake_home).scan())
    adapter(fake_home).load(sid)

    assert snapshot(tree.root) == before
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
    assert proc.pid in {h.pid for h in a.holders(a.load(sid), procs)}  # type: ignore[arg-type]
    assert proc.pid not in {h.pid for h in a.holders(a.load(other), procs)}  # type: ignore[arg-type]


def test_in_use_by_a_process_holding_the_rollout_open(
    fake_home: FakeHome, tree: CodexTree, spawn
) -> None:
    sid = tree.full_session()
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    proc = spawn([sys.executable, "-c", HOLD_OPEN, str(rollout)], ready=True)
    fds = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")]
    assert str(rollout) in fds, "SETUP INVALID: the helper does not hold the rollout"
    a = adapter(fake_home)
    holders = a.holders(a.load(sid), ProcessTable.snapshot())  # type: ignore[arg-type]
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
    row_present_when_rollout_removed: list[bool] = []

    def before_leaf(path: str) -> None:
        if path == str(rollout):
            row_present_when_rollout_removed.append(sid in tree.thread_ids())

    monkeypatch.setattr(removal, "_before_leaf", before_leaf)
    a, r = adapter(fake_home), remover(sid)
    a.remove(a.load(sid), r)  # type: ignore[arg-type]

    assert row_present_when_rollout_removed, "SETUP INVALID: the rollout was never removed"
    assert row_present_when_rollout_removed == [False]
    assert r.removed == [
        f"{tree.state_db}#threads",
        str(rollout),
        str(tui),
        f"{tree.history_db}#thread_items",
    ]
    assert r.residuals == [str(tree.index)]
    assert not rollout.exists() and not tui.exists()
    assert sid not in tree.thread_ids() and sid not in tree.item_ids()
    assert sid in tree.index.read_text()  # Codex's own index is never edited
    assert a.load(sid) is None
    assert a.load(other) is not None and other in tree.thread_ids() and other in tree.item_ids()


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
    a = adapter(fake_home)
    s = a.load(sid)
    assert s is not None and s.primary == [] and sid in by_id(fake_home)
    assert paths(s) == {str(tui), f"{tree.history_db}#thread_items"}
    r = remover(sid)
    a.remove(s, r)
    assert r.removed == [str(tui), f"{tree.history_db}#thread_items"]
    assert a.load(sid) is None and sid not in tree.item_ids()


def test_remove_with_codex_runs_it_and_finishes_what_it_left(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    sid, other = tree.full_session(), tree.full_session()
    packed = tree.rollout(sid, archived=True, zst=True)  # a second rollout of the same session
    log = install_fake_codex(fake_home)
    tui = tree.root / "tui-thread-reference-capabilities" / sid
    a, r = adapter(fake_home), remover(sid)

    a.remove(a.load(sid), r)  # type: ignore[arg-type]

    assert calls(log) == [["--version"], ["delete", sid]]
    assert not packed.exists() and sid not in tree.thread_ids()  # codex's own work
    assert sid not in tree.index.read_text()
    assert not tui.exists()  # a file of the session it left: ours
    assert r.removed == [f"codex delete {sid}", str(tui)]
    assert r.residuals == [f"{tree.history_db}#thread_items"]  # rows it left: reported
    assert sid in tree.item_ids()
    assert a.load(other) is not None and other in tree.thread_ids()


def test_a_failing_codex_leaves_the_session_listed_and_fails(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    sid = tree.full_session()
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    log = install_fake_codex(fake_home, fail=True)
    a = adapter(fake_home)
    r = remover(sid)
    with pytest.raises(RemovalError, match="codex delete failed .*still listed"):
        a.remove(a.load(sid), r)  # type: ignore[arg-type]
    assert r.removed == []  # it did nothing: nothing is reported removed
    assert calls(log) == [["--version"], ["delete", sid]]
    assert rollout.exists() and sid in tree.thread_ids()
    assert (tree.root / "tui-thread-reference-capabilities" / sid).exists()


def test_a_codex_without_delete_is_not_asked_to_delete(
    fake_home: FakeHome, tree: CodexTree
) -> None:
    sid = tree.full_session()
    log = install_fake_codex(fake_home, version="0.120.3")
    a, r = adapter(fake_home), remover(sid)
    a.remove(a.load(sid), r)  # type: ignore[arg-type]
    assert calls(log) == [["--version"]]
    assert r.removed[0] == f"{tree.state_db}#threads"
    assert a.load(sid) is None


def test_a_database_held_for_writing_refuses_before_anything_is_removed(
    fake_home: FakeHome, tree: CodexTree, spawn
) -> None:
    sid = tree.full_session()
    before = snapshot(tree.root)
    holder = spawn([sys.executable, "-c", HOLD_WRITE_LOCK, str(tree.history_db)], ready=True)
    probe = sqlite3.connect(tree.history_db, timeout=0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        probe.execute("BEGIN IMMEDIATE")  # SETUP: the write lock is really held
    probe.close()
    a, r = adapter(fake_home), remover(sid)

    with pytest.raises(
        RemovalError, match=f"database .*thread_history_1.sqlite in use by pid {holder.pid}"
    ):
        a.remove(a.load(sid), r)  # type: ignore[arg-type]

    assert r.removed == [] and snapshot(tree.root) == before
    assert sid in tree.thread_ids() and sid in tree.item_ids()


def test_dry_run_decides_the_same_and_changes_nothing(fake_home: FakeHome, tree: CodexTree) -> None:
    sid = tree.full_session()
    rollout = next(tree.root.glob(f"sessions/*/*/*/rollout-*-{sid}.jsonl"))
    before, rows = snapshot(tree.root), (tree.thread_ids(), tree.item_ids())
    a, r = adapter(fake_home), remover(sid, dry_run=True)

    a.remove(a.load(sid), r)  # type: ignore[arg-type]

    assert r.removed == [
        f"{tree.state_db}#threads",
        str(rollout),
        str(tree.root / "tui-thread-reference-capabilities" / sid),
        f"{tree.history_db}#thread_items",
    ]
    assert snapshot(tree.root) == before and (tree.thread_ids(), tree.item_ids()) == rows

    log = install_fake_codex(fake_home)
    r = remover(sid, dry_run=True)
    adapter(fake_home).remove(a.load(sid), r)  # type: ignore[arg-type]
    assert calls(log) == []  # a dry run runs no binary
    assert r.removed == [f"codex delete {sid}"]
    assert snapshot(tree.root) == before and (tree.thread_ids(), tree.item_ids()) == rows


def test_linked_rollout_dir_is_never_removed(fake_home: FakeHome, tree: CodexTree) -> None:
    elsewhere = fake_home.root / "elsewhere"
    sid = new_id()
    real = CodexTree(elsewhere)
    path = real.rollout(sid)
    (tree.root / "sessions").mkdir()
    os.symlink(elsewhere / "sessions" / "2026", tree.root / "sessions" / "2026")
    s = adapter(fake_home).load(sid)
    assert s is not None and all(a.linked for a in s.artifacts)
    assert s.unsafe
    with pytest.raises(RemovalError):
        adapter(fake_home).remove(s, remover(sid))
    assert path.exists()


def test_listing_many_at_once_equals_listing_each(fake_home: FakeHome, tree: CodexTree) -> None:
    """load_many() (a prune's batch, a reconcile) goes over the date dirs and
    databases once, and finds exactly what load() finds for each."""
    ids = [tree.full_session(cwd=f"/home/u/p{i}") for i in range(3)]
    wanted = [*ids, ids[1].upper(), new_id(), "not-an-id"]

    many = adapter(fake_home).load_many(wanted)

    assert set(many) == set(wanted)
    assert all(many[sid] is not None for sid in ids)
    for sid in wanted:
        assert many[sid] == adapter(fake_home).load(sid), sid
