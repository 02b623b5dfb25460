"""Codex homes for the tests: rollouts (plain and .zst, in date dirs and
archived), the six databases Codex 0.169 keeps (with the real schema of
every table that holds a session's rows) or the older layout
(`CodexTree(root, legacy=True)`: agentkeep.demo.codex's), the session index
and TUI references of older versions; what the tests read back
(which threads and items a database holds, every table naming a session),
and a fake `codex` binary on the fake user's PATH: it does what the real
`codex delete --force <id>` does to disk (FIELD-NOTES) and records every call.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import textwrap
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import zstandard

from agentkeep.demo.codex import (
    LEGACY_ITEMS_SQL,
    LEGACY_THREADS_SQL,
    response_items,
    session_meta,
)
from fakehome import FakeHome

__all__ = [
    "HOLD_OPEN",
    "HOLD_WRITE_LOCK",
    "ROWS",
    "CodexTree",
    "build_codex",
    "calls",
    "install_fake_codex",
    "new_id",
    "seen",
    "without",
]


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
    """A Codex home: 0.169's layout, or (`legacy`) the one before it."""

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
        meta = session_meta(sid, cwd, started, source=source, forked_from=forked_from)
        lines = [first_line if first_line is not None else json.dumps(meta)]
        lines += [json.dumps(item) for item in response_items()]
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

    def thread_ids(self) -> set[str]:
        conn = sqlite3.connect(f"file:{self.state_db}?mode=ro", uri=True)
        try:
            return {r[0] for r in conn.execute("SELECT id FROM threads")}
        finally:
            conn.close()

    def item_ids(self) -> set[str]:
        conn = sqlite3.connect(f"file:{self.history_db}?mode=ro", uri=True)
        try:
            return {r[0] for r in conn.execute("SELECT thread_id FROM thread_items")}
        finally:
            conn.close()

    def naming(self, sid: str) -> set[str]:
        """`<db>#<table>` of every table of every database in the root that
        has a row naming `sid` in any column (read-only)."""
        found = set()
        for db in sorted(self.root.glob("*.sqlite")):
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                tables = [
                    r[0]
                    for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                ]
                for table in tables:
                    cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
                    where = " OR ".join(f'"{c}" = ?' for c in cols)
                    hit = conn.execute(f'SELECT 1 FROM "{table}" WHERE {where}', [sid] * len(cols))
                    if hit.fetchone():
                        found.add(f"{db}#{table}")
            finally:
                conn.close()
        return found


def build_codex(fake_home: FakeHome) -> CodexTree:
    fake_home.codex.mkdir(parents=True, exist_ok=True)
    return CodexTree(fake_home.codex)


