"""`agentkeep ui` with the real daemon running: it subscribes, and a session
written to disk shows without a key pressed and without the UI reading the
disk on a timer; actions go over the socket; a daemon that stops is said."""

from __future__ import annotations

import time

import pytest
from textual.pilot import Pilot
from uihome import OLDER, Demo, settle, sync

from agentkeep.ui.app import AgentkeepApp
from build_claude import make_session
from test_daemon_serve import start_daemon, stop_daemons  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

NEW = "6e5b4a3f-2c1d-4e0f-9a8b-7c6d5e4f3a07"


async def _until(app: AgentkeepApp, pilot: Pilot, what: str, check, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await pilot.pause(0.05)


@sync
async def test_a_new_session_shows_by_itself(demo: Demo) -> None:
    daemon = start_daemon(demo.fh)
    app = AgentkeepApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await _until(app, pilot, "the subscription", lambda: app.live == "live")
        assert app.snapshot.daemon
        loads = app.loads
        make_session(demo.fh, NEW, "/home/you/webapp", age_days=0)
        ids = lambda: {s["id"] for s in app.snapshot.sessions}  # noqa: E731
        await _until(app, pilot, "the new session in the table", lambda: NEW in ids())
        # It came with a load of its own: the load's end is posted after its
        # snapshot, so it is waited for, not assumed done.
        await _until(app, pilot, "the load that brought it to end", lambda: app.loads > loads)
        # A pin from the UI goes over the socket; the daemon's own view says so.
        await pilot.press("2", "slash", *OLDER[:8], "enter")
        await settle(app, pilot)
        await pilot.press("p")
        await settle(app, pilot)
        await pilot.press("y")
        await settle(app, pilot)
        assert OLDER in demo.pins.read_text()
        shown = daemon.call("show", {"agent": "claude", "id": OLDER})
        assert shown["pinned"] is True
        daemon.stop()
        await _until(app, pilot, "the UI to say it is not live", lambda: "not live" in app.live)


@sync
async def test_without_a_daemon_nothing_changes_until_r(demo: Demo) -> None:
    app = AgentkeepApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        assert not app.snapshot.daemon
        make_session(demo.fh, NEW, "/home/you/webapp", age_days=0)
        await pilot.pause(0.2)
        assert NEW not in {s["id"] for s in app.snapshot.sessions}
        await pilot.press("r")
        await settle(app, pilot)
        assert NEW in {s["id"] for s in app.snapshot.sessions}
