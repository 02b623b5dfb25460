"""opencode data dirs for the tests: the 1.x JSON storage (session, message,
part, todo, session_diff; a session's file as agentkeep.demo.opencode writes
it), `opencode.db` with the 1.2+ tables (session, message, part, todo,
session_share), the 1.18 ones (session_message, session_input,
session_context_epoch: the real 1.18.33 schema) and the 2.x ones
(session_v2, event, event_sequence), truncated tool outputs
(`tool-output/tool_<id>`, which part rows point at); what the tests read
back (a session's row counts in every table), and a fake `opencode` binary.

The fake `opencode` implements the two commands agentkeep may run: `debug
paths` (printed like the real one, `key.padEnd(10) value`) and `session
delete <id>`, which deletes only the 2.x rows of that one session (#50260,
#34701), or with `every_row` what 1.18.33's does: the session, its
children and every row of theirs, leaving their tool outputs. A real
opencode is never run here: it migrates the database.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from agentkeep.demo.opencode import new_id, session_info
from build_codex import without
from fakehome import FakeHome

__all__ = [
    "TABLES",
    "UPDATED_MS",
    "OpencodeTree",
    "build_opencode",
    "install_fake_opencode",
    "new_id",
]

_SCHEMA = """
CREATE TABLE project (id TEXT PRIMARY KEY, worktree TEXT NOT NULL, time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL);
CREATE TABLE session (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES project(id) ON DELETE CASCADE,
    workspace_id TEXT,
    parent_id TEXT,
    slug TEXT NOT NULL,
    directory TEXT NOT NULL,
    title TEXT NOT NULL,
    version TEXT NOT NULL,
    share_url TEXT,
    cost REAL NOT NULL DEFAULT 0,
    time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL,
    time_compacting INTEGER,
    time_archived INTEGER
);
CREATE INDEX session_parent_idx ON session(parent_id);
CREATE TABLE message (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE part (
    id TEXT PRIMARY KEY,
    message_id TEXT NOT NULL REFERENCES message(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE todo (
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    content TEXT NOT NULL,
    status TEXT NOT NULL,
    priority TEXT NOT NULL,
    position INTEGER NOT NULL,
    time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL,
    PRIMARY KEY (session_id, position)
);
CREATE TABLE session_share (
    session_id TEXT PRIMARY KEY REFERENCES session(id) ON DELETE CASCADE,
    id TEXT NOT NULL,
    secret TEXT NOT NULL,
    url TEXT NOT NULL,
    time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL
);
CREATE TABLE session_message (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    type TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE session_input (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    prompt TEXT NOT NULL,
    delivery TEXT NOT NULL,
    admitted_seq INTEGER NOT NULL,
    promoted_seq INTEGER,
    time_created INTEGER NOT NULL
);
CREATE TABLE session_context_epoch (
    session_id TEXT PRIMARY KEY REFERENCES session(id) ON DELETE CASCADE,
    baseline TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    baseline_seq INTEGER NOT NULL
);
CREATE TABLE account (id TEXT PRIMARY KEY, email TEXT NOT NULL, url TEXT NOT NULL,
    access_token TEXT NOT NULL, refresh_token TEXT NOT NULL, token_expiry INTEGER,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL);
CREATE TABLE permission (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, action TEXT NOT NULL,
    resource TEXT NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL);
"""

_SCHEMA_V2 = """
CREATE TABLE session_v2 (
    id TEXT PRIMARY KEY,
    parent_id TEXT,
    project_id TEXT NOT NULL,
    directory TEXT NOT NULL,
    title TEXT NOT NULL,
    time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE event (
    id TEXT PRIMARY KEY,
    aggregate_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    time_created INTEGER NOT NULL
);
CREATE TABLE event_sequence (aggregate_id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
"""

UPDATED_MS = 1_767_600_000_000

# Every table with a session's rows, in the order agentkeep deletes them.
TABLES = (
    "session",
    "session_v2",
    "message",
    "part",
    "todo",
    "session_share",
    "session_message",
    "session_input",
    "session_context_epoch",
    "event",
    "event_sequence",
)
_KEYS = {
    "session": "id",
    "session_v2": "id",
    "event": "aggregate_id",
    "event_sequence": "aggregate_id",
}


@dataclass
class OpencodeTree:
    """An opencode data dir: what it writes, and what a test reads back (read-only)."""

    data: Path

    @property
    def db(self) -> Path:
        return self.data / "opencode.db"

    @property
    def storage(self) -> Path:
        return self.data / "storage"

    def create_db(self, *, v2: bool = True) -> Path:
        conn = sqlite3.connect(self.db)
        conn.execute("PRAGMA journal_mode=WAL")
        with conn:
            conn.executescript(_SCHEMA + (_SCHEMA_V2 if v2 else ""))
            conn.execute("INSERT INTO project VALUES ('global', '/', 1, 1)")
            conn.execute(
                "INSERT INTO account VALUES ('acc_1', 'u@example.com', 'https://x', 'a', 'r',"
                " NULL, 1, 1)"
            )
            conn.execute("INSERT INTO permission VALUES ('per_1', 'global', 'allow', '*', 1, 1)")
        conn.close()
        return self.db

    def session_json(
        self,
        sid: str,
        *,
        project: str = "global",
        parent: str | None = None,
        updated_ms: int = UPDATED_MS,
        directory: str = "/home/u/proj",
        raw: str | None = None,
    ) -> Path:
        folder = self.storage / "session" / project
        folder.mkdir(parents=True, exist_ok=True)
        info = session_info(sid, directory, updated_ms) | {"projectID": project}
        if parent:
            info["parentID"] = parent
        path = folder / f"{sid}.json"
        path.write_text(raw if raw is not None else json.dumps(info, indent=2))
        return path

    def messages_json(self, sid: str, count: int = 2, parts: int = 2) -> list[Path]:
        """Message files named by their ids, each with a part dir; returns the
        message dir followed by every part dir."""
        folder = self.storage / "message" / sid
        folder.mkdir(parents=True, exist_ok=True)
        made = [folder]
        for _ in range(count):
            msgid = new_id("msg")
            (folder / f"{msgid}.json").write_text(json.dumps({"id": msgid, "sessionID": sid}))
            part_dir = self.storage / "part" / msgid
            part_dir.mkdir(parents=True)
            for _ in range(parts):
                prt = new_id("prt")
                (part_dir / f"{prt}.json").write_text(json.dumps({"id": prt, "text": "x" * 100}))
            made.append(part_dir)
        return made

    def extras_json(self, sid: str) -> list[Path]:
        made = []
        for folder in ("todo", "session_diff"):
            (self.storage / folder).mkdir(parents=True, exist_ok=True)
            path = self.storage / folder / f"{sid}.json"
            path.write_text("[]")
            made.append(path)
        return made

    def session_rows(
        self,
        sid: str,
        *,
        parent: str | None = None,
        updated_ms: object = UPDATED_MS,
        directory: str = "/home/u/proj",
        legacy: bool = True,
        v2: bool = True,
        messages: int = 2,
    ) -> None:
        if not self.db.exists():
            self.create_db(v2=v2)
        conn = sqlite3.connect(self.db)
        with conn:
            if legacy:
                conn.execute(
                    "INSERT INTO session (id, project_id, parent_id, slug, directory, title,"
                    " version, time_created, time_updated) VALUES (?, 'global', ?, 'otter', ?,"
                    " 'a session', '1.2.0', 1, ?)",
                    (sid, parent, directory, updated_ms),
                )
                for n in range(messages):
                    msgid = new_id("msg")
                    conn.execute("INSERT INTO message VALUES (?, ?, 1, 1, '{}')", (msgid, sid))
                    conn.execute(
                        "INSERT INTO part VALUES (?, ?, ?, 1, 1, '{}')", (new_id("prt"), msgid, sid)
                    )
                    conn.execute(
                        "INSERT INTO todo VALUES (?, 'a todo', 'pending', 'high', ?, 1, 1)",
                        (sid, n),
                    )
                conn.execute(
                    "INSERT INTO session_share VALUES (?, 'shr', 'secret', 'https://x', 1, 1)",
                    (sid,),
                )
                conn.execute(
                    "INSERT INTO session_message VALUES (?, ?, 'user', 1, 1, 1, '{}')",
                    (new_id("msg"), sid),
                )
                conn.execute(
                    "INSERT INTO session_input VALUES (?, ?, '{}', 'queued', 1, NULL, 1)",
                    (new_id("inp"), sid),
                )
                conn.execute(
                    "INSERT INTO session_context_epoch VALUES (?, 'base', '{}', 1)", (sid,)
                )
            if v2:
                conn.execute(
                    "INSERT INTO session_v2 VALUES (?, ?, 'global', ?, 'a session', 1, ?, '{}')",
                    (sid, parent, directory, updated_ms),
                )
                for seq in range(2):
                    conn.execute(
                        "INSERT INTO event VALUES (?, ?, ?, 'session.updated', '{}', 1)",
                        (new_id("evt"), sid, seq),
                    )
                conn.execute("INSERT INTO event_sequence VALUES (?, 2)", (sid,))
        conn.close()

    def tool_output(self, sid: str, text: str = "1\n2\n3\n") -> Path:
        """A truncated tool output of the session's, as opencode 1.18 writes
        it: the file, and a tool part row (with its message) pointing at it."""
        folder = self.data / "tool-output"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / new_id("tool")
        path.write_text(text)
        self.point_at(sid, path)
        return path

    def point_at(self, sid: str, output: Path) -> None:
        """A tool part row of the session's whose output names `output`
        (what a fork's copied parts do)."""
        state = {
            "status": "completed",
            "input": {"command": "seq 1 30000"},
            "output": f"1\n2\n...\n\nFull output saved to: {output}\nUse Grep ...",
            "metadata": {"truncated": True, "outputPath": str(output)},
        }
        data = json.dumps({"type": "tool", "tool": "bash", "callID": "call_1", "state": state})
        msgid = new_id("msg")
        conn = sqlite3.connect(self.db)
        with conn:
            conn.execute("INSERT INTO message VALUES (?, ?, 1, 1, '{}')", (msgid, sid))
            conn.execute(
                "INSERT INTO part VALUES (?, ?, ?, 1, 1, ?)", (new_id("prt"), msgid, sid, data)
            )
        conn.close()

    def full_session(
        self,
        sid: str | None = None,
        *,
        parent: str | None = None,
        updated_ms: int | None = None,
        directory: str = "/home/u/proj",
    ) -> str:
        """A session with everything: JSON storage and rows of every table, in
        `directory`. Given `updated_ms` (ms since the epoch), it was last
        updated then, and its files are dated then too."""
        sid = sid or new_id()
        ms = UPDATED_MS if updated_ms is None else updated_ms
        made = [
            self.session_json(sid, parent=parent, updated_ms=ms, directory=directory),
            *self.messages_json(sid),
            *self.extras_json(sid),
        ]
        self.session_rows(sid, parent=parent, updated_ms=ms, directory=directory)
        if updated_ms is not None:
            when = updated_ms / 1000
            for top in made:
                for path in [top, *(top.rglob("*") if top.is_dir() else ())]:
                    os.utime(path, (when, when))
        return sid

    def rows(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        """A query's rows, read-only."""
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    def row_counts(self, sid: str) -> dict[str, int]:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            return {
                table: conn.execute(
                    f"SELECT count(*) FROM {table} WHERE {_KEYS.get(table, 'session_id')} = ?",
                    (sid,),
                ).fetchone()[0]
                for table in TABLES
                if table in have
            }
        finally:
            conn.close()


def build_opencode(fake_home: FakeHome) -> OpencodeTree:
    data = fake_home.data / "opencode"
    data.mkdir(parents=True, exist_ok=True)
    return OpencodeTree(data)


_FAKE_OPENCODE = """\
#!{python}
# A stand-in for opencode: `debug paths` and `session delete <id>` only.
# Delete removes the 2.x rows (session_v2, event, event_sequence) of that one
# session and leaves the legacy rows and files; with `every` it does what
# 1.18.33 does: the session, its children at any depth and every row of
# theirs go, their tool outputs stay.
import json, os, sqlite3, sys
from pathlib import Path

calls = Path(__file__).with_name("opencode.calls")
with calls.open("a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
home = os.environ["HOME"]
xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
data = {data!r} or os.path.join(xdg, "opencode")
args = sys.argv[1:]
if args == ["debug", "paths"]:
    paths = {{"home": home, "data": data, "bin": data + "/bin", "log": data + "/log",
             "cache": home + "/.cache/opencode", "config": home + "/.config/opencode",
             "state": home + "/.local/state/opencode"}}
    for key, value in paths.items():
        print(key.ljust(10), value)
    sys.exit(0)
if len(args) != 3 or args[:2] != ["session", "delete"]:
    print("unknown command", file=sys.stderr)
    sys.exit(2)
sid = args[2]
if {fail!r}:
    print("Error: database is locked", file=sys.stderr)
    sys.exit(1)
conn = sqlite3.connect(os.path.join(data, "opencode.db"))
if {every!r}:
    if not conn.execute("SELECT count(*) FROM session WHERE id = ?", (sid,)).fetchone()[0]:
        print("Error: Session not found: " + sid, file=sys.stderr)
        sys.exit(1)
    family, todo = [], [sid]
    while todo:
        one = todo.pop()
        family.append(one)
        todo += [r[0] for r in conn.execute("SELECT id FROM session WHERE parent_id = ?", (one,))]
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    with conn:
        for table in tables:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{{table}}")')]
            key = "id" if table in ("session", "session_v2") else next(
                (c for c in ("session_id", "aggregate_id") if c in cols), None)
            for one in family if key else ():
                conn.execute(f'DELETE FROM "{{table}}" WHERE "{{key}}" = ?', (one,))
    print("Session " + sid + " deleted")
    sys.exit(0)
if not conn.execute("SELECT count(*) FROM session_v2 WHERE id = ?", (sid,)).fetchone()[0]:
    print("Error: Session not found: " + sid, file=sys.stderr)
    sys.exit(1)
with conn:
    conn.execute("DELETE FROM session_v2 WHERE id = ?", (sid,))
    conn.execute("DELETE FROM event WHERE aggregate_id = ?", (sid,))
    conn.execute("DELETE FROM event_sequence WHERE aggregate_id = ?", (sid,))
conn.close()
print("Session " + sid + " deleted")
"""


def install_fake_opencode(
    fake_home: FakeHome,
    *,
    data_dir: Path | None = None,
    fail: bool = False,
    every_row: bool = False,
) -> Path:
    """Write a fake `opencode` first on the fake user's PATH; `data_dir` makes
    it report (and use) another data dir; `fail` makes `session delete` fail
    having done nothing; `every_row` makes it delete as 1.18.33 does.
    Returns the file its calls go to."""
    bin_dir = fake_home.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "opencode"
    data = str(data_dir) if data_dir else ""
    script.write_text(
        _FAKE_OPENCODE.format(python=sys.executable, data=data, fail=fail, every=every_row)
    )
    script.chmod(0o755)
    fake_home.environ["PATH"] = f"{bin_dir}{os.pathsep}{without(fake_home, 'opencode')}"
    return bin_dir / "opencode.calls"
