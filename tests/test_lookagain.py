"""Looking again after a removal: what still names a removed session is
residual, found from the disk (an artifact kind the adapter does not know
shows there, never vanishes)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from agentkeep import lookagain
from agentkeep.adapters.claude import ClaudeAdapter
from agentkeep.paths import Env
from build_claude import make_session, make_shared, new_id


def test_an_unknown_artifact_kind_is_reported_after_a_prune(fake_home) -> None:
    gone = make_session(fake_home, age_days=50)
    stays = make_session(fake_home, age_days=50)
    pinned = fake_home.cli("pin", "claude", stays.id, check=True)
    assert pinned.returncode == 0
    # What a later Claude might write: a new area naming sessions by id.
    novel = fake_home.claude / "newkind" / f"{gone.id}.json"
    novel.parent.mkdir()
    novel.write_text("{}")
    other = fake_home.claude / "newkind" / f"{stays.id}.json"
    other.write_text("{}")

    proc = fake_home.cli("prune", "--older-than", "30d", "--json", check=True)
    report = json.loads(proc.stdout)
    assert [r["id"] for r in report["removed"]] == [gone.id]
    residual = {(r["id"], r["path"]) for r in report["residual"]}
    assert (gone.id, str(novel)) in residual
    assert all(sid != stays.id for sid, _ in residual), "a kept session is not looked at"
    assert novel.exists() and other.exists(), "what the adapter does not know is never removed"


def test_a_shared_file_naming_a_removed_session_is_left_and_not_residual(fake_home) -> None:
    """Claude 2.1.332's `plugins/store/<plugin>.json` names the latest
    session in its content, and the next session rewrites it: a shared file
    (FIELD-NOTES), as history.jsonl is. It is no session's artifact, a prune
    leaves it as it was, and looking again does not list it: residual is for
    what is left naming a removed session, not for the files Claude keeps
    for every session."""
    older = make_session(fake_home, age_days=50)
    latest = make_session(fake_home, age_days=45)
    shared = make_shared(fake_home, session_ids=[older.id, latest.id], age_days=45)
    store = shared.plugin_store
    assert latest.id in store.read_text() and older.id not in store.read_text(), "SETUP INVALID"
    before = (store.read_bytes(), os.lstat(store).st_mtime_ns)
    shown = json.loads(fake_home.cli("show", "claude", latest.id, "--json", check=True).stdout)
    assert str(store) not in {a["path"] for a in shown["artifacts"]}

    proc = fake_home.cli("prune", "--older-than", "30d", "--json", check=True)
    report = json.loads(proc.stdout)
    assert {r["id"] for r in report["removed"]} == {older.id, latest.id}
    assert report["failed"] == []
    assert not {r["path"] for r in report["residual"]} & {str(store), str(store.parent)}
    assert (store.read_bytes(), os.lstat(store).st_mtime_ns) == before, "shared: never touched"
    adapter = ClaudeAdapter(Env.from_environ(fake_home.environ))
    assert adapter.session_for_path(str(store)) is None
    again = {what for _, what in lookagain.residual(adapter, {older.id, latest.id})}
    # It looked: the image-cache dir named by the id is there (residual).
    assert str(shared.image_cache / latest.id) in again
    assert str(store) not in again and latest.id in store.read_text()


def test_a_dry_run_does_not_look_again(fake_home) -> None:
    gone = make_session(fake_home, age_days=50)
    novel = fake_home.claude / "newkind" / f"{gone.id}.json"
    novel.parent.mkdir()
    novel.write_text("{}")
    report = json.loads(
        fake_home.cli("prune", "--older-than", "30d", "--dry-run", "--json", check=True).stdout
    )
    assert [r["id"] for r in report["removed"]] == [gone.id]
    assert report["residual"] == []


def test_rows_in_any_table_with_an_id_column_are_found(tmp_path: Path) -> None:
    sid, other = new_id(), new_id()
    db = tmp_path / "agent.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(
        """
        CREATE TABLE threads (id TEXT PRIMARY KEY);
        CREATE TABLE brand_new (row INTEGER, thread_id TEXT);
        CREATE TABLE edges (parentId TEXT, child_session_id TEXT);
        CREATE TABLE unrelated (title TEXT);
        """
    )
    conn.execute("INSERT INTO threads VALUES (?)", (other,))
    conn.execute("INSERT INTO brand_new VALUES (1, ?)", (sid,))
    conn.execute("INSERT INTO edges VALUES (?, ?)", (other, sid))
    conn.execute("INSERT INTO unrelated VALUES (?)", (sid,))
    conn.commit()
    conn.close()
    found = sorted(lookagain._rows(db, frozenset({sid})))
    assert found == [(sid, f"{db}#brand_new"), (sid, f"{db}#edges")]
    assert not (tmp_path / "agent.sqlite-wal").exists(), "read only"
