"""A demo home: a whole fake user holding sessions of every agent agentkeep
knows, each laid out as that agent writes it (FIELD-NOTES.md), for a machine
with none of its own (deploy/demo.py). The tests' builders (tests/build_*.py)
and the benchmark share these modules' record shapes.

    with demo_home(Path("/tmp/demo")) as demo:
        subprocess.run(["agentkeep", "ls"], env=demo.home.environ)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from agentkeep.demo import claude, codex, opencode
from agentkeep.demo.agents import (
    DAY,
    write_gemini_projects,
    write_gemini_session,
    write_grok_session,
    write_zero_session,
)
from agentkeep.demo.home import FakeHome, make_fake_home

# The file that says a folder is a demo home this module built: only such a
# folder is ever removed to build it afresh.
MARKER = ".agentkeep-demo"
# Unix socket paths are limited to 108 bytes on Linux, 104 on macOS.
SOCKET_PATH_MAX = 100


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
    fresh, and Claude's shared files (which no session owns)."""
    now = time.time()
    old_parent, fork = _claude(home, now)
    for days, cwd in ((90, "/home/you/api"), (38, "/home/you/api"), (1, "/home/you/webapp")):
        codex.write_session(home.codex, cwd=cwd, when=now - days * DAY)
    for days in (55, 4):
        opencode.write_session(home.data / "opencode", directory="/home/you/webapp", days=days)
    gemini = home.home / ".gemini"  # chats of a project, with `$set.lastUpdated` lines
    for sid, idle in (
        ("7d1c2b3a-0f9e-4d8c-b7a6-1e2f3a4b5c6d", 36.0),
        ("8e2d3c4b-1a0f-4e9d-a8b7-2f3a4b5c6d7e", 0.5),
    ):
        write_gemini_session(gemini, sid, project="site", workspace="/home/you/site", days=idle)
    write_gemini_projects(gemini, {"/home/you/site": "site"})
    grok = home.home / ".grok"
    write_grok_session(grok, "grok-notes-1", workspace="/home/you/notes", days=40)
    write_grok_session(grok, "grok-notes-2", workspace="/home/you/notes", days=1)
    zero = home.data / "zero" / "sessions"
    write_zero_session(zero, "refactor-parser", days=50)
    write_zero_session(zero, "fix-ci", days=2)
    return Demo(home=home, old_parent=old_parent, fork=fork)


def _claude(home: FakeHome, now: float) -> tuple[str, str]:
    """Three workspaces; in webapp an old parent with a fork of 3 days."""
    webapp, cli_tool, notes = "/home/you/webapp", "/home/you/cli-tool", "/home/you/notes"
    session = partial(claude.write_session, home.claude, now=now)
    old = session(cwd=webapp, age_days=75)
    fork = session(cwd=webapp, age_days=3, parent=old)
    ids = [old, fork, *(session(cwd=cli_tool, age_days=d, pad=20_000) for d in (45, 62, 120))]
    ids += [session(cwd=cli_tool, age_days=0.2), session(cwd=notes, age_days=33)]
    claude.write_shared(home.claude, home.home, cwd=webapp, session_ids=ids)
    return old, fork
