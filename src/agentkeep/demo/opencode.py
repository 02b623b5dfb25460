"""Build a realistic opencode data dir in a fake user: the 1.x JSON storage
(session, message, part, todo, session_diff), `opencode.db` with the 1.2+
tables (session, message, part, todo, session_share), the 1.18 ones
(session_message, session_input, session_context_epoch: the real 1.18.33
schema) and the 2.x ones (session_v2, event, event_sequence), and truncated
tool outputs (`tool-output/tool_<id>`, which part rows point at).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import string
from dataclasses import dataclass
from pathlib import Path

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

_ALNUM = string.ascii_letters + string.digits
UPDATED_MS = 1_767_600_000_000


def new_id(prefix: str = "ses") -> str:
    """An id shaped like opencode's: prefix, underscore, 26 base62 characters."""
    return f"{prefix}_{''.join(secrets.choice(_ALNUM) for _ in range(26))}"


@dataclass
class OpencodeTree:
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
        info = {
            "id": sid,
            "slug": "brave-otter",
            "version": "1.1.20",
            "projectID": project,
            "directory": directory,
            "title": "a session",
            "time": {"created": updated_ms - 60_000, "updated": updated_ms},
        }
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
