"""Databases that shrink (invariant 13): once a prune has removed sessions'
rows from an agent's database, the database gives its free pages back,
never while another process has it open, never with a setting changed, and
never leaving a copy of itself behind, even when the prune is killed
midway.

The databases are the agents' real schemas (build_opencode, build_codex,
build_copilot: opencode's and Copilot's with auto_vacuum off, Copilot's with
its FTS5 search index, Codex's INCREMENTAL), in WAL mode, with
sessions whose rows are big enough to free pages. Every prune is the real
CLI; the holder of a database is a real process; the kills are SIGKILL of
the pruning process itself, from a seam (compaction._before_step).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from build_codex import build_codex
from build_copilot import CopilotTree
from build_opencode import OpencodeTree, build_opencode, new_id
from fakehome import FakeHome, cli_json
from waiting import wait_until

DAY = 86400.0
CONFIG = 'retention = "30d"\n'
BIG = 48 * 1024


def seeded_opencode(
    fh: FakeHome, old: int = 20, recent: int = 10
) -> tuple[OpencodeTree, list[str]]:
    """opencode sessions, `old` of them idle 45 days, each with a 48 KiB
    part; the ids of the recent ones."""
    oc = build_opencode(fh)
    kept = []
    for n in range(old + recent):
        sid = new_id()
        when = time.time() - (45 * DAY if n < old else 0)
        oc.session_rows(sid, updated_ms=int(when * 1000))
        conn = sqlite3.connect(oc.db)
        with conn:
            msg = new_id("msg")
            conn.execute("INSERT INTO message VALUES (?, ?, 1, 1, '{}')", (msg, sid))
            data = json.dumps({"type": "text", "text": "x" * BIG})
            conn.execute(
                "INSERT INTO part VALUES (?, ?, ?, 1, 1, ?)", (new_id("prt"), msg, sid, data)
            )
        conn.close()
        if n >= old:
            kept.append(sid)
    return oc, kept


def read(db: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def settings(db: Path) -> tuple[Any, ...]:
    """What a compaction must never change, and the database's own version."""
    pragmas = ("auto_vacuum", "journal_mode", "page_size", "user_version", "application_id")
    return tuple(read(db, f"PRAGMA {p}")[0][0] for p in pragmas)


def free_bytes(db: Path) -> int:
    return int(read(db, "PRAGMA freelist_count")[0][0]) * int(read(db, "PRAGMA page_size")[0][0])


def whole(db: Path) -> bool:
    return read(db, "PRAGMA integrity_check") == [("ok",)]


def sessions_left(oc: OpencodeTree) -> set[str]:
    return {r[0] for r in read(oc.db, "SELECT session_id FROM part")}


def listing(directory: Path) -> set[str]:
    return set(os.listdir(directory))


def nothing_beside(db: Path) -> bool:
    """Nothing but the database is beside it: no journal, no copy, and no
    page in its -wal (which a read-only open, ours too, may leave empty)."""
    wal = Path(f"{db}-wal")
    beside = {name for name in listing(db.parent) if name.startswith(db.name)}
    return beside <= {db.name, wal.name, f"{db.name}-shm"} and (
        not wal.exists() or wal.stat().st_size == 0
    )


def seamed_prune(fh: FakeHome, seams: str) -> subprocess.CompletedProcess[str]:
    """The real CLI after `seams` (Python run first in the same process)."""
    argv = [sys.executable, "-c", seams + "\nfrom agentkeep.cli import main\nmain()\n"]
    return subprocess.run(
        [*argv, "prune", "--json"], env=fh.environ, capture_output=True, text=True, timeout=120
    )


def test_a_prune_gives_opencodes_free_pages_back(fake_home: FakeHome) -> None:
    oc, kept = seeded_opencode(fake_home)
    tmp = Path(fake_home.environ["TMPDIR"])
    before, tmp_before, size_before = settings(oc.db), listing(tmp), oc.db.stat().st_size
    if settings(oc.db)[:2] != (0, "wal"):
        pytest.fail("SETUP INVALID: opencode's database is not auto_vacuum off, in WAL mode")
    fake_home.write_config(CONFIG)

    code, doc, err = cli_json(fake_home, "prune")

    assert code == 0, err
    assert len(doc["removed"]) == 20
    [compacted] = doc["compacted"]
    assert compacted["database"] == str(oc.db)
    assert compacted["bytes_before"] >= size_before
    assert compacted["bytes_after"] == oc.db.stat().st_size < size_before - 20 * BIG
    assert free_bytes(oc.db) == 0 and whole(oc.db)
    assert settings(oc.db) == before
    assert sessions_left(oc) == set(kept)
    assert nothing_beside(oc.db), "a copy or journal was left beside it"
    assert listing(tmp) == tmp_before, "a temporary file was left in TMPDIR"


