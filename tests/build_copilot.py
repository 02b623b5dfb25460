"""GitHub Copilot CLI sessions laid out as 1.0.102 writes them (FIELD-NOTES
"GitHub Copilot CLI", and what the real agent wrote under the conformance
suite): `session-state/<id>/` with `events.jsonl` and the rest, the
operation lock beside it, the rows of the shared `session-store.db` (the
real schema, FTS5 `search_index` included, in WAL mode), a big tool output
in the tmp dir, and the shared files that name sessions (process logs, the
sidebar, open sessions). The traps are Copilot's own: stale and live
`inuse.<pid>` locks, forks whose events are copies, the legacy
`$XDG_STATE_HOME/.copilot` and the links 1.0.102 leaves there, and the rows
and lock Copilot's own `/session delete` leaves.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, cwd TEXT, repository TEXT, host_type TEXT, branch TEXT,
    summary TEXT, created_at TEXT DEFAULT (datetime('now')),
    updated_at TEXT DEFAULT (datetime('now')));
CREATE TABLE turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id), turn_index INTEGER NOT NULL,
    user_message TEXT, assistant_response TEXT, timestamp TEXT DEFAULT (datetime('now')),
    UNIQUE(session_id, turn_index));
CREATE TABLE checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id), checkpoint_number INTEGER NOT NULL,
    title TEXT, overview TEXT, created_at TEXT DEFAULT (datetime('now')),
    UNIQUE(session_id, checkpoint_number));
CREATE TABLE session_files (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id), file_path TEXT NOT NULL,
    tool_name TEXT, turn_index INTEGER, first_seen_at TEXT DEFAULT (datetime('now')),
    UNIQUE(session_id, file_path));
CREATE TABLE session_refs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id), ref_type TEXT NOT NULL,
    ref_value TEXT NOT NULL, turn_index INTEGER, created_at TEXT DEFAULT (datetime('now')),
    UNIQUE(session_id, ref_type, ref_value));
CREATE TABLE forge_trajectory_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id), tool_call_id TEXT,
    turn_index INTEGER, event_type TEXT NOT NULL, command TEXT, output TEXT,
    created_at TEXT DEFAULT (datetime('now')));
CREATE TABLE assistant_usage_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id), turn_index INTEGER, agent_id TEXT,
    model TEXT NOT NULL, input_tokens INTEGER, output_tokens INTEGER,
    created_at TEXT DEFAULT (datetime('now')));
CREATE TABLE forge_skill_proposals (
    id TEXT PRIMARY KEY, git_root_path TEXT NOT NULL, branch_name TEXT NOT NULL,
    status TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE VIRTUAL TABLE search_index USING fts5(
    content, session_id UNINDEXED, source_type UNINDEXED, source_id UNINDEXED);
CREATE TABLE dynamic_context_items (
    repository TEXT NOT NULL, branch TEXT NOT NULL, src TEXT NOT NULL, name TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '', PRIMARY KEY (repository, branch, src, name));
INSERT INTO schema_version VALUES (8);
"""
# Every table a session's rows are in, `sessions` last (the order they go).
ROW_TABLES = (
    "assistant_usage_events",
    "checkpoints",
    "forge_trajectory_events",
    "search_index",
    "session_files",
    "session_refs",
    "turns",
    "sessions",
)
# The dir's entries as 1.0.102 makes them, sorted by name.
DIR_ENTRIES = (
    ".workspace-fork.lock",
    "checkpoints",
    "events.jsonl",
    "files",
    "research",
    "rewind-file-snapshots",
    "session.db",
    "workspace.yaml",
)
DEAD_PID = 4_194_303  # above any pid_max a test machine has, never alive


def new_id() -> str:
    return str(uuid.uuid4())


