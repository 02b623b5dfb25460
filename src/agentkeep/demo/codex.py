"""Build a realistic Codex home in a fake user: rollouts (plain and .zst, in
date dirs and archived), the six databases Codex 0.169 keeps (with the real
schema of every table that holds a session's rows), and the session index and
TUI references of older versions.

`CodexTree(root)` writes 0.169's layout; `CodexTree(root, legacy=True)` the
older one (threads with a parent_thread_id column, thread_items of three
columns, no other databases) still on users' disks.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import zstandard

# -- older layout (before 0.169; the benchmark's homes use it too) ------------
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


# -- Codex 0.169: every table holding a session's rows, as the real binary
# created it (columns added by later migrations folded in) -------------------
SCHEMA: dict[str, str] = {
    "state_5.sqlite": """
CREATE TABLE threads (
    id TEXT PRIMARY KEY, rollout_path TEXT NOT NULL, created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, source TEXT NOT NULL, model_provider TEXT NOT NULL,
    cwd TEXT NOT NULL, title TEXT NOT NULL, sandbox_policy TEXT NOT NULL,
    approval_mode TEXT NOT NULL, tokens_used INTEGER NOT NULL DEFAULT 0,
    has_user_event INTEGER NOT NULL DEFAULT 0, archived INTEGER NOT NULL DEFAULT 0,
    archived_at INTEGER, git_sha TEXT, git_branch TEXT, git_origin_url TEXT,
    cli_version TEXT NOT NULL DEFAULT '', first_user_message TEXT NOT NULL DEFAULT '',
    agent_nickname TEXT, agent_role TEXT, memory_mode TEXT NOT NULL DEFAULT 'enabled',
    model TEXT, reasoning_effort TEXT, agent_path TEXT, created_at_ms INTEGER,
    updated_at_ms INTEGER, thread_source TEXT, preview TEXT NOT NULL DEFAULT '',
    recency_at INTEGER NOT NULL DEFAULT 0, recency_at_ms INTEGER NOT NULL DEFAULT 0,
    history_mode TEXT NOT NULL DEFAULT 'legacy', name TEXT,
    is_pinned INTEGER NOT NULL DEFAULT 0, thread_section_id TEXT, section_position INTEGER,
    section_entered_at_ms INTEGER, project_id TEXT, originator TEXT,
    daybreak_enabled BOOLEAN, creator_user_id TEXT, creator_account_id TEXT,
    attached_thread_parent_id TEXT
);
CREATE TABLE thread_dynamic_tools (
    thread_id TEXT NOT NULL, position INTEGER NOT NULL, name TEXT NOT NULL,
    description TEXT NOT NULL, input_schema TEXT NOT NULL,
    defer_loading INTEGER NOT NULL DEFAULT 0, namespace TEXT,
    PRIMARY KEY(thread_id, position),
    FOREIGN KEY(thread_id) REFERENCES threads(id) ON DELETE CASCADE
);
CREATE TABLE thread_spawn_edges (
    parent_thread_id TEXT NOT NULL, child_thread_id TEXT NOT NULL PRIMARY KEY,
    status TEXT NOT NULL
);
CREATE TABLE thread_attachments (
    id TEXT PRIMARY KEY, thread_id TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    attachment_type TEXT NOT NULL, identity_key TEXT NOT NULL, payload TEXT NOT NULL,
    created_at INTEGER NOT NULL, UNIQUE (thread_id, attachment_type, identity_key)
);
CREATE TABLE guardian_review_feedback (
    id TEXT PRIMARY KEY NOT NULL,
    thread_id TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE, record BLOB NOT NULL
);
CREATE TABLE thread_read_receipts (
    thread_id TEXT PRIMARY KEY NOT NULL, first_unread_turn TEXT, revision TEXT NOT NULL,
    last_published_turn TEXT
);
CREATE TABLE thread_sections (id TEXT PRIMARY KEY, name TEXT NOT NULL, appearance TEXT);
CREATE INDEX idx_threads_updated_at ON threads(updated_at DESC, id DESC);
""",
    "thread_history_1.sqlite": """