def test_a_dry_run_compacts_nothing(fake_home: FakeHome) -> None:
    oc, _ = seeded_opencode(fake_home)
    fake_home.write_config(CONFIG)
    size = oc.db.stat().st_size
    code, doc, err = cli_json(fake_home, "prune", "--dry-run")
    assert code == 0, err
    assert doc["compacted"] == [] and oc.db.stat().st_size == size


def test_codexs_incremental_databases_give_their_pages_back_incrementally(
    fake_home: FakeHome,
) -> None:
    codex = build_codex(fake_home)
    old = time.time() - 45 * DAY
    for n in range(12):
        sid = str(uuid.uuid4())
        path = codex.rollout(sid, mtime=old if n < 8 else None)
        codex.thread(sid, rollout=path, updated_at=int(old if n < 8 else time.time()))
        codex.rows(sid)
        conn = sqlite3.connect(codex.history_db)
        with conn:
            for i in range(4):
                conn.execute(
                    "INSERT INTO thread_items (thread_id, turn_id, item_id, rollout_ordinal,"
                    " created_at_ms, item_json) VALUES (?, 't', ?, ?, 1, ?)",
                    (sid, f"big{i}", i, "y" * BIG),
                )
        conn.close()
    history = codex.history_db
    before, size = settings(history), history.stat().st_size
    if before[:2] != (2, "wal"):
        pytest.fail("SETUP INVALID: Codex's database is not INCREMENTAL, in WAL mode")
    fake_home.write_config(CONFIG)

    code, doc, err = cli_json(fake_home, "prune")

    assert code == 0, err
    assert len(doc["removed"]) == 8
    by_db = {c["database"]: c for c in doc["compacted"]}
    assert str(history) in by_db
    assert history.stat().st_size == by_db[str(history)]["bytes_after"] < size - 8 * 4 * BIG
    for db in codex.root.glob("*.sqlite"):
        assert free_bytes(db) == 0 and whole(db), db
    assert settings(history) == before
    assert all(nothing_beside(db) for db in codex.root.glob("*.sqlite"))


# A seam: once the rows are removed and before the databases are compacted,
# a process opens opencode.db and keeps it open (its pid in $HOLDER_PID).
HOLD_AFTER_THE_ACT = """
import os, subprocess, sys
import agentkeep.compaction as compaction
real = compaction.compact_all
def holding(*args, **kw):
    hold = ("import sys, time; f = open(sys.argv[1], 'rb'); print('open', flush=True);"
            " time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", hold, os.environ["DB"]],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    proc.stdout.readline()
    open(os.environ["HOLDER_PID"], "w").write(str(proc.pid))
    return real(*args, **kw)
compaction.compact_all = holding
"""