def stamp(when: float) -> str:
    moment = datetime.fromtimestamp(when, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def event(kind: str, data: dict[str, object], when: float) -> str:
    return json.dumps(
        {"type": kind, "data": data, "id": new_id(), "timestamp": stamp(when), "parentId": None},
        separators=(",", ":"),
    )


def output_name(pid: int, when: float) -> str:
    return f"{int(when * 1000)}-copilot-tool-output-{pid}-{new_id()}.txt"


@dataclass
class Made:
    """One session on disk: the id, every file of it, its rows' tables."""

    id: str
    dir: Path | None
    events: Path | None
    oplock: Path | None
    outputs: list[Path] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    shared: list[Path] = field(default_factory=list)

    def files(self) -> list[Path]:
        return [p for p in (self.dir, self.oplock, *self.outputs) if p is not None]


class CopilotTree:
    """A Copilot home (`$COPILOT_HOME`), its tmp dir, and the legacy
    `$XDG_STATE_HOME/.copilot`."""

    def __init__(self, home: Path, tmp: Path, legacy: Path) -> None:
        self.home, self.tmp, self.legacy = home, tmp, legacy
        self.state = home / "session-state"
        self.db = home / "session-store.db"

    @property
    def oplocks(self) -> Path:
        return self.state / ".session-operation-locks"

    def database(self, db: Path | None = None) -> sqlite3.Connection:
        db = db or self.db
        made = not db.exists()
        db.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(db, isolation_level=None)
        if made:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(SCHEMA)
        return conn

    # -- one session ------------------------------------------------------------
    def session(
        self,
        sid: str | None = None,
        *,
        when: float,
        cwd: str = "/work/alpha",
        events: list[str] | None = None,
        outputs: int = 0,
        inuse: int | None = None,
        rows: bool = True,
        state: Path | None = None,
        db: Path | None = None,
    ) -> Made:
        """A session last active at `when`. `outputs`: big tool outputs
        named in its events; `inuse`: the pid of an `inuse.<pid>` pair (a
        dead pid is a crash's stale pair, whose tool output is named
        nowhere else); `events`: its lines instead of a plain exchange."""
        sid = sid or new_id()
        state = state or self.state
        directory = state / sid
        for name in ("checkpoints", "files", "research", "rewind-file-snapshots"):
            (directory / name).mkdir(parents=True, exist_ok=True)
        (directory / ".workspace-fork.lock").touch()
        (directory / "checkpoints" / "index.md").write_text("# Checkpoint History\n")
        (directory / "rewind-file-snapshots" / "tracking.json").write_text(
            '{"schema":1,"tracking":true}'
        )
        sqlite3.connect(directory / "session.db").executescript(
            "CREATE TABLE todos (id TEXT PRIMARY KEY, title TEXT NOT NULL);"
        )
        (directory / "workspace.yaml").write_text(
            f"id: {sid}\ncwd: {cwd}\nclient_name: github/cli\nname: say hello\n"
            f"user_named: false\nsummary_count: 0\nfork_count: 0\n"
            f"created_at: {stamp(when - 60)}\nupdated_at: {stamp(when)}\n"
        )
        made_outputs = [self._output(DEAD_PID - 1 - n, when) for n in range(outputs)]
        lines = events if events is not None else self.exchange(sid, cwd, when, made_outputs)
        events_path = directory / "events.jsonl"
        events_path.write_text("".join(line + "\n" for line in lines))
        if inuse is not None:
            (directory / f"inuse.{inuse}.lock").write_text(f"{inuse}\n")
            (directory / f"inuse.{inuse}.hold").touch()
            if inuse == DEAD_PID:
                made_outputs.append(self._output(inuse, when))
        (state / ".session-operation-locks").mkdir(parents=True, exist_ok=True)
        oplock = state / ".session-operation-locks" / f"{sid}.lock"
        oplock.touch()
        made = Made(sid, directory, events_path, oplock, made_outputs)
        if rows:
            made.tables = self.rows(sid, when, cwd, db)
        for path in [directory, oplock, *made_outputs]:
            set_mtime(path, when)
        return made

    def exchange(self, sid: str, cwd: str, when: float, outputs: list[Path]) -> list[str]:
        """A prompt answered, with a tool call per big output."""
        lines = [
            event(
                "session.start",
                {
                    "sessionId": sid,
                    "version": 1,
                    "producer": "copilot-agent",
                    "copilotVersion": "1.0.102",
                    "startTime": stamp(when - 60),
                    "context": {"cwd": cwd},
                    "alreadyInUse": False,
                },
                when - 60,
            ),
            event("user.message", {"content": "say hello"}, when - 50),
        ]
        for path in outputs:
            content = f"Output too large to read at once (1.2 MB). Saved to: {path}\nConsider"
            lines.append(event("tool.execution_complete", {"result": {"content": content}}, when))
        lines.append(event("assistant.message", {"content": "Hello."}, when - 1))
        lines.append(event("session.shutdown", {"shutdownType": "routine"}, when))
        return lines

    def rows(self, sid: str, when: float, cwd: str, db: Path | None = None) -> list[str]:
        """A row of the session in every table that has one."""
        conn = self.database(db)
        at = stamp(when)
        with conn:
            conn.execute(
                "INSERT INTO sessions (id, cwd, summary, created_at, updated_at)"
                " VALUES (?, ?, 'say hello', ?, ?)",
                (sid, cwd, stamp(when - 60), at),
            )
            conn.execute(
                "INSERT INTO turns (session_id, turn_index, user_message, assistant_response,"
                " timestamp) VALUES (?, 0, 'say hello', 'Hello.', ?)",
                (sid, at),
            )
            conn.execute(
                "INSERT INTO checkpoints (session_id, checkpoint_number, title) VALUES (?, 1, 't')",
                (sid,),
            )
            conn.execute(
                "INSERT INTO session_files (session_id, file_path, tool_name)"
                " VALUES (?, ?, 'create')",
                (sid, f"{cwd}/hello.txt"),
            )
            conn.execute(
                "INSERT INTO session_refs (session_id, ref_type, ref_value) VALUES (?, 'pr', '1')",
                (sid,),
            )
            conn.execute(
                "INSERT INTO forge_trajectory_events (session_id, event_type) VALUES (?, 'x')",
                (sid,),
            )
            conn.execute(
                "INSERT INTO assistant_usage_events (session_id, model) VALUES (?, 'mock-model')",
                (sid,),
            )
            conn.execute(
                "INSERT INTO search_index VALUES ('say hello Hello.', ?, 'turn', ?)",
                (sid, f"{sid}:turn:0"),
            )
        conn.close()
        return list(ROW_TABLES)

    def _output(self, pid: int, when: float) -> Path:
        path = self.tmp / output_name(pid, when)
        path.write_text("1\n2\n3\n" * 1000)
        return path

    # -- lineage ------------------------------------------------------------------
    def fork(
        self, parent: str, *, when: float, cwd: str = "/work/alpha", tell_parent: bool = True
    ) -> Made:
        """What `/fork` leaves: the parent's events copied under a new id
        (its session.start rewritten to the child and the fork's time, every
        other line as it was: naming the parent, its tool outputs, the fork
        events of its own ancestry) and a fork event of the child's own, and
        (`tell_parent`) in the parent a fork event naming the child."""
        parent_events = self.state / parent / "events.jsonl"
        child = new_id()
        copied = parent_events.read_text().splitlines()
        head = json.loads(copied[0])
        head["data"].update(sessionId=child, startTime=stamp(when))
        head["timestamp"] = stamp(when)
        own = f'Forked from "say hello" ({parent}) as "say hello (fork)" ({child}).'
        lines = [json.dumps(head), *copied[1:], event("session.info", fork(own), when)]
        made = self.session(child, when=when, cwd=cwd, events=lines)
        if not tell_parent:
            return made
        told = f'Forked this session into "say hello (fork)" ({child}).'
        before = parent_events.stat().st_mtime  # as if forked at its last moment
        with parent_events.open("a") as f:
            f.write(event("session.info", fork(told), before) + "\n")
        set_mtime(parent_events, before)
        return made

    # -- what Copilot's own delete and the legacy dir leave ---------------------
    def deleted(self, *, when: float) -> Made:
        """`/session delete`: the dir gone, its lock and every row left."""
        made = self.session(when=when)
        assert made.dir is not None
        for path in sorted(made.dir.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        made.dir.rmdir()
        return Made(made.id, None, None, made.oplock, [], made.tables)

    def legacy_links(self) -> list[Path]:
        """The links 1.0.102 leaves in the legacy dir after moving it home."""
        self.legacy.mkdir(parents=True, exist_ok=True)
        links = []
        for name in ("session-state", "session-store.db"):
            link = self.legacy / name
            link.symlink_to(self.home / name)
            links.append(link)
        return links

    # -- shared files ---------------------------------------------------------------
    def shared(self, made: Made, *, when: float, pid: int = 4242) -> list[Path]:
        """What names a session without being its: the log of the process
        that ran it, the sidebar and open-sessions state, and the config."""
        log = self.home / "logs" / f"process-{int((when - 90) * 1000)}-{pid}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"{stamp(when)} [INFO] Workspace initialized: {made.id} (checkpoints: 0)\n")
        set_mtime(log, when)
        sidebar = self.home / "sidebar-sessions-state" / "934f0b56.json"
        sidebar.parent.mkdir(parents=True, exist_ok=True)
        ids = json.loads(sidebar.read_text())["sessionIds"] if sidebar.exists() else []
        sidebar.write_text(
            json.dumps({"schemaVersion": 1, "cwd": "/work", "sessionIds": [*ids, made.id]})
        )
        opened = self.home / "open-sessions-state.json"
        state = json.loads(opened.read_text()) if opened.exists() else {}
        state[made.id] = {"schemaVersion": 1, "openedAt": stamp(when), "working": False}
        opened.write_text(json.dumps(state))
        config = self.home / "config.json"
        config.write_text('// This file is managed automatically.\n{"firstLaunchAt": "x"}\n')
        history = self.home / "command-history-state.json"
        history.write_text('{"commandHistory": ["say hello"]}')
        return [log, sidebar, opened]

    def package_caches(self, cache: Path) -> list[Path]:
        """Copilot's own unpacked package, in the cache and in its home:
        never a session, though it holds `inuse.<pid>.hold` files."""
        found = []
        for base in (cache / "copilot" / "pkg", self.home / "pkg"):
            version = base / "linux-x64" / "1.0.102"
            version.mkdir(parents=True)
            (version / "app.js").write_text("// copilot\n")
            (version / f"inuse.{DEAD_PID}.hold").touch()
            (version / new_id()).mkdir()
            found.append(base)
        return found


def fork(message: str) -> dict[str, object]:
    return {"infoType": "fork", "message": message}


def set_mtime(path: Path, when: float) -> None:
    """`path` and everything below it modified at `when`."""
    paths = [path, *path.rglob("*")] if path.is_dir() and not path.is_symlink() else [path]
    for p in paths:
        os.utime(p, (when, when), follow_symlinks=False)


def count_rows(db: Path, table: str, sid: str) -> int:
    column = "id" if table == "sessions" else "session_id"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(
            conn.execute(f'SELECT count(*) FROM "{table}" WHERE {column} = ?', (sid,)).fetchone()[0]
        )
    finally:
        conn.close()
