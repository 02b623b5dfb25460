"""The trash keeps a session's database rows, and puts them and its files
back only where that is safe: rows in one transaction, refused when a row
with the same key differs; roots checked like an agent root; the
directories it makes again get their own times back."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep.adapters import sqlite as agent_sqlite
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact
from agentkeep.paths import ensure_private_dir
from agentkeep.removal import SessionRemoval
from agentkeep.trash.entries import RestoreConflict, RestoreRefused, list_entries
from agentkeep.trash.restoring import restore
from agentkeep.trash.writing import open_entry, saved_rows

NOW = 1_800_000_000.0
WEEK = 7 * 86400.0
SID = "ses_kept1"
OTHER = "ses_other"


@pytest.fixture
def state(fake_home) -> Path:
    return ensure_private_dir(fake_home.state)


def make_db(path: Path) -> Path:
    """A database like an agent's: a listing table with a key, a table of
    rows keyed by the session, a table without a primary key, and a blob."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE session (id TEXT PRIMARY KEY, title TEXT, time_updated INTEGER);
        CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, data BLOB);
        CREATE TABLE event (aggregate_id TEXT, seq INTEGER, body TEXT);
        """
    )
    for sid in (SID, OTHER):
        conn.execute("INSERT INTO session VALUES (?, ?, ?)", (sid, f"title {sid}", 1700))
        for n in range(3):
            blob = bytes([n, 0, 255]) + sid.encode()
            conn.execute("INSERT INTO message VALUES (?, ?, ?)", (f"msg_{sid}_{n}", sid, blob))
            conn.execute("INSERT INTO event VALUES (?, ?, ?)", (sid, n, None))
    conn.commit()
    conn.close()
    return path


def dump(db: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(db)
    try:
        return {
            t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
            for t in ("session", "message", "event")
        }
    finally:
        conn.close()


DELETIONS = [("session", "id", SID), ("message", "session_id", SID), ("event", "aggregate_id", SID)]


def trash_rows(state: Path, db: Path, files: list[Artifact] = ()) -> SessionRemoval:  # type: ignore[assignment]
    """Remove the session's rows (keeping them in its trash entry) and files."""
    with open_entry(state, "opencode", SID, parent=None, keep_for=WEEK, now=NOW) as writer:
        r = SessionRemoval("opencode", SID, dry_run=False, trash=writer)
        agent_sqlite.delete_rows(db, DELETIONS, keep=r.keep_rows)
        for d in DELETIONS:
            r.removed_at_once(f"{db}#{d[0]}")
        for artifact in files:
            r.remove_path(artifact)
    return r


def test_rows_go_to_the_trash_and_come_back_exactly(state: Path, fake_home) -> None:
    db = make_db(fake_home.data / "opencode" / "opencode.db")
    before = dump(db)
    r = trash_rows(state, db)
    after_removal = dump(db)
    assert all(SID not in repr(rows) for rows in after_removal.values())
    assert OTHER in repr(after_removal["message"]), "another session's rows stay"
    [entry] = list_entries(state)
    assert not entry.partial and not r.partial, "kept rows come back: the entry is whole"
    kept = saved_rows(entry)
    assert [t.table for t in kept[str(db)]] == ["session", "message", "event"]
    assert sum(len(t.rows) for t in kept[str(db)]) == 7

    restore(state, "opencode", SID, now=NOW + 60)
    assert dump(db) == before, "every row back, blobs and NULLs as they were"
    assert list_entries(state) == []


def test_a_row_with_the_same_key_that_differs_refuses_the_restore(state: Path, fake_home) -> None:
    root = fake_home.data / "opencode"
    db = make_db(root / "opencode.db")
    transcript = root / "storage" / "session" / "p" / f"{SID}.json"
    transcript.parent.mkdir(parents=True)
    transcript.write_text("{}")
    art = Artifact(str(transcript), "session-info", 2, 0.0, str(root), primary=True)
    trash_rows(state, db, [art])
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO session VALUES (?, ?, ?)", (SID, "a new one", 1800))
    conn.commit()
    conn.close()
    before = dump(db)

    with pytest.raises(RestoreConflict) as refused:
        restore(state, "opencode", SID, now=NOW + 60)
    assert f"{db}#session" in str(refused.value)
    assert dump(db) == before, "nothing written"
    assert not transcript.exists(), "no file moved either"
    assert len(list_entries(state)) == 1


