"""Build a realistic Codex home in a fake user: rollouts (plain and .zst, in
date dirs and archived), the state and thread-history databases, the session
index, TUI references, and a fake `codex` binary on the fake user's PATH.

The schema follows Codex's own migrations (threads: 0001 + updated_at_ms +
parent_thread_id); the fake `codex` does what `codex delete <id>` does to
disk (rollout, index line, threads row) and records every call.
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

from conftest import FakeHome

_THREADS_SQL = """
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

_ITEMS_SQL = """
CREATE TABLE thread_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX idx_thread_items_thread ON thread_items(thread_id);
"""


def new_id() -> str:
    return str(uuid.uuid4())


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


@dataclass
class CodexTree:
    root: Path

    @property
    def state_db(self) -> Path:
        return self.root / "state_5.sqlite"

    @property
    def history_db(self) -> Path:
        return self.root / "thread_history_1.sqlite"

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
        """A threads row; updated_at is stored as given (seconds, ms, text)."""
        fresh = not self.state_db.exists()
        conn = _connect(self.state_db)
        with conn:
            if fresh:
                conn.executescript(_THREADS_SQL)
            conn.execute(
                "INSERT INTO threads (id, rollout_path, created_at, updated_at, source,"
                " model_provider, cwd, title, sandbox_policy, approval_mode, updated_at_ms,"
                " parent_thread_id) VALUES (?, ?, ?, ?, 'cli', 'openai', ?, 'a title',"
                " 'workspace-write', 'on-request', ?, ?)",
                (sid, str(rollout or ""), 1_767_000_000, updated_at, cwd, updated_at_ms, parent),
            )
        conn.close()

    def items(self, sid: str, count: int = 3) -> None:
        fresh = not self.history_db.exists()
        conn = _connect(self.history_db)
        with conn:
            if fresh:
                conn.executescript(_ITEMS_SQL)
            for n in range(count):
                conn.execute(
                    "INSERT INTO thread_items (thread_id, kind, payload) VALUES (?, 'message', ?)",
                    (sid, json.dumps({"n": n})),
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

    def full_session(self, sid: str | None = None, **rollout_kw: object) -> str:
        """A session with everything Codex leaves: rollout, row, items, index, TUI ref."""
        sid = sid or new_id()
        path = self.rollout(sid, **rollout_kw)  # type: ignore[arg-type]
        self.thread(sid, rollout=path)
        self.items(sid)
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


def build_codex(fake_home: FakeHome) -> CodexTree:
    fake_home.codex.mkdir(parents=True, exist_ok=True)
    return CodexTree(fake_home.codex)


_FAKE_CODEX = """\
#!{python}
# A stand-in for Codex CLI: `--version` and `delete <id>` only. Like the real
# one, delete removes the rollout(s), the session_index lines and the threads
# row, and leaves thread_items rows and TUI references alone.
import json, os, sqlite3, sys
from pathlib import Path

calls = Path(__file__).with_name("codex.calls")
with calls.open("a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:] == ["--version"]:
    print("codex-cli {version}")
    sys.exit(0)
if len(sys.argv) != 3 or sys.argv[1] != "delete":
    print("usage: codex delete <id>", file=sys.stderr)
    sys.exit(2)
if {fail!r}:
    print("error: thread store is busy", file=sys.stderr)
    sys.exit(1)
sid = sys.argv[2]
home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
for folder in ("sessions", "archived_sessions"):
    base = home / folder
    if base.is_dir():
        for path in base.rglob("rollout-*"):
            if path.name.endswith((sid + ".jsonl", sid + ".jsonl.zst")):
                path.unlink()
index = home / "session_index.jsonl"
if index.exists():
    kept = [l for l in index.read_text().splitlines() if json.loads(l).get("id") != sid]
    index.write_text("".join(l + "\\n" for l in kept))
for db in home.glob("state_*.sqlite"):
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM threads WHERE id = ?", (sid,))
    conn.close()
print("deleted thread " + sid)
"""


def install_fake_codex(
    fake_home: FakeHome, *, version: str = "0.141.0", fail: bool = False
) -> Path:
    """Write a fake `codex` into a bin dir put first on the fake user's PATH;
    returns the file its calls are recorded in (one JSON argv per line)."""
    bin_dir = fake_home.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "codex"
    script.write_text(_FAKE_CODEX.format(python=sys.executable, version=version, fail=fail))
    script.chmod(0o755)
    fake_home.environ["PATH"] = f"{bin_dir}{os.pathsep}{without(fake_home, 'codex')}"
    return bin_dir / "codex.calls"


def without(fake_home: FakeHome, binary: str) -> str:
    """The fake user's PATH without any directory holding `binary`, so a real
    agent installed on this machine is never run by a test."""
    dirs = fake_home.environ.get("PATH", os.defpath).split(os.pathsep)
    kept = [d for d in dirs if d and not os.path.exists(os.path.join(d, binary))]
    return os.pathsep.join(kept)


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
