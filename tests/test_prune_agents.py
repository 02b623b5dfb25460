"""Prune end to end for every agent, through the real `agentkeep prune` (issue #5).

For each agent: an old idle session is removed with every artifact (files,
rows, dirs); a recent one is untouched; a live one is kept; the parent of a
kept child is kept, and an old parent with old children goes, children
first; residual is reported; a database held open for writing by another
process leaves the session kept or failed, never half removed; malformed
files are skipped with a log line, never a crash, never a wrong removal.

Each agent has a builder (the table at the end of the builders) that lays a
session out as the agent does and says exactly what the report must show of
it. Databases are queried read-only afterwards; what must stay is compared
by content hash and mtime (trees.tree_state).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import stat
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentkeep import leases
from agentkeep.agents import AGENTS
from agentkeep.model import parse_rfc3339, rfc3339
from agentkeep.processes import ProcessTable
from agentkeep.trash.entries import entry_dir
from build_agents import (
    gemini_root,
    grok_root,
    make_gemini_session,
    make_grok_session,
    make_store_session,
    make_zero_session,
    write,
    zero_root,
)
from build_codex import HOLD_WRITE_LOCK, ROWS, CodexTree, calls, install_fake_codex, without
from build_codex import new_id as codex_id
from build_copilot import DEAD_PID, ROW_TABLES, CopilotTree
from build_opencode import TABLES as OPENCODE_ALL_TABLES
from build_opencode import OpencodeTree, install_fake_opencode
from build_opencode import new_id as opencode_id
from build_pi import PiSession, PiTree
from build_qwen import QwenTree
from fakehome import FakeHome, kill_group
from hardening.hardening_util import (
    SLEEPER,
    Processes,
    processes,
    report_of,
    wait_until,
)
from trees import kept_files, tree_state

pytestmark = pytest.mark.slow

__all__ = ["processes"]  # a fixture, used by name

DAY = 86400.0
# The contract's keys, and `trash` (what went there, until when: README).
REPORT_KEYS = {"cutoff", "cutoffs", "dry_run", "removed", "kept", "failed", "residual", "trash"}
REPORT_KEYS |= {"leftovers", "compacted"}
UNDATED = "a time of it cannot be read"
GARBAGE = b"this is not a database\n" * 64
STORE = "issues"
OPENCODE_TABLES = OPENCODE_ALL_TABLES
# What the 2.x `opencode session delete` leaves (#50260): agentkeep's to delete.
OPENCODE_LEGACY = tuple(
    t for t in OPENCODE_TABLES if t not in ("session_v2", "event", "event_sequence")
)
_OPENCODE_KEYS = {
    "session": "id",
    "session_v2": "id",
    "event": "aggregate_id",
    "event_sequence": "aggregate_id",
}


# -- what a session is made of, and what the report must say of it ---------------


@dataclass(frozen=True)
class Row:
    """The rows of one session in one table of an agent's database."""

    db: Path
    table: str
    column: str
    value: str

    def count(self) -> int:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            sql = f'SELECT count(*) FROM "{self.table}" WHERE "{self.column}" = ?'
            return int(conn.execute(sql, (self.value,)).fetchone()[0])
        finally:
            conn.close()


@dataclass
class Made:
    """One session a builder made: its artifacts, and the report's view of it."""

    agent: str
    id: str
    when: int  # its last activity, every time in it (POSIX seconds)
    paths: list[str]  # the removed entry's `paths`, in removal order
    files: list[Path]  # every file-system artifact (trees included)
    rows: list[Row] = field(default_factory=list)  # rows a removal deletes
    left_rows: list[Row] = field(default_factory=list)  # rows left, reported residual
    residual: list[str] = field(default_factory=list)
    shared: list[Path] = field(default_factory=list)  # names it, never touched
    holder_arg: str = ""  # what a live agent's command line names
    live_detail: str = "command line names the session"
    bytes: int = 0

    def __post_init__(self) -> None:
        self.holder_arg = self.holder_arg or self.id
        self.bytes = file_bytes(self.files)

    def removed(self, why: str = "age") -> dict[str, Any]:
        return {
            "agent": self.agent,
            "id": self.id,
            "bytes": self.bytes,
            "last_activity": rfc3339(self.when),
            "why": why,
            "paths": self.paths,
        }

    def residual_entries(self) -> list[dict[str, str]]:
        return [{"agent": self.agent, "id": self.id, "path": p} for p in self.residual]

    def kept(self, reason: str, detail: str) -> dict[str, str]:
        return {"agent": self.agent, "id": self.id, "reason": reason, "detail": detail}

    def state(self) -> dict[str, Any]:
        """Everything of it that must not change while it stays."""
        found: dict[str, Any] = {}
        for path in self.files:
            found.update(tree_state(path))
        for row in [*self.rows, *self.left_rows]:
            found[f"{row.db}#{row.table}"] = row.count()
        return found

    def gone(self) -> list[str]:
        """What is left of it that a removal must have taken (empty when whole gone)."""
        left = [str(p) for p in self.files if os.path.lexists(p)]
        return left + [f"{r.db}#{r.table}" for r in self.rows if r.count()]


def ago(days: float) -> int:
    return int(time.time() - days * DAY)


def below(path: Path) -> list[str]:
    """`path` and everything below it, never through a link."""
    if os.path.islink(path):
        return [str(path)]
    found = [str(path)]
    for dirpath, dirnames, filenames in os.walk(path):
        found += [os.path.join(dirpath, n) for n in [*dirnames, *filenames]]
    return found


def stamp(when: float, *paths: Path) -> None:
    """Set the mtime (and atime) of each path and everything below it to
    exactly `when`."""
    for path in paths:
        for p in below(path):
            os.utime(p, (when, when), follow_symlinks=False)


