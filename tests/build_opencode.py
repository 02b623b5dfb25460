"""The opencode builders of agentkeep.demo.opencode, with what the tests read
back (a session's row counts in every table), and a fake `opencode` binary.

The fake `opencode` implements the two commands agentkeep may run: `debug
paths` (printed like the real one, `key.padEnd(10) value`) and `session
delete <id>`, which deletes only the 2.x rows of that one session (#50260,
#34701), or with `every_row` what 1.18.33's does: the session, its
children and every row of theirs, leaving their tool outputs. A real
opencode is never run here: it migrates the database.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

from agentkeep.demo import opencode
from agentkeep.demo.opencode import UPDATED_MS, new_id
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


class OpencodeTree(opencode.OpencodeTree):
    """The demo's opencode tree, and what a test reads back from it (read-only)."""

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
