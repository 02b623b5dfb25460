"""Screenshots of every screen at 80x24 and 160x48, compared with the ones
accepted before (tests/snapshots/ui/*.svg, through pytest-textual-snapshot's
SVG extension). On a change: look at the new ones (the failure's HTML
report shows both), then `pytest tests/ui/test_ui_snapshots.py
--snapshot-update`. The demo home is the same every run (conftest), and
nothing shown depends on the clock but ages, whole days apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytest_textual_snapshot import SVGImageExtension
from syrupy.assertion import SnapshotAssertion
from uihome import BIG_OLD, OLD_PARENT, Demo, settle, sync

from agentkeep.ui.app import AgentkeepApp
from agentkeep.ui.sessions import SessionsPane

pytestmark = pytest.mark.slow

SNAPSHOTS = Path(__file__).resolve().parent.parent / "snapshots" / "ui"
SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


class UISnapshots(SVGImageExtension):
    @classmethod
    def dirname(cls, *, test_location: Any) -> str:
        return str(SNAPSHOTS)


@pytest.fixture
def screens(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(UISnapshots)


async def _shot(
    size: tuple[int, int], keys: tuple[str, ...] = (), select: str | None = None
) -> str:
    """The screen after `keys`; `select`: the session the cursor is moved to
    first, on the sessions pane (by arrow keys, as a person would)."""
    app = AgentkeepApp()
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        if select is not None:
            await pilot.press("2")
            rows = [sid for _, sid in app.query_one(SessionsPane)._shown]
            await pilot.press(*["down"] * rows.index(select))
            await settle(app, pilot)
        for key in keys:
            await pilot.press(key)
            await settle(app, pilot)
        return app.export_screenshot()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", ["overview", "sessions", "trash"])
@sync
async def test_screen(demo: Demo, screens: SnapshotAssertion, screen: str, size: str) -> None:
    keys: tuple[str, ...] = ()
    # On the sessions pane, the old parent's detail: its artifacts and why it stays.
    select = OLD_PARENT if screen == "sessions" else None
    if screen == "trash":
        demo.fh.cli("purge", "claude", BIG_OLD, check=True)
        keys = ("3",)
    assert await _shot(SIZES[size], keys, select) == screens


@pytest.mark.parametrize("dialog", ["plan", "purge", "keys"])
@sync
async def test_dialog(demo: Demo, screens: SnapshotAssertion, dialog: str) -> None:
    keys = {"plan": ("P",), "purge": ("d",), "keys": ("question_mark",)}[dialog]
    select = OLD_PARENT if dialog == "purge" else None
    assert await _shot((80, 24), keys, select) == screens


@sync
async def test_no_color(
    demo: Demo, screens: SnapshotAssertion, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    svg = await _shot((80, 24))
    assert svg == screens