def test_rows_already_there_unchanged_are_not_a_conflict(state: Path, fake_home) -> None:
    """What a removal that stopped half way left is the same row: skipped."""
    db = make_db(fake_home.data / "opencode" / "opencode.db")
    before = dump(db)
    trash_rows(state, db)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO event VALUES (?, ?, ?)", (SID, 0, None))
    conn.execute("INSERT INTO session VALUES (?, ?, ?)", (SID, f"title {SID}", 1700))
    conn.commit()
    conn.close()
    restore(state, "opencode", SID, now=NOW + 60)
    after = dump(db)
    assert after["session"] == before["session"] and after["message"] == before["message"]
    # The table has no key: the row left behind and the one kept are alike,
    # so the one left stands for it.
    assert after["event"] == before["event"]


def test_a_column_gone_refuses_the_restore(state: Path, fake_home) -> None:
    db = make_db(fake_home.data / "opencode" / "opencode.db")
    trash_rows(state, db)
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE message DROP COLUMN data")
    conn.commit()
    conn.close()
    with pytest.raises(RestoreConflict, match="no column data"):
        restore(state, "opencode", SID, now=NOW + 60)
    assert SID not in repr(dump_tables(db, "session"))


def dump_tables(db: Path, table: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        conn.close()


def test_a_database_in_use_refuses_the_restore(state: Path, fake_home, spawn) -> None:
    db = make_db(fake_home.data / "opencode" / "opencode.db")
    trash_rows(state, db)
    holder = spawn(
        ["python3", "-c", f"f = open({str(db)!r}, 'rb'); print('open', flush=True); input()"],
        ready=True,
    )
    assert holder.poll() is None, "SETUP INVALID: the holder is gone"
    with pytest.raises(RestoreRefused, match="in use"):
        restore(state, "opencode", SID, now=NOW + 60)
    assert SID not in repr(dump_tables(db, "session"))


def test_a_failing_keep_deletes_nothing(fake_home) -> None:
    db = make_db(fake_home.data / "opencode" / "opencode.db")
    before = dump(db)

    def refuse(rows: agent_sqlite.TableRows) -> None:
        if rows.table == "message":
            raise RemovalError("disk full")

    with pytest.raises(RemovalError, match="disk full"):
        agent_sqlite.delete_rows(db, DELETIONS, keep=refuse)
    assert dump(db) == before


# -- destinations ---------------------------------------------------------------


def tmp_session(fake_home, base: Path | None = None) -> tuple[Path, Artifact]:
    """A Claude tmp tree under `base` (the fake user's system tmp)."""
    root = (base or fake_home.system_tmp) / f"claude-{os.getuid()}"
    leaf = root / "-home-u-proj" / "0b7c0000-0000-4000-8000-00000000000a"
    leaf.mkdir(parents=True, mode=0o700)
    (leaf / "tasks.output").write_text("scratch")
    os.chmod(root, 0o700)
    return root, Artifact(str(leaf), "tmp", 7, 0.0, str(root), is_dir=True)


def trash_files(state: Path, sid: str, artifacts: list[Artifact]) -> None:
    with open_entry(state, "claude", sid, parent=None, keep_for=WEEK, now=NOW) as writer:
        r = SessionRemoval("claude", sid, dry_run=False, trash=writer, same_fs_as=state)
        for artifact in artifacts:
            r.remove_path(artifact)


SID_TMP = "0b7c0000-0000-4000-8000-00000000000a"


def test_a_root_gone_is_made_again_as_ours(state: Path, fake_home) -> None:
    root, art = tmp_session(fake_home)
    trash_files(state, SID_TMP, [art])
    subprocess.run(["rm", "-rf", str(root)], check=True)  # a reboot emptied /tmp
    restore(state, "claude", SID_TMP, now=NOW + 60)
    st = os.stat(root)
    assert (st.st_uid, st.st_mode & 0o777) == (os.getuid(), 0o700)
    assert (Path(art.path) / "tasks.output").read_text() == "scratch"


@pytest.fixture
def sticky_tmp() -> Iterator[Path]:
    """A sticky, world-writable tmp like /tmp, that another uid can reach."""
    base = Path(tempfile.mkdtemp(prefix="ak-systmp-", dir="/tmp"))
    os.chmod(base, 0o1777)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.mark.parametrize("plant", ["world-writable", "link", "other-user"])
def test_a_planted_root_is_refused_and_nothing_moves(
    state: Path, fake_home, sticky_tmp: Path, plant: str
) -> None:
    root, art = tmp_session(fake_home, sticky_tmp)
    trash_files(state, SID_TMP, [art])
    subprocess.run(["rm", "-rf", str(root)], check=True)
    if plant == "world-writable":
        root.mkdir(mode=0o777)
        os.chmod(root, 0o777)
    elif plant == "link":
        elsewhere = fake_home.root / "theirs"
        elsewhere.mkdir()
        os.chmod(elsewhere, 0o777)
        root.symlink_to(elsewhere)
    else:
        if os.geteuid() != 0:
            pytest.skip("making a directory as another uid needs root")
        subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "mkdir", str(root)],
            check=True,
        )
        assert os.stat(root).st_uid == 65534, "SETUP INVALID: not planted by another uid"
    with pytest.raises(RestoreRefused, match="unsafe place"):
        restore(state, "claude", SID_TMP, now=NOW + 60)
    assert not Path(art.path).exists()
    assert not any(os.scandir(os.path.realpath(root))), "nothing put where others can read it"
    assert len(list_entries(state)) == 1, "the session is still in the trash"


