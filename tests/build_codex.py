"""The Codex builders of agentkeep.demo.codex, with what the tests read back
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
from pathlib import Path

from agentkeep.demo import codex
from agentkeep.demo.codex import ROWS, new_id
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


class CodexTree(codex.CodexTree):
    """The demo's Codex tree, and what a test reads back from it (read-only)."""

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