def test_a_database_a_process_holds_open_waits_and_a_later_prune_compacts_it(
    fake_home: FakeHome,
) -> None:
    oc, kept = seeded_opencode(fake_home)
    fake_home.write_config(CONFIG)
    pid_file = fake_home.root / "holder.pid"
    env = {"DB": str(oc.db), "HOLDER_PID": str(pid_file)}
    fake_home.environ.update(env)
    try:
        proc = seamed_prune(fake_home, HOLD_AFTER_THE_ACT)
        holder = int(pid_file.read_text()) if pid_file.exists() else None
        if holder is None:
            pytest.fail(f"SETUP INVALID: no process held the database\n{proc.stderr}")
        doc = json.loads(proc.stdout)
        assert proc.returncode == 0, proc.stderr
        assert len(doc["removed"]) == 20 and doc["compacted"] == []
        waiting = free_bytes(oc.db)
        assert waiting > 20 * BIG, "the removed rows' pages are still the database's"

        code, status, _ = cli_json(fake_home, "status")
        assert status["compaction_waiting"] == {"bytes": waiting, "databases": 1}
        assert "of free pages wait in 1 database" in fake_home.cli("status").stdout
        code, du, _ = cli_json(fake_home, "du", "--by", "kind")
        [free] = [g for g in du["groups"] if g["key"] == "database-free-pages"]
        assert free["bytes"] == free["reclaimable_bytes"] == waiting

        os.kill(holder, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{holder}").exists() or _zombie(holder), "holder gone")
        code, doc, err = cli_json(fake_home, "prune")
        assert code == 0, err
        assert doc["removed"] == []
        assert [c["database"] for c in doc["compacted"]] == [str(oc.db)]
        assert free_bytes(oc.db) == 0 and sessions_left(oc) == set(kept)
        code, status, _ = cli_json(fake_home, "status")
        assert status["compaction_waiting"] is None
    finally:
        if pid_file.exists():
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


# A seam: SIGKILL the prune at the named step of the compaction, inside
# VACUUM itself for "rebuild" (at its first progress callback), between
# VACUUM and the checkpoint for "checkpoint"; $KILLED is written first.
KILL_AT = """
import os, signal
import agentkeep.compaction as compaction
def die():
    open(os.environ["KILLED"], "w").close()
    os.kill(os.getpid(), signal.SIGKILL)
def before(step, conn):
    if step != os.environ["KILL_AT"]:
        return
    if step == "rebuild":
        conn.set_progress_handler(lambda: die(), 50)
    else:
        die()
compaction._before_step = before
"""


@pytest.mark.parametrize("step", ["rebuild", "checkpoint"])
def test_a_prune_killed_while_compacting_leaves_the_database_whole_and_no_copy(
    fake_home: FakeHome, step: str
) -> None:
    oc, kept = seeded_opencode(fake_home)
    tmp = Path(fake_home.environ["TMPDIR"])
    tmp_before, before = listing(tmp), settings(oc.db)
    fake_home.write_config(CONFIG)
    killed = fake_home.root / "killed"
    fake_home.environ.update(KILL_AT=step, KILLED=str(killed))

    proc = seamed_prune(fake_home, KILL_AT)

    if proc.returncode != -signal.SIGKILL or not killed.exists():
        pytest.fail(f"SETUP INVALID: the prune was not killed at {step}: {proc.stderr[-800:]}")
    assert whole(oc.db) and sessions_left(oc) == set(kept)
    assert listing(tmp) == tmp_before, "VACUUM's temporary copy outlived the process"

    del fake_home.environ["KILL_AT"]
    code, doc, err = cli_json(fake_home, "prune")
    assert code == 0, err
    assert [c["database"] for c in doc["compacted"]] == [str(oc.db)]
    assert free_bytes(oc.db) == 0 and whole(oc.db) and sessions_left(oc) == set(kept)
    assert settings(oc.db) == before
    assert nothing_beside(oc.db), "a copy was left beside the database"
    assert listing(tmp) == tmp_before
    assert not (fake_home.state / "compaction.json").exists()


def test_vacuum_would_renumber_a_table_without_a_key_or_index_so_it_is_left(
    fake_home: FakeHome,
) -> None:
    oc, _ = seeded_opencode(fake_home)
    conn = sqlite3.connect(oc.db)
    with conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.executemany("INSERT INTO notes VALUES (?)", [("a",), ("b",), ("c",)])
        conn.execute("DELETE FROM notes WHERE text = 'a'")
    conn.close()
    rowids = read(oc.db, "SELECT rowid, text FROM notes")
    fake_home.write_config(CONFIG)

    code, doc, err = cli_json(fake_home, "prune")

    assert code == 0, err
    assert len(doc["removed"]) == 20 and doc["compacted"] == []
    assert read(oc.db, "SELECT rowid, text FROM notes") == rowids == [(2, "b"), (3, "c")]
    assert free_bytes(oc.db) > 0


def test_copilots_store_with_its_full_text_index_gives_its_pages_back(
    fake_home: FakeHome,
) -> None:
    tmp = Path(fake_home.environ["TMPDIR"])
    copilot = CopilotTree(fake_home.home / ".copilot", tmp, fake_home.home / "legacy")
    old = time.time() - 45 * DAY
    made = [copilot.session(when=old if n < 8 else time.time()) for n in range(12)]
    conn = copilot.database()
    with conn:  # what a long exchange leaves: big turns, indexed for search
        for n, s in enumerate(made):
            text = f"turn {n} " + "words " * 8000
            conn.execute(
                "INSERT INTO turns (session_id, turn_index, user_message) VALUES (?, 1, ?)",
                (s.id, text),
            )
            conn.execute(
                "INSERT INTO search_index VALUES (?, ?, 'turn', ?)", (text, s.id, f"{s.id}:turn:1")
            )
    conn.close()
    db = copilot.db
    before, size = settings(db), db.stat().st_size
    search = read(db, "SELECT rowid, source_id FROM search_index ORDER BY rowid")
    fake_home.write_config(CONFIG)

    code, doc, err = cli_json(fake_home, "prune")

    assert code == 0, err
    assert len(doc["removed"]) == 8
    assert [c["database"] for c in doc["compacted"]] == [str(db)]
    assert db.stat().st_size < size and free_bytes(db) == 0 and whole(db)
    assert settings(db) == before
    kept = {s.id for s in made[8:]}
    assert read(db, "SELECT rowid, source_id FROM search_index ORDER BY rowid") == [
        row for row in search if row[1].split(":")[0] in kept
    ], "the search index lost or renumbered a row that stays"
    assert read(db, "SELECT count(*) FROM search_index WHERE search_index MATCH 'words'") == [(4,)]
    assert nothing_beside(db)