def test_the_cli_restore_refuses_a_planted_root_with_exit_1(state: Path, fake_home) -> None:
    root, art = tmp_session(fake_home)
    trash_files(state, SID_TMP, [art])
    subprocess.run(["rm", "-rf", str(root)], check=True)
    root.mkdir(mode=0o777)
    os.chmod(root, 0o777)
    proc = fake_home.cli("restore", "claude", SID_TMP)
    assert proc.returncode == 1, proc.stderr
    assert "unsafe place" in proc.stderr and str(root) in proc.stderr
    assert os.listdir(root) == []


def test_a_session_dir_made_again_gets_its_own_times(state: Path, fake_home) -> None:
    """A directory session (zero, grok, Gemini) trashed entry by entry: its
    twin in the trash is made new, and restore gives it the session dir's
    own times, not the trash's."""
    root = fake_home.data / "zero" / "sessions"
    session = root / "sess-1"
    session.mkdir(parents=True)
    for name in ("metadata.json", "events.jsonl"):
        (session / name).write_text("{}")
    os.utime(session, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    arts = [
        Artifact(str(session / "metadata.json"), "metadata", 2, 0.0, str(root), primary=True),
        Artifact(str(session / "events.jsonl"), "events", 2, 0.0, str(root)),
        Artifact(str(session), "session-dir", 0, 0.0, str(root), is_dir=True),
    ]
    with open_entry(state, "zero", "sess-1", parent=None, keep_for=WEEK, now=NOW) as writer:
        r = SessionRemoval("zero", "sess-1", dry_run=False, trash=writer, same_fs_as=state)
        for artifact in arts:
            r.remove_path(artifact)
    assert not session.exists()
    restore(state, "zero", "sess-1", now=NOW + 60)
    assert os.stat(session).st_mtime_ns == 1_600_000_000_000_000_000
    assert sorted(os.listdir(session)) == ["events.jsonl", "metadata.json"]