def file_bytes(paths: Iterable[Path]) -> int:
    """st_size of every non-directory under `paths`, each inode once (the
    contract's `bytes`)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in paths:
        for p in below(path):
            st = os.lstat(p)
            if not stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def hashes(paths: Iterable[Path]) -> set[str]:
    """The content hash of every regular file under `paths`."""
    return {
        hashlib.sha256(Path(p).read_bytes()).hexdigest()
        for path in paths
        for p in below(path)
        if stat.S_ISREG(os.lstat(p).st_mode)
    }


def kept(entry: Path) -> set[str]:
    """The content hash of every file a trash entry keeps, packed or not."""
    return {hashlib.sha256(data).hexdigest() for data in kept_files(entry).values()}


def shared_state(made: Iterable[Made]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for m in made:
        for path in m.shared:
            found.update(tree_state(path))
    return found


@dataclass
class Bad:
    """Malformed input a builder made: what must stay byte-identical, the
    rows that must stay, what the report must keep or remove, and the log
    events that must be written."""

    untouched: list[Path]
    events: list[str]
    rows: list[Row] = field(default_factory=list)
    kept: list[dict[str, str]] = field(default_factory=list)
    removed: list[Made] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for path in self.untouched:
            found.update(tree_state(path))
        found.update({f"{r.db}#{r.table}#{r.value}": r.count() for r in self.rows})
        return found


# -- one builder per agent ---------------------------------------------------------


class Builder:
    """Lays out sessions of one agent in a fake user, as the agent does."""

    name: str
    agent: str
    lineage = False
    binary: str | None = None

    def setup(self, fh: FakeHome, trash_for: str = "0") -> None:
        fh.write_config(f'trash = "{trash_for}"\n' + self.config(fh))
        # A real codex or opencode on this machine is never run by a test.
        for binary in ("codex", "opencode"):
            fh.environ["PATH"] = without(fh, binary)
        if self.binary == "codex":
            install_fake_codex(fh)
        elif self.binary == "opencode":
            install_fake_opencode(fh)

    def config(self, fh: FakeHome) -> str:
        return ""

    def agents(self) -> set[str]:
        return set(AGENTS)

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        raise NotImplementedError

    def malformed(self, fh: FakeHome) -> Bad:
        raise NotImplementedError

    def database(self, fh: FakeHome) -> Path:
        raise NotImplementedError

    def unreadable(self, fh: FakeHome) -> tuple[Made, Path, str]:
        """An old session and a database of the agent's that cannot be read:
        the session, the database, and the event logged about it."""
        raise NotImplementedError

    def binary_calls(self, removed: list[str]) -> list[list[str]]:
        return []

    def __repr__(self) -> str:
        return self.name


def _key(table: str) -> str:
    """The column naming the session in a Codex table (a spawn edge: the child's)."""
    return {"threads": "id", "thread_spawn_edges": "child_thread_id"}.get(table, "thread_id")


class Codex(Builder):
    agent = "codex"
    lineage = True

    def __init__(self, binary: bool) -> None:
        self.binary = "codex" if binary else None
        self.name = "codex+bin" if binary else "codex"

    @staticmethod
    def tree(fh: FakeHome) -> CodexTree:
        fh.codex.mkdir(parents=True, exist_ok=True)
        return CodexTree(fh.codex)

    def database(self, fh: FakeHome) -> Path:
        return self.tree(fh).state_db

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        """Odd variants are .jsonl.zst rollouts; a parent is named by the
        rollout's forked_from_id, its subagent spawn, or a spawn edge only.
        Every session has a row in every table of the six databases."""
        tree, sid, when = self.tree(fh), codex_id(), ago(days)
        via = ("row", "forked", "spawned")[variant % 3] if parent else None
        rollout = tree.rollout(
            sid,
            zst=variant % 2 == 1,
            forked_from=parent if via == "forked" else None,
            spawned_by=parent if via == "spawned" else None,
            mtime=when,
        )
        tree.thread(sid, rollout=rollout, updated_at=when, parent=parent if via == "row" else None)
        tree.items(sid)
        others = tree.rows(sid, [t for t in ROWS if t != "thread_items"])
        others.append(f"{tree.history_db}#thread_items")
        if via == "row":
            others.append(f"{tree.state_db}#thread_spawn_edges")
        tree.index_entry(sid)
        tui = tree.tui_reference(sid)
        stamp(when, tui)
        threads = Row(tree.state_db, "threads", "id", sid)
        rows = [threads] + [
            Row(Path(db), table, _key(table), sid)
            for db, _, table in (r.partition("#") for r in others)
        ]
        if self.binary:
            # The rollout into the trash, then `codex delete --force` takes
            # every row and the index line; the TUI reference it leaves is
            # removed here.
            return Made(
                self.agent,
                sid,
                when,
                paths=[str(rollout), f"codex delete --force {sid}", str(tui)],
                files=[rollout, tui],
                rows=rows,
            )
        return Made(
            self.agent,
            sid,
            when,
            paths=[f"{tree.state_db}#threads", str(rollout), str(tui), *sorted(others)],
            files=[rollout, tui],
            rows=rows,
            residual=[str(tree.index)],
            shared=[tree.index],
        )

    def binary_calls(self, removed: list[str]) -> list[list[str]]:
        if not self.binary:
            return []
        return [call for sid in removed for call in (["--version"], ["delete", "--force", sid])]

    def malformed(self, fh: FakeHome) -> Bad:
        tree, when = self.tree(fh), ago(40)
        day = tree.root / "sessions" / "2026" / "01" / "05"
        not_an_id = write(
            day / "rollout-2026-01-05T09-30-00-zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz.jsonl",
            '{"type": "session_meta"}\n',
        )
        # A rollout cut in its first line: the id is in its name, so it is
        # still this session's (only its parent and workspace are unknown).
        cut_id = codex_id()
        cut = tree.rollout(cut_id, first_line='{"type": "session_meta", "payload": {"id": "')
        stamp(when, not_an_id, cut)
        walking = ["../../etc/passwd", f"{codex_id()}/../x"]
        for sid in walking:
            tree.thread(sid, updated_at=when)
        tree.items("../x")
        with tree.index.open("a") as f:
            f.write('{"id": "')  # a last line cut short
        odd_tui = write(tree.root / "tui-thread-reference-capabilities" / "..hidden", "{}")
        return Bad(
            untouched=[not_an_id, tree.index, odd_tui],
            events=[
                "rollout name without a session id; skipped",
                "rollout first line is not JSON; parent and workspace unknown",
                "threads row id is not a canonical UUID; skipped",
            ],
            rows=[Row(tree.state_db, "threads", "id", s) for s in walking]
            + [Row(tree.history_db, "thread_items", "thread_id", "../x")],
            removed=[Made(self.agent, cut_id, when, paths=[str(cut)], files=[cut])],
        )

    def unreadable(self, fh: FakeHome) -> tuple[Made, Path, str]:
        s = self.make(fh, days=40)
        garbage = write(self.tree(fh).root / "state_6.sqlite", GARBAGE)
        return s, garbage, "state database unreadable; codex sessions undated"


class Opencode(Builder):
    agent = "opencode"
    lineage = True

    def __init__(self, *, db: bool, binary: bool) -> None:
        self.db = db
        self.binary = "opencode" if binary else None
        self.name = "opencode" + ("+bin" if binary else "" if db else "-json")

    @staticmethod
    def tree(fh: FakeHome) -> OpencodeTree:
        data = fh.data / "opencode"
        data.mkdir(parents=True, exist_ok=True)
        return OpencodeTree(data)

    def database(self, fh: FakeHome) -> Path:
        return self.tree(fh).db

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        """The 1.x JSON storage (the part dirs go before the message dir
        that names them), and with `db` the rows of every table and a
        truncated tool output (which goes before the part rows pointing at
        it)."""
        tree, sid, when = self.tree(fh), opencode_id(), ago(days)
        info = tree.session_json(sid, parent=parent, updated_ms=when * 1000)
        messages, *parts = tree.messages_json(sid)
        files = [info, *sorted(parts), messages, *tree.extras_json(sid)]
        stamp(when, *files)
        if not self.db:
            return Made(self.agent, sid, when, paths=[str(p) for p in files], files=files)
        tree.session_rows(sid, parent=parent, updated_ms=when * 1000)
        output = tree.tool_output(sid)
        stamp(when, output)
        rows = [Row(tree.db, t, _OPENCODE_KEYS.get(t, "session_id"), sid) for t in OPENCODE_TABLES]
        if self.binary:
            # The tool output before `opencode session delete`, which takes
            # the 2.x rows; the legacy rows and the files are ours.
            paths = [str(output)]
            paths += [f"{tree.db}#{t}" for t in OPENCODE_TABLES if t not in OPENCODE_LEGACY]
            paths += [f"{tree.db}#{t}" for t in OPENCODE_LEGACY]
        else:
            paths = [f"{tree.db}#{t}" for t in OPENCODE_TABLES if t != "part"]
            paths += [str(output), f"{tree.db}#part"]
        paths += [str(p) for p in files]
        return Made(self.agent, sid, when, paths=paths, files=[*files, output], rows=rows)

    def binary_calls(self, removed: list[str]) -> list[list[str]]:
        if not self.binary:
            return []
        return [c for sid in removed for c in (["debug", "paths"], ["session", "delete", sid])]

    def malformed(self, fh: FakeHome) -> Bad:
        tree, when = self.tree(fh), ago(40)
        cut_id, other_id = opencode_id(), opencode_id()
        cut = tree.session_json(cut_id, raw='{"id": "' + cut_id + '", "time": {"upd')
        cut_messages = tree.messages_json(cut_id)
        naming_other = {"id": opencode_id(), "time": {"updated": when * 1000}}
        other = tree.session_json(other_id, raw=json.dumps(naming_other))
        sessions = tree.storage / "session" / "global"
        no_ids = [
            write(sessions / name, json.dumps({"id": "x"})) for name in ("..json", "a..b.json")
        ]
        odd_messages = write(tree.storage / "message" / "bad..id" / "msg_x.json", "{}")
        stamp(when, cut, *cut_messages, other, *no_ids, odd_messages.parent)
        conn = sqlite3.connect(tree.db)
        with conn:
            conn.execute(
                "INSERT INTO session (id, project_id, slug, directory, title, version,"
                " time_created, time_updated) VALUES (?, 'global', 's', '/', 't', '1', 1, ?)",
                ("../../x", when * 1000),
            )
        conn.close()
        return Bad(
            untouched=[cut, *cut_messages, other, *no_ids, odd_messages.parent],
            events=[
                "session file is not JSON (truncated?); undated",
                "session file names another session; undated",
                "session file name is not a session id; skipped",
                "session row id is not a session id; skipped",
            ],
            rows=[Row(tree.db, "session", "id", "../../x")],
            kept=[
                {"agent": self.agent, "id": sid, "reason": "undated", "detail": UNDATED}
                for sid in (cut_id, other_id)
            ],
        )

    def unreadable(self, fh: FakeHome) -> tuple[Made, Path, str]:
        # Its rows would be in the database: the session is the JSON storage.
        s = OPENCODE_JSON.make(fh, days=40)
        db = write(self.tree(fh).db, GARBAGE)
        return s, db, "opencode database unreadable; opencode sessions undated"


class Gemini(Builder):
    name = agent = "gemini"

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        """Odd variants have a legacy .json chat instead of .jsonl."""
        sid, when = str(uuid.uuid4()), ago(days)
        fmt = "json" if variant % 2 else "jsonl"
        s = make_gemini_session(gemini_root(fh.home), sid, fmt=fmt, days=days)
        stamp(when, *s.artifacts)
        return Made(
            self.agent,
            sid,
            when,
            paths=[str(p) for p in s.artifacts],
            files=s.artifacts,
            shared=[*s.shared, s.project / ".project_root"],
        )

    def malformed(self, fh: FakeHome) -> Bad:
        root, when = gemini_root(fh.home), ago(40)
        project = root / "tmp" / "proj"
        chats = project / "chats"
        bad_chats = [
            write(chats / "session-2026-01-02T04-01-cut.json", '{"projectHash": "00'),
            write(chats / "session-2026-01-02T04-02-up.jsonl", '{"sessionId": "../../evil"}\n'),
            write(chats / "session-2026-01-02T04-03-sl.json", '{"sessionId": "a/b"}'),
        ]
        dirs = [
            write(project / "not..a-session" / "x.txt", "x").parent,
            write(project / "scratch" / "notes.md", "x").parent,
        ]
        undated = make_gemini_session(root, str(uuid.uuid4()), last_updated="the other day")
        stamp(when, *bad_chats, *dirs, *undated.artifacts)
        return Bad(
            untouched=[*bad_chats, *dirs, *undated.artifacts],
            events=[
                "skipped a chat without a valid sessionId",
                "unreadable lastUpdated: the session is undated",
                "skipped a dir that no session names",
            ],
            kept=[{"agent": self.agent, "id": undated.id, "reason": "undated", "detail": UNDATED}],
        )


class Grok(Builder):
    name = agent = "grok"

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        sid, when = f"g-{secrets.token_hex(4)}", ago(days)
        s = make_grok_session(grok_root(fh.home), sid)
        stamp(when, s.dir)
        # Memory observations are the user's: reported, never removed.
        return Made(
            self.agent,
            sid,
            when,
            paths=[str(s.chat), str(s.dir / "state.json"), str(s.dir)],
            files=[s.dir],
            residual=[str(n) for n in s.memory],
            shared=s.memory,
        )

    def malformed(self, fh: FakeHome) -> Bad:
        root, when = grok_root(fh.home), ago(40)
        workspace = root / "sessions" / urllib.parse.quote("/work/proj", safe="")
        not_an_id = write(workspace / "a..b" / "chat_history.jsonl", '{"session_id": "a..b"}\n')
        stray = write(root / "sessions" / "stray.txt", "x")
        other = make_grok_session(root, f"g-{secrets.token_hex(4)}", named="someone-else")
        # A chat cut in its first record names nothing: the directory is the session.
        cut = self.make(fh, days=40)
        write(Path(cut.paths[0]), '{"session_id": "')
        stamp(cut.when, *cut.files)
        cut.bytes = file_bytes(cut.files)
        inbox = root / "memory-v2" / "workspaces" / "w1" / "observations" / "_inbox"
        odd_note = write(inbox / "..__x.md", "x")
        stamp(when, not_an_id.parent, stray, other.dir, odd_note)
        return Bad(
            untouched=[not_an_id.parent, stray, other.dir, odd_note, *other.memory],
            events=[
                "skipped: not a grok session id",
                "skipped: not a workspace directory",
                "chat history names another session",
                "malformed first record in chat history",
            ],
            kept=[{"agent": self.agent, "id": other.id, "reason": "undated", "detail": UNDATED}],
            removed=[cut],
        )


class Zero(Builder):
    name = agent = "zero"
    lineage = True

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        sid, when = f"z-{secrets.token_hex(4)}", ago(days)
        z = make_zero_session(zero_root(fh.data), sid, parent=parent, updated_at=when * 1000)
        stamp(when, z.dir)
        # metadata.json, what zero lists the session by, goes first.
        names = ["metadata.json", "checkpoints", "events.jsonl", "lease.lock", "session.lock"]
        paths = [str(z.dir / n) for n in names] + [str(z.dir)]
        return Made(self.agent, sid, when, paths=paths, files=[z.dir])

    def malformed(self, fh: FakeHome) -> Bad:
        root, when = zero_root(fh.data), ago(40)
        not_ids = [make_zero_session(root, name).dir for name in ("a..b", ".hidden")]
        cut = make_zero_session(root, "z-cut", metadata='{"sessionId": "z-c')
        other = make_zero_session(root, "z-other", metadata=json.dumps({"sessionId": "../z-x"}))
        stray = write(root / "z-file", "x")
        bad_parent = self.make(fh, days=40, parent="../../x")
        stamp(when, *not_ids, cut.dir, other.dir, stray)
        return Bad(
            untouched=[*not_ids, cut.dir, other.dir, stray],
            events=[
                "skipped: not a zero session id",
                "malformed metadata",
                "metadata names another session",
                "skipped: not a session directory",
                "ignored an invalid parentSessionId",
            ],
            kept=[
                {"agent": self.agent, "id": sid, "reason": "undated", "detail": UNDATED}
                for sid in ("z-cut", "z-other")
            ],
            removed=[bad_parent],
        )


class Copilot(Builder):
    name = agent = "copilot"
    lineage = True

    @staticmethod
    def tree(fh: FakeHome) -> CopilotTree:
        env = fh.environ
        legacy = Path(env["XDG_STATE_HOME"]) / ".copilot"
        return CopilotTree(Path(env["COPILOT_HOME"]), Path(env["TMPDIR"]), legacy)

    def database(self, fh: FakeHome) -> Path:
        return self.tree(fh).db

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        """Even variants have a tool output their events name; odd ones are
        a crash's, a stale `inuse` pair of a dead pid whose tool output is
        named nowhere. A child is a fork of `parent`. Every session has a row
        in every table, and is named by its process's log, the sidebar and
        the open sessions (shared: reported, never touched)."""
        tree, when = self.tree(fh), ago(days)
        if parent is not None:
            # The parent's own fork event would change it after its Made was
            # taken (the adapter's tests have it).
            s = tree.fork(parent, when=when, tell_parent=False)
        else:
            crash = variant % 2 == 1
            s = tree.session(
                when=when, outputs=0 if crash else 1, inuse=DEAD_PID if crash else None
            )
        assert s.dir is not None and s.oplock is not None
        shared = tree.shared(s, when=when)
        entries = sorted(p.name for p in s.dir.iterdir())
        paths = [str(s.events)] + [str(s.dir / n) for n in entries if n != "events.jsonl"]
        paths += [str(s.dir), str(s.oplock), *map(str, s.outputs)]
        paths += [f"{tree.db}#{t}" for t in ROW_TABLES]
        rows = [
            Row(tree.db, t, "id" if t == "sessions" else "session_id", s.id) for t in ROW_TABLES
        ]
        return Made(
            self.agent,
            s.id,
            when,
            paths=paths,
            files=s.files(),
            rows=rows,
            residual=[str(p) for p in shared],
            shared=shared,
        )

    def malformed(self, fh: FakeHome) -> Bad:
        tree, when = self.tree(fh), ago(40)
        garbled = tree.session(when=when, events=["{not json", '{"type":"user.message"}'])
        other = tree.session(when=ago(1))
        assert other.events is not None
        liar = tree.session(when=when, events=other.events.read_text().splitlines())
        cut = self.make(fh, days=40)
        with open(cut.paths[0], "a") as f:
            f.write('{"type":"assistant.message","data":{"content":"He')  # a crash mid-line
        stamp(cut.when, *cut.files)
        cut.bytes = file_bytes(cut.files)
        not_an_id = write(tree.state / "not-a-session" / "events.jsonl", "{}\n")
        stray = write(tree.state / "stray.txt", "x")
        conn = tree.database()
        with conn:
            conn.execute("INSERT INTO sessions (id, updated_at) VALUES ('../x', ?)", ("2020",))
        conn.close()
        undated = [garbled, liar]
        stamp(when, not_an_id.parent, stray)
        return Bad(
            untouched=[p for s in undated for p in s.files()] + [not_an_id.parent, stray],
            events=[
                "malformed first event; the session is undated",
                "events name another session; undated",
                "skipped: not a copilot session dir",
                "sessions row id is not a session id; skipped",
            ],
            rows=[Row(tree.db, "sessions", "id", s) for s in ("../x", garbled.id, liar.id)],
            kept=[
                {"agent": self.agent, "id": s.id, "reason": "undated", "detail": UNDATED}
                for s in undated
            ],
            removed=[cut],
        )


class Store(Builder):
    """A `[[stores]]` store from the user's config, sessions two levels deep."""

    name = "store"
    agent = STORE

    @staticmethod
    def root(fh: FakeHome) -> Path:
        return fh.home / "stores" / STORE

    def config(self, fh: FakeHome) -> str:
        return f'\n[[stores]]\nname = "{STORE}"\nroot = "~/stores/{STORE}"\ndepth = 2\n'

    def agents(self) -> set[str]:
        return {*AGENTS, STORE}

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        sid, when = f"issue-{secrets.token_hex(3)}/run-1", ago(days)
        directory = make_store_session(self.root(fh), sid)
        stamp(when, directory)
        return Made(
            self.agent,
            sid,
            when,
            paths=[str(directory)],
            files=[directory],
            holder_arg=str(directory),
            live_detail="command line names the store dir",
        )

    def malformed(self, fh: FakeHome) -> Bad:
        root, when = self.root(fh), ago(40)
        stray = write(root / "a" / "stray.txt", "x")
        outside = write(fh.root / "outside" / "x" / "y.txt", "not the store's").parent.parent
        behind = write(fh.root / "outside2" / "z.txt", "not the store's either").parent
        linked_level = root / "linked"
        linked_level.symlink_to(outside)
        (root / "b").mkdir()
        linked_session = root / "b" / "lnk"
        linked_session.symlink_to(behind)
        stamp(when, stray, outside, behind, linked_level, linked_session)
        detail = f"{linked_session} lies behind a link or on an unsafe root"
        return Bad(
            untouched=[stray, outside, behind, linked_level, linked_session],
            events=[
                "skipped a linked directory in a store",
                "store session is a link: kept, never removed",
            ],
            kept=[{"agent": self.agent, "id": "b/lnk", "reason": "unsafe", "detail": detail}],
        )


class Qwen(Builder):
    name = agent = "qwen"
    lineage = True

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        """A session of a workspace of its own (a project's meta.json and
        extract-cursor.json name its last session only), with a truncated
        output; odd variants have a subagent, the sidecars, file history,
        plan and debug log too. A parent is named by `forkedFrom`."""
        tree, when = QwenTree(fh.home / ".qwen"), ago(days)
        cwd = f"/work/q-{secrets.token_hex(4)}"
        extra = variant % 2 == 1
        q = tree.session(cwd, forked_from=parent, output=True, subagent=extra, extras=extra)
        outputs = set(q.outputs)
        ordered = [q.chat, *sorted(set(q.artifacts) - {q.chat} - outputs, key=str), *q.outputs]
        stamp(when, *q.artifacts)
        return Made(
            self.agent,
            q.id,
            when,
            paths=[str(p) for p in ordered],
            files=q.artifacts,
            residual=[str(p) for p in q.naming()],
            shared=q.shared,
        )

    def malformed(self, fh: FakeHome) -> Bad:
        tree, when = QwenTree(fh.home / ".qwen"), ago(40)
        chats = tree.project("/work/bad") / "chats"
        not_an_id = write(chats / "not-an-id.jsonl", '{"sessionId": "not-an-id"}\n')
        registry = write(tree.home / "sessions" / "4242.json", '{"sessionId": "')
        # A chat cut in its first record: the name says whose it is; its
        # workspace is unknown, and so is the output it no longer names.
        cut = self.make(fh, days=40)
        orphan = Path(cut.paths[-1])
        Path(cut.paths[0]).write_text('{"sessionId": "')
        cut.paths, cut.files = cut.paths[:1], cut.files[:1]
        stamp(cut.when, *cut.files)
        cut.bytes = file_bytes(cut.files)
        stamp(when, not_an_id, registry)
        return Bad(
            untouched=[not_an_id, orphan, registry],
            events=["skipped: not a qwen session file", "registry file names no session"],
            removed=[cut],
        )


class Pi(Builder):
    name = agent = "pi"
    lineage = True

    def make(
        self, fh: FakeHome, *, days: float, parent: str | None = None, variant: int = 0
    ) -> Made:
        """A session file with a bash log; a parent is named by the path of
        its file (the builder finds it by id)."""
        tree = PiTree(fh.home / ".pi" / "agent" / "sessions", Path(fh.environ["TMPDIR"]))
        of = None
        if parent is not None:
            [found] = tree.root.rglob(f"*_{parent}.jsonl")
            of = PiSession(parent, "", found)
        s = tree.session(f"/work/p{variant}", days=days, parent=of, log=True)
        when = ago(days)
        stamp(when, *s.artifacts)
        return Made(self.agent, s.id, when, paths=[str(p) for p in s.artifacts], files=s.artifacts)

    def malformed(self, fh: FakeHome) -> Bad:
        tree = PiTree(fh.home / ".pi" / "agent" / "sessions", Path(fh.environ["TMPDIR"]))
        when = ago(40)
        cut = tree.session("/work/bad", days=40, header='{"type": "session", "id": "01')
        stray = write(tree.directory("/work/bad") / "notes.jsonl", "{}\n")
        stamp(when, cut.file, stray)
        return Bad(
            untouched=[cut.file, stray],
            events=["malformed session header", "skipped: not a pi session file"],
            kept=[{"agent": self.agent, "id": cut.id, "reason": "undated", "detail": UNDATED}],
        )


CODEX, CODEX_BIN = Codex(binary=False), Codex(binary=True)
OPENCODE = Opencode(db=True, binary=False)
OPENCODE_JSON = Opencode(db=False, binary=False)
OPENCODE_BIN = Opencode(db=True, binary=True)
GEMINI, GROK, ZERO, STORES = Gemini(), Grok(), Zero(), Store()
COPILOT, QWEN, PI = Copilot(), Qwen(), Pi()
BUILDERS = [
    CODEX,
    CODEX_BIN,
    OPENCODE,
    OPENCODE_JSON,
    OPENCODE_BIN,
    GEMINI,
    GROK,
    ZERO,
    COPILOT,
    QWEN,
    PI,
    STORES,
]
LINEAGE = [b for b in BUILDERS if b.lineage]
MALFORMED = [CODEX, OPENCODE, GEMINI, GROK, ZERO, COPILOT, QWEN, PI, STORES]


# -- running the real CLI --------------------------------------------------------


@dataclass
class Run:
    code: int
    doc: dict[str, Any]
    stderr: str
    started: float
    finished: float

    def events(self) -> list[str]:
        """The `event` of every JSON log line on stderr."""
        found = []
        for line in self.stderr.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                found.append(str(record.get("event")))
        return found


def prune(fh: FakeHome, **env: str) -> Run:
    started = time.time()
    proc = fh.cli("prune", "--older-than", "30d", "--json", env={**fh.environ, **env})
    finished = time.time()
    # A crash prints its traceback outside the JSON log lines.
    crash = [line for line in proc.stderr.splitlines() if line.startswith("Traceback")]
    assert crash == [], proc.stderr
    return Run(proc.returncode, report_of(proc), proc.stderr, started, finished)


def check_cutoffs(run: Run, agents: set[str]) -> None:
    """The report's frame: its keys, no dry run, one cutoff exactly 30 days
    before the run for every agent considered."""
    doc = run.doc
    assert set(doc) == REPORT_KEYS and doc["dry_run"] is False
    cutoff = parse_rfc3339(doc["cutoff"])
    assert int(run.started - 30 * DAY) - 1 <= cutoff <= run.finished - 30 * DAY
    assert doc["cutoffs"] == {agent: doc["cutoff"] for agent in agents}


def by_id(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entries, key=lambda e: (e["id"], e.get("path", "")))


def live_agent(fh: FakeHome, procs: Processes, made: Made) -> int:
    """A stand-in agent whose command line names the session; its pid once
    agentkeep's process table can see it."""
    proc = procs.start([sys.executable, "-c", SLEEPER, made.holder_arg], fh.environ)

    def named() -> bool:
        seen = ProcessTable.snapshot().alive(proc.pid)
        return seen is not None and made.holder_arg in seen.cmdline

    wait_until(named, "the live agent showing in the process table")
    return proc.pid


def binary_log(fh: FakeHome, b: Builder) -> list[list[str]]:
    return calls(fh.root / "bin" / f"{b.binary}.calls") if b.binary else []


# -- old, recent and live, and residual ------------------------------------------


@pytest.mark.parametrize("b", BUILDERS, ids=repr)
def test_an_old_idle_session_goes_whole_a_recent_one_is_untouched_a_live_one_kept(
    fake_home: FakeHome, processes: Processes, b: Builder
) -> None:
    b.setup(fake_home)
    old = [b.make(fake_home, days=40 + v, variant=v) for v in (0, 1)]
    recent = b.make(fake_home, days=2)
    live = b.make(fake_home, days=45)
    pid = live_agent(fake_home, processes, live)
    stays = {s.id: s.state() for s in (recent, live)}
    shared = shared_state([*old, recent, live])
    left = [row.count() for s in old for row in s.left_rows]

    run = prune(fake_home)

    assert run.code == 0, run.stderr
    check_cutoffs(run, b.agents())
    assert by_id(run.doc["removed"]) == by_id(s.removed() for s in old)
    assert run.doc["kept"] == [live.kept("live", f"pid {pid} ({live.live_detail})")]
    assert run.doc["failed"] == []
    assert by_id(run.doc["residual"]) == by_id(e for s in old for e in s.residual_entries())
    assert [s.gone() for s in old] == [[], []], "every artifact and row is gone"
    assert [row.count() for s in old for row in s.left_rows] == left, "residual rows stay"
    assert {s.id: s.state() for s in (recent, live)} == stays
    assert shared_state([*old, recent, live]) == shared, "shared files are never touched"
    assert binary_log(fake_home, b) == b.binary_calls([r["id"] for r in run.doc["removed"]])


@pytest.mark.parametrize("b", BUILDERS, ids=repr)
def test_a_second_prune_finds_nothing_left_of_what_the_first_removed(
    fake_home: FakeHome, b: Builder
) -> None:
    b.setup(fake_home)
    s = b.make(fake_home, days=40)
    assert prune(fake_home).doc["removed"] == [s.removed()]

    again = prune(fake_home)

    assert again.code == 0, again.stderr
    assert [again.doc[k] for k in ("removed", "kept", "failed", "residual")] == [[], [], [], []]
    listed = fake_home.cli("ls", "--json", check=True)
    assert [r["id"] for r in json.loads(listed.stdout)] == []


# -- parents and children ----------------------------------------------------------


@pytest.mark.parametrize("b", LINEAGE, ids=repr)
def test_ancestors_of_a_kept_child_stay_and_old_chains_go_children_first(
    fake_home: FakeHome, processes: Processes, b: Builder
) -> None:
    b.setup(fake_home)
    # An old chain three deep: every one goes, the deepest first.
    chain = [b.make(fake_home, days=60)]
    for depth in (1, 2, 3):
        chain.append(b.make(fake_home, days=60 - 5 * depth, parent=chain[-1].id, variant=depth))
    # An old chain whose old leaf is live, and an old parent of a recent child.
    root2 = b.make(fake_home, days=50)
    mid2 = b.make(fake_home, days=45, parent=root2.id, variant=1)
    leaf2 = b.make(fake_home, days=40, parent=mid2.id, variant=2)
    root3 = b.make(fake_home, days=50)
    child3 = b.make(fake_home, days=2, parent=root3.id, variant=1)
    staying = [root2, mid2, leaf2, root3, child3]
    pid = live_agent(fake_home, processes, leaf2)
    before = {s.id: s.state() for s in staying}

    run = prune(fake_home)

    assert run.code == 0, run.stderr
    assert run.doc["removed"] == [s.removed() for s in reversed(chain)], "children first"
    assert by_id(run.doc["kept"]) == by_id(
        [
            leaf2.kept("live", f"pid {pid} ({leaf2.live_detail})"),
            mid2.kept("ancestor", f"parent of {leaf2.id}"),
            root2.kept("ancestor", f"parent of {leaf2.id}"),
            root3.kept("ancestor", f"parent of {child3.id}"),
        ]
    )
    assert run.doc["failed"] == []
    assert by_id(run.doc["residual"]) == by_id(e for s in chain for e in s.residual_entries())
    assert [s.gone() for s in chain] == [[]] * 4
    assert {s.id: s.state() for s in staying} == before
    assert binary_log(fake_home, b) == b.binary_calls([s.id for s in reversed(chain)])


@pytest.mark.parametrize("variant", [0, 2], ids=["spawn-edge", "spawned"])
@pytest.mark.parametrize("b", LINEAGE, ids=repr)
def test_a_dry_run_takes_the_children_it_would_remove_as_gone(
    fake_home: FakeHome, b: Builder, variant: int
) -> None:
    """An old parent and its old child: the real prune removes the child,
    then the parent. The dry run must say the same, not fail the parent
    because its child is still on disk (it would be gone by then); it
    changes nothing, not even the agent's binary is run."""
    b.setup(fake_home)
    parent = b.make(fake_home, days=60)
    child = b.make(fake_home, days=55, parent=parent.id, variant=variant)
    before = {s.id: s.state() for s in (parent, child)}
    proc = fake_home.cli("prune", "--older-than", "30d", "--dry-run", "--json")
    dry = report_of(proc)
    assert proc.returncode == 0 and dry["failed"] == [], dry
    assert [r["id"] for r in dry["removed"]] == [child.id, parent.id]
    assert {s.id: s.state() for s in (parent, child)} == before
    assert binary_log(fake_home, b) == []
    real = prune(fake_home)
    assert real.code == 0 and [r["id"] for r in real.doc["removed"]] == [child.id, parent.id]


# -- a database another process holds open for writing ------------------------------


def write_locked(db: Path) -> bool:
    """Whether another connection holds the database's write lock."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        return "locked" in str(exc)
    else:
        conn.execute("ROLLBACK")
        return False
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("b", "holder_args", "outcome"),
    [
        pytest.param(CODEX, (), "failed", id="codex"),
        pytest.param(
            CODEX_BIN,
            (),
            "failed",
            id="codex+bin",
        ),
        # A process of opencode's own with the database open is using it ...
        pytest.param(OPENCODE, (), "live", id="opencode"),
        # ... the per-user service is not, but nothing is written under it.
        pytest.param(OPENCODE, ("serve", "--service"), "failed", id="opencode-service"),
        pytest.param(OPENCODE_BIN, ("serve", "--service"), "failed", id="opencode+bin-service"),
    ],
)
def test_a_database_held_for_writing_leaves_the_session_kept_or_failed_never_half_removed(
    fake_home: FakeHome,
    processes: Processes,
    b: Builder,
    holder_args: tuple[str, ...],
    outcome: str | None,
) -> None:
    b.setup(fake_home)
    s = b.make(fake_home, days=40)
    db = b.database(fake_home)
    holder = processes.start(
        [sys.executable, "-c", HOLD_WRITE_LOCK, str(db), *holder_args], fake_home.environ
    )
    wait_until(lambda: write_locked(db), "the holder taking the database's write lock")
    before = s.state()

    run = prune(fake_home)

    assert s.state() == before, "the session is whole"
    assert run.doc["removed"] == []
    assert [e["id"] for e in run.doc["kept"] + run.doc["failed"]] == [s.id]
    if outcome == "failed":
        reason = f"RemovalError: database {db} in use by pid {holder.pid}"
        assert (run.code, run.doc["failed"]) == (
            1,
            [{"agent": b.agent, "id": s.id, "reason": reason}],
        )
    elif outcome == "live":
        detail = f"pid {holder.pid} (has opencode.db open)"
        assert (run.code, run.doc["kept"]) == (0, [s.kept("live", detail)])
    # opencode asks its binary where its data is first; codex is refused
    # before its binary is run at all (it would remove the rollout first).
    asked = [["debug", "paths"]] if b.binary and b.agent == "opencode" else []
    assert binary_log(fake_home, b) == asked

    kill_group(holder)
    after = prune(fake_home)

    assert (after.code, after.doc["removed"], after.doc["failed"]) == (0, [s.removed()], [])
    assert s.gone() == []


# -- opencode's data home outside the home ------------------------------------------


def data_home_elsewhere(fh: FakeHome) -> Path:
    """XDG_DATA_HOME on a directory of the user's outside the home, as on a
    machine with a data disk: opencode follows it there."""
    data = fh.root / "data-disk"
    data.mkdir(mode=0o700)
    fh.environ["XDG_DATA_HOME"] = str(data)
    assert not data.is_relative_to(fh.home), "SETUP INVALID: the data home is in the home"
    return data


def test_opencode_with_a_data_home_outside_the_home_is_found_and_pruned(
    fake_home: FakeHome,
) -> None:
    data = data_home_elsewhere(fake_home)
    OPENCODE.setup(fake_home)
    old, recent = OPENCODE.make(fake_home, days=40), OPENCODE.make(fake_home, days=2)
    assert old.files[0].is_relative_to(data), "SETUP INVALID: the session is not there"
    stays = recent.state()

    run = prune(fake_home)

    assert run.code == 0, run.stderr
    assert run.doc["removed"] == [old.removed()]
    assert [run.doc[k] for k in ("kept", "failed", "residual")] == [[], [], []]
    assert old.gone() == []
    assert recent.state() == stays


@pytest.mark.parametrize("whose", ["another user's", "world-writable", "in a world-writable dir"])
def test_opencode_with_a_data_home_others_can_write_to_is_never_removed(
    fake_home: FakeHome, whose: str
) -> None:
    """The contract's root rule: a root another user owns or can write to
    (so could have planted) is used only to report; nothing on it goes."""
    if whose == "another user's" and os.geteuid() != 0:
        pytest.skip("making a directory another user's needs root")
    data = data_home_elsewhere(fake_home)
    OPENCODE.setup(fake_home)
    old = OPENCODE.make(fake_home, days=40)
    root = data / "opencode"
    if whose == "another user's":
        os.chown(root, 65534, 65534)
    elif whose == "world-writable":
        root.chmod(0o777)
    else:
        data.chmod(0o777)
    before = old.state()

    run = prune(fake_home)

    assert run.code == 0, run.stderr
    detail = f"{old.files[0]} lies behind a link or on an unsafe root"
    assert run.doc["kept"] == [old.kept("unsafe", detail)]
    assert [run.doc[k] for k in ("removed", "failed", "residual")] == [[], [], []]
    assert old.state() == before


def test_what_opencode_keeps_of_a_session_that_agentkeep_does_not_know_is_residual(
    fake_home: FakeHome,
) -> None:
    """Looking again after the removal: a row naming the session in an id
    column of a table that is not a session's (opencode.db is the adapter's
    database) and a file under the data dir whose name carries its `ses_`
    id are reported, and left."""
    OPENCODE.setup(fake_home)
    s = OPENCODE.make(fake_home, days=40)
    tree = OPENCODE.tree(fake_home)
    conn = sqlite3.connect(tree.db)
    with conn:
        conn.execute("CREATE TABLE later_cache (key TEXT PRIMARY KEY, owner_id TEXT)")
        conn.execute("INSERT INTO later_cache VALUES ('k', ?)", (s.id,))
    conn.close()
    unknown = write(tree.data / "later" / f"{s.id}.bin", "x")

    run = prune(fake_home)

    assert run.code == 0, run.stderr
    assert run.doc["removed"] == [s.removed()]
    assert by_id(run.doc["residual"]) == by_id(
        {"agent": "opencode", "id": s.id, "path": path}
        for path in (f"{tree.db}#later_cache", str(unknown))
    )
    assert unknown.exists() and Row(tree.db, "later_cache", "owner_id", s.id).count() == 1
    assert s.gone() == []


# -- zero's own lease ------------------------------------------------------------------


def test_a_zero_session_whose_lease_lock_a_process_holds_with_flock_s_is_kept_held(
    fake_home: FakeHome, processes: Processes
) -> None:
    ZERO.setup(fake_home)
    s = ZERO.make(fake_home, days=40)
    lock = s.files[0] / "lease.lock"
    holder = processes.hold(fake_home.environ, lock)
    if ProcessTable.snapshot().naming(s.id):
        pytest.fail("SETUP INVALID: the holder's command line names the session")
    before = s.state()

    run = prune(fake_home)

    assert run.code == 0, run.stderr
    assert run.doc["kept"] == [s.kept("held", f"lease {lock}")]
    assert run.doc["removed"] == [] and run.doc["failed"] == []
    assert s.state() == before

    kill_group(holder)
    wait_until(lambda: not leases.is_held(lock), "the flock ending with its holder")
    after = prune(fake_home)

    assert after.doc["removed"] == [s.removed()]
    assert s.gone() == []


# -- malformed input -------------------------------------------------------------------


@pytest.mark.parametrize("b", MALFORMED, ids=repr)
def test_malformed_input_is_skipped_with_a_log_line_never_a_crash_or_a_wrong_removal(
    fake_home: FakeHome, b: Builder
) -> None:
    b.setup(fake_home)
    good = b.make(fake_home, days=40)
    bad = b.malformed(fake_home)
    before = bad.state()

    run = prune(fake_home, AGENTKEEP_LOG_LEVEL="info")

    assert run.code == 0, run.stderr
    check_cutoffs(run, b.agents())
    assert by_id(run.doc["removed"]) == by_id(s.removed() for s in [good, *bad.removed])
    assert by_id(run.doc["kept"]) == by_id(bad.kept)
    assert run.doc["failed"] == []
    expected_residual = [e for s in [good, *bad.removed] for e in s.residual_entries()]
    assert by_id(run.doc["residual"]) == by_id(expected_residual)
    assert [s.gone() for s in [good, *bad.removed]] == [[]] * (1 + len(bad.removed))
    assert bad.state() == before, "nothing malformed is touched"
    events = run.events()
    assert [e for e in bad.events if e not in events] == [], "every skip has its log line"


@pytest.mark.parametrize("b", [CODEX, CODEX_BIN, OPENCODE, OPENCODE_BIN], ids=repr)
def test_an_unreadable_database_keeps_every_session_undated(
    fake_home: FakeHome, b: Builder
) -> None:
    b.setup(fake_home)
    s, garbage, event = b.unreadable(fake_home)
    before = s.state()

    run = prune(fake_home)

    assert run.code == 0, run.stderr
    assert run.doc["kept"] == [s.kept("undated", UNDATED)]
    assert [run.doc[k] for k in ("removed", "failed", "residual")] == [[], [], []]
    assert s.state() == before
    assert event in run.events()
    assert garbage.read_bytes() == GARBAGE
    assert binary_log(fake_home, b) == []


# -- the trash -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("b", "partial"),
    [
        (CODEX, False),  # every row is kept in the trash: nothing is gone for good
        # opencode's rows, ours and those its own delete takes, are kept.
        (OPENCODE, False),
        (OPENCODE_BIN, False),
        (GEMINI, False),
        (ZERO, False),
        (GROK, False),
        (COPILOT, False),  # its rows are kept in the trash too
        (QWEN, False),
        (PI, False),
    ],
    ids=repr,
)
def test_with_a_trash_files_wait_there_and_rows_go_at_once_making_the_entry_partial(
    fake_home: FakeHome, b: Builder, partial: bool
) -> None:
    b.setup(fake_home, trash_for="7d")
    s = b.make(fake_home, days=40)
    contents = hashes(s.files)

    run = prune(fake_home)

    assert run.code == 0, run.stderr
    assert run.doc["removed"] == [s.removed()]
    assert s.gone() == []
    entry = entry_dir(fake_home.state, b.agent, s.id)
    assert contents <= kept(entry), "every file waits in the trash"
    listed = json.loads(fake_home.cli("trash", "--json", check=True).stdout)
    [only] = listed["entries"]
    trashed_at = parse_rfc3339(only["trashed_at"])
    assert int(run.started) <= trashed_at <= run.finished
    assert isinstance(only["compressed_bytes"], int), "the prune compressed its entry"
    assert only == {
        "agent": b.agent,
        "id": s.id,
        "parent": None,
        "bytes": s.bytes,
        "compressed_bytes": only["compressed_bytes"],
        "partial": partial,
        "trashed_at": only["trashed_at"],
        "expires_at": rfc3339(trashed_at + 7 * DAY),
        "last_activity": rfc3339(s.when),
    }
