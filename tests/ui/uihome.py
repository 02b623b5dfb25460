"""The demo home of the `agentkeep ui` tests, the same for every test: fixed session ids
and ages, so screenshots compare from run to run; and waiting for the app to
settle (every read and action finished) with a deadline."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from build_agents import (
    make_gemini_session,
    make_grok_session,
    make_zero_session,
    write_gemini_projects,
)
from build_claude import DEBUG_LOG, FILE_HISTORY, SESSION_DIR, TODOS, TRANSCRIPT, make_session
from build_copilot import CopilotTree
from build_opencode import OpencodeTree
from build_pi import PiTree
from build_qwen import QwenTree
from fakehome import FakeHome

DAY = 86400.0
# No tmp tree and no registry: their paths lie outside the fake home (or
# carry a pid), and screenshots must not name them.
KINDS = (TRANSCRIPT, SESSION_DIR, FILE_HISTORY, TODOS, DEBUG_LOG)

OLD_PARENT = "0b7c3a52-5d0e-4c1e-9a57-2f6b1c9e4d01"
RECENT_FORK = "1f2e3d4c-6b5a-4978-8e6f-0a1b2c3d4e02"
BIG_OLD = "2a9d8c7b-3e4f-4a5b-9c6d-7e8f9a0b1c03"
OLDER = "3b8e7d6c-5f4a-4b3c-8d2e-1f0a9b8c7d04"
RECENT = "4c7f6e5d-4a3b-4c2d-9e1f-0a9b8c7d6e05"
ANCIENT = "5d6a5f4e-3b2c-4d1e-8f0a-9b8c7d6e5f06"
# pi's ids are UUIDv7: these two were made 50 seconds apart, and share
# their first 9 characters.
PI_EARLIER = "019aa4f2-0c31-7e4a-9b21-3c4d5e6f7a81"
PI_LATER = "019aa4f2-cf81-7a19-8c55-0d1e2f3a4b92"
QWEN = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c08"
COPILOT = "8b7c6d5e-4f3a-4b2c-8d9e-0f1a2b3c4d09"
GEMINI = "9c8d7e6f-5a4b-4c3d-9e0f-1a2b3c4d5e10"
OPENCODE = "ses_3f2a1b0c9d8e7f6a5b4c3d2e1f"


@dataclass(frozen=True)
class Demo:
    fh: FakeHome

    @property
    def trash(self) -> Path:
        return self.fh.state / "trash"

    @property
    def pins(self) -> Path:
        return self.fh.state / "pins.json"

    def transcript(self, sid: str, cwd: str) -> Path:
        from build_claude import ClaudeLayout, project_key

        return ClaudeLayout.of(self.fh).projects / project_key(cwd) / f"{sid}.jsonl"


def build_demo(fh: FakeHome) -> Demo:
    """Claude sessions of several ages in two workspaces (an old parent
    with a recent fork); zero, grok, pi, Qwen Code, Copilot, Gemini CLI and
    opencode sessions; and a 30-day retention."""
    now = time.time()
    _newer_agents(fh, now)
    make_session(fh, OLD_PARENT, "/home/you/webapp", age_days=75.5, kinds=KINDS, now=now)
    make_session(
        fh, RECENT_FORK, "/home/you/webapp", OLD_PARENT, age_days=3.5, kinds=KINDS, now=now
    )
    make_session(
        fh, BIG_OLD, "/home/you/cli-tool", age_days=120.5, pad=20_000, kinds=KINDS, now=now
    )
    make_session(fh, OLDER, "/home/you/cli-tool", age_days=45.5, pad=8_000, kinds=KINDS, now=now)
    make_session(fh, RECENT, "/home/you/cli-tool", age_days=0.5, kinds=KINDS, now=now)
    make_session(fh, ANCIENT, "/home/you/api", age_days=400.5, pad=4_000, kinds=KINDS, now=now)
    zero = fh.data / "zero" / "sessions"
    make_zero_session(zero, "refactor-parser", days=50.5)
    make_zero_session(zero, "fix-ci", days=2.5)
    make_grok_session(fh.home / ".grok", "grok-notes", workspace="/home/you/notes", days=40.5)
    fh.write_config('retention = "30d"\n')
    return Demo(fh)


def _newer_agents(fh: FakeHome, now: float) -> None:
    """A session or two of each agent added since the first ones, none with
    a file in the tmp dirs (their paths lie outside the fake home)."""
    env = fh.environ
    pi = PiTree(Path(env["PI_CODING_AGENT_DIR"]) / "sessions", Path(env["TMPDIR"]))
    pi.session("/home/you/webapp", sid=PI_EARLIER, days=33.5)
    pi.session("/home/you/webapp", sid=PI_LATER, days=5.5)
    qwen = QwenTree(Path(env["QWEN_HOME"])).session(
        "/home/you/api", sid=QWEN, days=64.5, extras=True
    )
    when = now - 64.5 * DAY
    for top in qwen.artifacts:  # written now: dated as the session's records are
        for path in [top, *(top.rglob("*") if top.is_dir() else ())]:
            os.utime(path, (when, when))
    copilot = CopilotTree(
        Path(env["COPILOT_HOME"]), Path(env["TMPDIR"]), fh.state.parent / ".copilot"
    )
    copilot.session(COPILOT, when=now - 8.5 * DAY, cwd="/home/you/cli-tool")
    gemini = fh.home / ".gemini"
    make_gemini_session(gemini, GEMINI, project="site", project_root="/home/you/site", days=36.5)
    write_gemini_projects(gemini, {"/home/you/site": "site"})
    opencode = OpencodeTree(fh.data / "opencode")
    opencode.full_session(
        OPENCODE, updated_ms=int((now - 1.5 * DAY) * 1000), directory="/home/you/site"
    )


async def settle(app: object, pilot: object, timeout: float = 30.0) -> None:
    """Until the app has read everything and no action is under way. The
    app's own account (`busy`) is what is waited on, never a worker's
    `wait()`: that raises for a worker cancelled on purpose (the app's exit
    cancels every one), and a thread goes on after its worker is cancelled.
    A worker that raised fails the test with what it raised."""
    from agentkeep.ui.app import AgentkeepApp

    assert isinstance(app, AgentkeepApp)
    deadline = time.monotonic() + timeout
    quiet = 0  # checks in a row that found it settled (a message may be on its way)
    while True:
        await pilot.pause()  # type: ignore[attr-defined]
        assert not app.faults, app.faults
        settled = not app.busy and all(w.is_finished for w in app.workers)
        quiet = quiet + 1 if settled and app.plan is not None else 0
        if quiet >= 2:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for the app to settle")
        await pilot.pause(0.02)  # type: ignore[attr-defined]


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """An async test run to its end on a loop of its own (Textual's pilot is
    async; no async plugin is needed for that)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run