CREATE TABLE thread_turns (
    thread_id TEXT NOT NULL, turn_id TEXT NOT NULL, rollout_ordinal INTEGER NOT NULL,
    status TEXT NOT NULL, error_json TEXT, started_at INTEGER, completed_at INTEGER,
    duration_ms INTEGER, first_user_item_id TEXT, final_agent_item_id TEXT,
    rollout_byte_offset INTEGER, rollout_end_ordinal INTEGER,
    rollout_end_byte_offset INTEGER, root_turn_id TEXT, PRIMARY KEY (thread_id, turn_id)
);
CREATE TABLE thread_items (
    thread_id TEXT NOT NULL, turn_id TEXT NOT NULL, item_id TEXT NOT NULL,
    rollout_ordinal INTEGER NOT NULL, created_at_ms INTEGER NOT NULL, item_json TEXT NOT NULL,
    item_type TEXT NOT NULL DEFAULT '', updated_at_ordinal INTEGER NOT NULL DEFAULT 0,
    started_at_ms INTEGER, completed_at_ms INTEGER, PRIMARY KEY (thread_id, turn_id, item_id)
);
CREATE TABLE thread_history_projection_state (
    thread_id TEXT PRIMARY KEY, next_rollout_byte_offset INTEGER NOT NULL,
    next_rollout_ordinal INTEGER NOT NULL
);
CREATE TABLE thread_realtime_items (
    thread_id TEXT NOT NULL, item_id TEXT NOT NULL, rollout_ordinal INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL, item_type TEXT NOT NULL, item_json TEXT NOT NULL,
    PRIMARY KEY (thread_id, item_id)
);
""",
    "goals_1.sqlite": """
