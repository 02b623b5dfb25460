"""The demo home of the `agentkeep ui` tests, the same for every test: fixed session ids
and ages, so screenshots compare from run to run; and waiting for the app to
settle (every read and action finished) with a deadline."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from build_agents import make_grok_session, make_zero_session
from build_claude import DEBUG_LOG, FILE_HISTORY, SESSION_DIR, TODOS, TRANSCRIPT, make_session
from fakehome import FakeHome

# No tmp tree and no registry: their paths lie outside the fake home (or
# carry a pid), and screenshots must not name them.
KINDS = (TRANSCRIPT, SESSION_DIR, FILE_HISTORY, TODOS, DEBUG_LOG)

OLD_PARENT = "0b7c3a52-5d0e-4c1e-9a57-2f6b1c9e4d01"
RECENT_FORK = "1f2e3d4c-6b5a-4978-8e6f-0a1b2c3d4e02"
BIG_OLD = "2a9d8c7b-3e4f-4a5b-9c6d-7e8f9a0b1c03"
OLDER = "3b8e7d6c-5f4a-4b3c-8d2e-1f0a9b8c7d04"
RECENT = "4c7f6e5d-4a3b-4c2d-9e1f-0a9b8c7d6e05"
ANCIENT = "5d6a5f4e-3b2c-4d1e-8f0a-9b8c7d6e5f06"


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
    with a recent fork), zero and grok sessions, and a 30-day retention."""
    now = time.time()
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
