"""Codex sessions for the demo home: a rollout (its `session_meta` record
first, with the shape the tests' builders use too) and the session's rows
in the databases of Codex before 0.169 (FIELD-NOTES "Codex").
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from agentkeep.demo.agents import jsonl, write

# The layout before 0.169 (threads with parent_thread_id, thread_items of
# three columns), still on users' disks: the demo's and the benchmark's.
LEGACY_THREADS_SQL = """
CREATE TABLE threads (
    id TEXT PRIMARY KEY,
    rollout_path TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    source TEXT NOT NULL,
    model_provider TEXT NOT NULL,
    cwd TEXT NOT NULL,
    title TEXT NOT NULL,
    sandbox_policy TEXT NOT NULL,
    approval_mode TEXT NOT NULL,
    tokens_used INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0,
    archived_at INTEGER,
    git_sha TEXT,
    git_branch TEXT,
    git_origin_url TEXT,
    created_at_ms INTEGER,
    updated_at_ms INTEGER,
    parent_thread_id TEXT
);
CREATE INDEX idx_threads_updated_at ON threads(updated_at DESC, id DESC);
"""

LEGACY_ITEMS_SQL = """
CREATE TABLE thread_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX idx_thread_items_thread ON thread_items(thread_id);
"""


def session_meta(
    sid: str, cwd: str, started: datetime, *, source: object = "cli", forked_from: str | None = None
) -> dict[str, object]:
    """A rollout's first record, its base instructions as long as a real one's."""
    return {
        "timestamp": started.isoformat(),
        "type": "session_meta",
        "payload": {
            "id": sid,
            "timestamp": started.isoformat(),
            "cwd": cwd,
            "originator": "codex_cli_rs",
            "cli_version": "0.141.0",
            "source": source,
            "forked_from_id": forked_from,
            "base_instructions": {"text": "You are Codex. " * 6000},
        },
    }


def response_items(count: int = 3) -> list[dict[str, object]]:
    """The records after session_meta."""
    return [{"type": "response_item", "payload": {"type": "message", "n": n}} for n in range(count)]


def write_session(root: Path, *, cwd: str, when: float) -> str:
    """A session in the Codex home `root`, last active at `when`: its rollout
    in the date dirs, its threads row and its items. Returns its id."""
    sid = str(uuid.uuid4())
    started = datetime.fromtimestamp(when - 600, UTC)
    name = f"{started:%Y/%m/%d}/rollout-{started:%Y-%m-%dT%H-%M-%S}-{sid}.jsonl"
    records = [session_meta(sid, cwd, started), *response_items()]
    rollout = write(root / "sessions" / name, jsonl(records))
    os.utime(rollout, (when, when))
    with _database(root / "state_5.sqlite", LEGACY_THREADS_SQL) as conn:
        conn.execute(
            "INSERT INTO threads (id, rollout_path, created_at, updated_at, source,"
            " model_provider, cwd, title, sandbox_policy, approval_mode)"
            " VALUES (?, ?, ?, ?, 'cli', 'openai', ?, 'a title', 'workspace-write', 'on-request')",
            (sid, str(rollout), int(when) - 600, int(when), cwd),
        )
    with _database(root / "thread_history_1.sqlite", LEGACY_ITEMS_SQL) as conn:
        conn.executemany(
            "INSERT INTO thread_items (thread_id, kind, payload) VALUES (?, 'message', ?)",
            [(sid, json.dumps(r["payload"])) for r in response_items()],
        )
    return sid


@contextmanager
def _database(path: Path, schema: str) -> Iterator[sqlite3.Connection]:
    """A database, made with `schema` in WAL mode (as Codex's) when new; what
    the block writes is committed, and the connection closed."""
    fresh = not path.exists()
    conn = sqlite3.connect(path)
    try:
        if fresh:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(schema)
        with conn:
            yield conn
    finally:
        conn.close()