CREATE TABLE thread_goals (
    thread_id TEXT PRIMARY KEY NOT NULL, goal_id TEXT NOT NULL, objective TEXT NOT NULL,
    status TEXT NOT NULL, token_budget INTEGER, tokens_used INTEGER NOT NULL DEFAULT 0,
    time_used_seconds INTEGER NOT NULL DEFAULT 0, created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
CREATE TABLE thread_goal_continuation_deferrals (
    thread_id TEXT PRIMARY KEY NOT NULL REFERENCES thread_goals(thread_id) ON DELETE CASCADE
);
""",
    "queue_1.sqlite": """
CREATE TABLE queued_items (
    id TEXT PRIMARY KEY NOT NULL, thread_id TEXT NOT NULL, payload_json TEXT NOT NULL,
    queue_order INTEGER NOT NULL, created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL
);
CREATE TABLE queued_thread_revisions (
    revision INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT NOT NULL UNIQUE
);
""",
    "memories_1.sqlite": """
CREATE TABLE stage1_outputs (
    thread_id TEXT PRIMARY KEY, source_updated_at INTEGER NOT NULL, raw_memory TEXT NOT NULL,
    rollout_summary TEXT NOT NULL, rollout_slug TEXT, generated_at INTEGER NOT NULL,
    usage_count INTEGER, last_usage INTEGER, selected_for_phase2 INTEGER NOT NULL DEFAULT 0,
    selected_for_phase2_source_updated_at INTEGER
);
""",
    "logs_2.sqlite": """
CREATE TABLE logs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts INTEGER NOT NULL, ts_nanos INTEGER NOT NULL,
    level TEXT NOT NULL, target TEXT NOT NULL, feedback_log_body TEXT, module_path TEXT,
    file TEXT, line INTEGER, thread_id TEXT, process_uuid TEXT,
    estimated_bytes INTEGER NOT NULL DEFAULT 0
);
""",
}

# One row of each table (but threads and the spawn edges), `{sid}` for the
# session's id.
ROWS: dict[str, tuple[str, dict[str, object]]] = {
    "thread_dynamic_tools": (
        "state_5.sqlite",
        {"position": 0, "name": "t", "description": "d", "input_schema": "{{}}"},
    ),
    "thread_attachments": (
        "state_5.sqlite",
        {
            "id": "att-{sid}",
            "attachment_type": "file",
            "identity_key": "k",
            "payload": "{{}}",
            "created_at": 1,
        },
    ),
    "guardian_review_feedback": ("state_5.sqlite", {"id": "g-{sid}", "record": b"x"}),
    "thread_read_receipts": ("state_5.sqlite", {"revision": "r1"}),
    "thread_turns": (
        "thread_history_1.sqlite",
        {"turn_id": "turn-{sid}", "rollout_ordinal": 1, "status": "done"},
    ),
    "thread_items": (
        "thread_history_1.sqlite",
        {
            "turn_id": "turn-{sid}",
            "item_id": "item-{sid}",
            "rollout_ordinal": 2,
            "created_at_ms": 1,
            "item_json": "{{}}",
        },
    ),
    "thread_history_projection_state": (
        "thread_history_1.sqlite",
        {"next_rollout_byte_offset": 10, "next_rollout_ordinal": 3},
    ),
    "thread_realtime_items": (
        "thread_history_1.sqlite",
        {
            "item_id": "rt-{sid}",
            "rollout_ordinal": 1,
            "created_at_ms": 1,
            "item_type": "a",
            "item_json": "{{}}",
        },
    ),
    "thread_goals": (
        "goals_1.sqlite",
        {
            "goal_id": "goal-{sid}",
            "objective": "o",
            "status": "active",
            "created_at_ms": 1,
            "updated_at_ms": 1,
        },
    ),
    "thread_goal_continuation_deferrals": ("goals_1.sqlite", {}),
    "queued_items": (
        "queue_1.sqlite",
        {
            "id": "q-{sid}",
            "payload_json": "{{}}",
            "queue_order": 0,
            "created_at_ms": 1,
            "updated_at_ms": 1,
        },
    ),
    "queued_thread_revisions": ("queue_1.sqlite", {}),
    "stage1_outputs": (
        "memories_1.sqlite",
        {"source_updated_at": 1, "raw_memory": "m", "rollout_summary": "s", "generated_at": 1},
    ),
    "logs": (
        "logs_2.sqlite",
        {
            "ts": 1,
            "ts_nanos": 0,
            "level": "INFO",
            "target": "codex_core::session",
            "feedback_log_body": "turn for {sid}",
        },
    ),
}


def new_id() -> str:
    return str(uuid.uuid4())


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    # As Codex makes them (it takes effect on a new database only).
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


@dataclass
class CodexTree:
    root: Path
    legacy: bool = False

    @property
    def state_db(self) -> Path:
        return self.root / "state_5.sqlite"

    @property
    def history_db(self) -> Path:
        return self.root / "thread_history_1.sqlite"

    def db(self, name: str) -> Path:
        return self.root / name

    def _open(self, name: str) -> sqlite3.Connection:
        """A database of the tree, created with its schema on first use."""
        path = self.db(name)
        fresh = not path.exists()
        conn = _connect(path)
        if fresh:
            if self.legacy:
                legacy = {
                    "state_5.sqlite": LEGACY_THREADS_SQL,
                    "thread_history_1.sqlite": LEGACY_ITEMS_SQL,
                }
                conn.executescript(legacy[name])
            else:
                conn.executescript(SCHEMA[name])
        return conn

    @property
    def index(self) -> Path:
        return self.root / "session_index.jsonl"

    def rollout(
        self,
        sid: str,
        *,
        cwd: str = "/home/u/proj",
        started: datetime | None = None,
        forked_from: str | None = None,
        spawned_by: str | None = None,
        archived: bool = False,
        zst: bool = False,
        mtime: float | None = None,
        first_line: str | None = None,
    ) -> Path:
        """A rollout file: session_meta first, then a few response items."""
        started = started or datetime(2026, 1, 5, 9, 30, 0, tzinfo=UTC)
        stamp = started.strftime("%Y-%m-%dT%H-%M-%S")
        if archived:
            folder = self.root / "archived_sessions"
        else:
            folder = self.root / "sessions" / started.strftime("%Y/%m/%d")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"rollout-{stamp}-{sid}.jsonl"
        source: object = "cli"
        if spawned_by:
            source = {"subagent": {"thread_spawn": {"parent_thread_id": spawned_by, "depth": 1}}}
        meta = {
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
        lines = [first_line if first_line is not None else json.dumps(meta)]
        for n in range(3):
            item = {"type": "response_item", "payload": {"type": "message", "n": n}}
            lines.append(json.dumps(item))
        path.write_text("\n".join(lines) + "\n")
        if zst:
            path = self.compress(path)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        return path

    def compress(self, plain: Path) -> Path:
        """What Codex does to a cold rollout: write .zst, then drop the plain file."""
        packed = plain.with_name(plain.name + ".zst")
        st = plain.stat()
        packed.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
        os.utime(packed, (st.st_atime, st.st_mtime))
        plain.unlink()
        return packed

    def thread(
        self,
        sid: str,
        *,
        rollout: Path | None = None,
        updated_at: object = 1_767_600_000,
        updated_at_ms: object = None,
        cwd: str = "/home/u/proj",
        parent: str | None = None,
    ) -> None:
        """A threads row; updated_at is stored as given (seconds, ms, text).
        A parent is the row's parent_thread_id in the legacy layout, a spawn
        edge in 0.169's."""
        conn = self._open(self.state_db.name)
        with conn:
            conn.execute(
                "INSERT INTO threads (id, rollout_path, created_at, updated_at, source,"
                " model_provider, cwd, title, sandbox_policy, approval_mode, updated_at_ms)"
                " VALUES (?, ?, ?, ?, 'cli', 'openai', ?, 'a title',"
                " 'workspace-write', 'on-request', ?)",
                (sid, str(rollout or ""), 1_767_000_000, updated_at, cwd, updated_at_ms),
            )
            if parent is not None and self.legacy:
                conn.execute("UPDATE threads SET parent_thread_id = ? WHERE id = ?", (parent, sid))
        conn.close()
        if parent is not None and not self.legacy:
            self.spawn_edge(parent, sid)

    def spawn_edge(self, parent: str, child: str) -> None:
        conn = self._open(self.state_db.name)
        with conn:
            conn.execute(
                "INSERT INTO thread_spawn_edges (parent_thread_id, child_thread_id, status)"
                " VALUES (?, ?, 'open')",
                (parent, child),
            )
        conn.close()

    def rows(self, sid: str, tables: list[str] | None = None) -> list[str]:
        """One row of the session in each of `tables` (default: every table
        of ROWS); returns their `<db>#<table>`."""
        made = []
        for table in tables if tables is not None else list(ROWS):
            name, values = ROWS[table]
            row: dict[str, object] = {"thread_id": sid}
            for key, value in values.items():
                row[key] = value.format(sid=sid) if isinstance(value, str) else value
            conn = self._open(name)
            with conn:
                marks = ", ".join("?" for _ in row)
                conn.execute(
                    f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", list(row.values())
                )
            conn.close()
            made.append(f"{self.db(name)}#{table}")
        return made

    def items(self, sid: str, count: int = 3) -> None:
        conn = self._open(self.history_db.name)
        with conn:
            for n in range(count):
                if self.legacy:
                    conn.execute(
                        "INSERT INTO thread_items (thread_id, kind, payload)"
                        " VALUES (?, 'message', ?)",
                        (sid, json.dumps({"n": n})),
                    )
                else:
                    conn.execute(
                        "INSERT INTO thread_items (thread_id, turn_id, item_id, rollout_ordinal,"
                        " created_at_ms, item_json) VALUES (?, 't1', ?, ?, 1, ?)",
                        (sid, f"item-{n}", n, json.dumps({"n": n})),
                    )
        conn.close()

    def index_entry(self, sid: str, name: str = "a thread") -> None:
        with self.index.open("a") as f:
            record = {"id": sid, "thread_name": name, "updated_at": "2026-01-05T10:00:00Z"}
            f.write(json.dumps(record) + "\n")

    def tui_reference(self, sid: str) -> Path:
        folder = self.root / "tui-thread-reference-capabilities"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / sid
        path.write_text('{"capabilities": []}\n')
        return path

    def full_session(
        self,
        sid: str | None = None,
        *,
        updated_at: object = 1_767_600_000,
        older: bool = True,
        **rollout_kw: object,
    ) -> str:
        """A session with everything Codex leaves: rollout, threads row (last
        updated at `updated_at`, in seconds), items, a row in every other
        table (0.169), and (`older`) the index line and TUI reference of
        older versions."""
        sid = sid or new_id()
        path = self.rollout(sid, **rollout_kw)  # type: ignore[arg-type]
        self.thread(sid, rollout=path, updated_at=updated_at)
        self.items(sid)
        if not self.legacy:
            self.rows(sid, [t for t in ROWS if t != "thread_items"])
        if not older:
            return sid
        self.index_entry(sid)
        tui = self.tui_reference(sid)
        mtime = rollout_kw.get("mtime")
        if isinstance(mtime, float | int):
            os.utime(tui, (mtime, mtime))
        return sid