_FAKE_CODEX = """\
#!{python}
# A stand-in for Codex CLI 0.169: `--version` and `delete [--force] <id>`.
# Like the real one (FIELD-NOTES): without --force and a terminal it refuses;
# with it, it removes the session's rollouts and its rows in every table of
# every database (threads by id, spawn edges by either thread, any other
# table by thread_id or session_id), the same for each subagent thread its spawn edges
# name, and its session_index lines; it fails when it finds neither a threads
# row nor a rollout. What it found when called goes to codex.seen. A test
# seam: when codex.pause exists, it is taken, and the command stops after its
# first database, writes its pid to codex.paused and waits for codex.go.
import json, os, sqlite3, sys, time
from pathlib import Path

here = Path(__file__)
args = sys.argv[1:]
with here.with_name("codex.calls").open("a") as f:
    f.write(json.dumps(args) + "\\n")
if args == ["--version"]:
    print("codex-cli {version}")
    sys.exit(0)
if not args or args[0] != "delete":
    print("usage: codex delete [--force] <id>", file=sys.stderr)
    sys.exit(2)
if "--force" not in args:
    print("Error: cannot confirm session deletion without an interactive terminal; "
          "rerun with --force and a session UUID", file=sys.stderr)
    sys.exit(1)
if {fail!r}:
    print("error: thread store is busy", file=sys.stderr)
    sys.exit(1)
sid = args[-1]
home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
skip = set({skip!r})

def rollouts(thread):
    found = []
    for folder in ("sessions", "archived_sessions"):
        base = home / folder
        if base.is_dir():
            found += [p for p in base.rglob("rollout-*")
                      if p.name.endswith((thread + ".jsonl", thread + ".jsonl.zst"))]
    return found

def query(sql, params):
    out = []
    for db in sorted(home.glob("*.sqlite")):
        conn = sqlite3.connect(db)
        try:
            out += conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            pass
        conn.close()
    return out

threads = query("SELECT id FROM threads WHERE id = ?", (sid,))
with here.with_name("codex.seen").open("a") as f:
    found = {{"id": sid, "rollouts": len(rollouts(sid)), "threads": len(threads)}}
    f.write(json.dumps(found) + "\\n")
if not threads and not rollouts(sid):
    print("Error: failed to delete session", file=sys.stderr)
    sys.exit(1)
todo, gone = [sid], []
while todo:
    thread = todo.pop()
    gone.append(thread)
    sql = "SELECT child_thread_id FROM thread_spawn_edges WHERE parent_thread_id = ?"
    todo += [c for (c,) in query(sql, (thread,)) if c not in gone]
for thread in gone:
    for path in rollouts(thread):
        path.unlink()
    for db in sorted(home.glob("*.sqlite")):
        conn = sqlite3.connect(db)
        with conn:
            listed = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for table in [r[0] for r in listed]:
                cols = {{r[1] for r in conn.execute(f'PRAGMA table_info("{{table}}")')}}
                if table in skip:
                    continue
                if table == "threads":
                    keys = ["id"]
                elif table == "thread_spawn_edges":
                    keys = ["parent_thread_id", "child_thread_id"]
                else:
                    keys = [k for k in ("thread_id", "session_id") if k in cols]
                for key in keys:
                    conn.execute(f'DELETE FROM "{{table}}" WHERE "{{key}}" = ?', (thread,))
        conn.close()
        pause = here.with_name("codex.pause")
        if pause.exists():
            pause.unlink()
            here.with_name("codex.paused").write_text(str(os.getpid()))
            deadline = time.monotonic() + 60
            while not here.with_name("codex.go").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
index = home / "session_index.jsonl"
if index.exists():
    kept = [l for l in index.read_text().splitlines() if json.loads(l).get("id") not in gone]
    index.write_text("".join(l + "\\n" for l in kept))
print("Deleted session " + sid + ".")
"""


def install_fake_codex(
    fake_home: FakeHome,
    *,
    version: str = "0.169.0",
    fail: bool = False,
    skip: tuple[str, ...] = (),
) -> Path:
    """Write a fake `codex` into a bin dir put first on the fake user's PATH
    (`skip`: tables it does not know, as an older Codex would not); returns
    the file its calls are recorded in (one JSON argv per line)."""
    bin_dir = fake_home.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "codex"
    text = _FAKE_CODEX.format(python=sys.executable, version=version, fail=fail, skip=list(skip))
    script.write_text(text)
    script.chmod(0o755)
    fake_home.environ["PATH"] = f"{bin_dir}{os.pathsep}{without(fake_home, 'codex')}"
    return bin_dir / "codex.calls"


def without(fake_home: FakeHome, binary: str) -> str:
    """The fake user's PATH without any directory holding `binary`, so a real
    agent installed on this machine is never run by a test."""
    dirs = fake_home.environ.get("PATH", os.defpath).split(os.pathsep)
    kept = [d for d in dirs if d and not os.path.exists(os.path.join(d, binary))]
    return os.pathsep.join(kept)


def seen(log: Path) -> list[dict[str, object]]:
    """What the fake `codex delete` found when it was called."""
    path = log.with_name("codex.seen")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


HOLD_WRITE_LOCK = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(60)
    """
)

HOLD_OPEN = textwrap.dedent(
    """
    import sys, time
    f = open(sys.argv[1], "rb")
    print("open", flush=True)
    time.sleep(60)
    """
)
