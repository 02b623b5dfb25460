"""A demo home: a whole fake user holding sessions of every agent agentkeep
knows, for a machine with none of its own (deploy/demo.py shows agentkeep on
it; the tests and the benchmark build their trees with the same builders).

    with demo_home(Path("/tmp/demo")) as demo:
        subprocess.run(["agentkeep", "ls"], env=demo.home.environ)

The modules: `home` (the fake user and its environment), `claude`, `codex`,
`opencode` and `agents` (Gemini CLI, grok, zero), each writing sessions the
way that agent lays them out on disk (FIELD-NOTES.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agentkeep.demo.agents import (
    make_gemini_session,
    make_grok_session,
    make_zero_session,
    write_gemini_projects,
)
from agentkeep.demo.claude import make_session, make_shared
from agentkeep.demo.codex import CodexTree
from agentkeep.demo.home import FakeHome, make_fake_home
from agentkeep.demo.opencode import OpencodeTree

# The file that says a folder is a demo home this module built: only such a
# folder is ever removed to build it afresh.
MARKER = ".agentkeep-demo"
# Unix socket paths are limited to 108 bytes on Linux, 104 on macOS.
SOCKET_PATH_MAX = 100
DAY = 86400.0


class NotADemo(Exception):
    """The folder asked for exists and is not a demo home: it is left alone."""


@dataclass(frozen=True)
class Demo:
    """What the demo home holds, by name, for whoever shows it."""

    home: FakeHome
    old_parent: str  # idle past 30 days, and the parent of a recent fork
    fork: str


@contextmanager
def demo_home(root: Path) -> Iterator[Demo]:
    """Build the demo home in `root` (an earlier demo there is replaced; a
    folder that is not one raises NotADemo and is not touched). Its socket
    dir lies under `root`, or where that path is too long for a socket, in
    a fresh folder of /tmp removed when the block ends."""
    root = root.absolute()
    if root.exists() or root.is_symlink():
        if not (root / MARKER).is_file() or root.is_symlink():
            raise NotADemo(f"{root} exists and is not a demo home; choose another folder")
        shutil.rmtree(root)  # our own demo from an earlier run: built afresh
    root.mkdir(parents=True)
    (root / MARKER).touch()
    runtime = root / "run"
    outside = len(os.fsencode(runtime / "agentkeep" / "agentkeep.sock")) > SOCKET_PATH_MAX
    if outside:  # /tmp: $TMPDIR may be as deep as the root
        runtime = Path(tempfile.mkdtemp(prefix="agentkeep-demo-", dir="/tmp"))
    try:
        yield build(make_fake_home(root, runtime))
    finally:
        if outside:
            shutil.rmtree(runtime, ignore_errors=True)


def build(home: FakeHome) -> Demo:
    """Sessions of every agent in `home`, some idle past 30 days and some
    fresh, and each agent's shared files (which no session owns)."""
    now = time.time()
    old_parent, fork = _claude(home, now)
    _codex(home, now)
    _opencode(home, now)
    _gemini(home)
    grok = home.home / ".grok"
    make_grok_session(grok, "grok-notes-1", workspace="/home/you/notes", days=40)
    make_grok_session(grok, "grok-notes-2", workspace="/home/you/notes", days=1)
    zero = home.data / "zero" / "sessions"
    make_zero_session(zero, "refactor-parser", days=50)
    make_zero_session(zero, "fix-ci", days=2)
    return Demo(home=home, old_parent=old_parent, fork=fork)


def _claude(home: FakeHome, now: float) -> tuple[str, str]:
    """Three workspaces; in webapp an old parent with a fork of 3 days.
    Every session has all its artifacts (subagents, tool results, file
    history, a tmp tree, ...)."""
    webapp, cli_tool, notes = "/home/you/webapp", "/home/you/cli-tool", "/home/you/notes"
    old = make_session(home, cwd=webapp, age_days=75, now=now)
    fork = make_session(home, cwd=webapp, age_days=3, parent=old.id, now=now)
    ids = [old.id, fork.id]
    for days in (45, 62, 120):
        ids.append(make_session(home, cwd=cli_tool, age_days=days, pad=20_000, now=now).id)
    ids.append(make_session(home, cwd=cli_tool, age_days=0.2, now=now).id)
    ids.append(make_session(home, cwd=notes, age_days=33, now=now).id)
    make_shared(home, cwd=webapp, session_ids=ids, age_days=1)
    return old.id, fork.id


def _codex(home: FakeHome, now: float) -> None:
    """Rollouts and rows in every database Codex 0.169 keeps."""
    home.codex.mkdir(parents=True)
    tree = CodexTree(home.codex)
    for days, cwd in ((90, "/home/you/api"), (38, "/home/you/api"), (1, "/home/you/webapp")):
        when = now - days * DAY
        tree.full_session(
            cwd=cwd,
            started=datetime.fromtimestamp(when - 600, UTC),
            mtime=when,
            updated_at=int(when),
            older=False,
        )


def _opencode(home: FakeHome, now: float) -> None:
    """Sessions in opencode.db and the JSON storage, and a tool output."""
    data = home.data / "opencode"
    data.mkdir(parents=True)
    tree = OpencodeTree(data)
    for days in (55, 4):
        when = now - days * DAY
        sid = tree.full_session(updated_ms=int(when * 1000), directory="/home/you/webapp")
        output = tree.tool_output(sid)
        os.utime(output, (when, when))


def _gemini(home: FakeHome) -> None:
    """Chats of two projects (with `$set.lastUpdated` lines) and projects.json."""
    root = home.home / ".gemini"
    make_gemini_session(
        root,
        "7d1c2b3a-0f9e-4d8c-b7a6-1e2f3a4b5c6d",
        project="site",
        project_root="/home/you/site",
        days=36,
    )
    make_gemini_session(
        root,
        "8e2d3c4b-1a0f-4e9d-a8b7-2f3a4b5c6d7e",
        project="site",
        project_root="/home/you/site",
        days=0.5,
    )
    write_gemini_projects(root, {"/home/you/site": "site"})
