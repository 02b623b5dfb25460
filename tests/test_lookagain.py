"""Looking again after a removal: what still names a removed session is
residual, found from the disk (an artifact kind the adapter does not know
shows there, never vanishes)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from agentkeep import lookagain
from build_claude import make_session, new_id


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
