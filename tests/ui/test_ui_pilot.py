"""`agentkeep ui` driven by keys through Textual's pilot, on a real demo home
with the real core underneath (no daemon here: test_ui_live.py has one).
Each action is checked on the disk afterwards: a purged session's files are
in the trash, a pin is in pins.json, a restored session is back."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from textual.geometry import Region
from textual.widgets import DataTable, Input
from uihome import (
    BIG_OLD,
    COPILOT,
    OLD_PARENT,
    OLDER,
    PI_EARLIER,
    PI_LATER,
    RECENT_FORK,
    Demo,
    settle,
    sync,
)

from agentkeep.ui.app import AgentkeepApp
from agentkeep.ui.backend import Backend
from agentkeep.ui.dialogs import Confirm, Help, Notice, PlanView
from agentkeep.ui.sessions import SessionsPane

pytestmark = pytest.mark.slow

SIZE = (100, 30)


def _rows(app: AgentkeepApp) -> list[tuple[str, str]]:
    return list(app.query_one(SessionsPane)._shown)


async def _select(app: AgentkeepApp, pilot, sid: str) -> None:
    """Put the table's cursor on a session by typing its id into the filter."""
    await pilot.press("2", "slash", *sid[:8], "enter")
    await settle(app, pilot)
    assert [k[1] for k in _rows(app)] == [sid], _rows(app)


@sync
async def test_pin_asks_then_writes_pins_json(demo: Demo) -> None:
    app = AgentkeepApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await _select(app, pilot, OLDER)
        await pilot.press("p")
        await settle(app, pilot)
        assert isinstance(app.screen, Confirm)
        assert "never pruned" in str(app.screen.body)
        await pilot.press("n")  # no: nothing is written
        await settle(app, pilot)
        assert not demo.pins.exists() or OLDER not in demo.pins.read_text()
        await pilot.press("p")
        await settle(app, pilot)
        await pilot.press("y")
        await settle(app, pilot)
        assert OLDER in demo.pins.read_text()
        verdict = app.plans.of("claude", OLDER)
        assert verdict.words.startswith("kept: pinned"), verdict
        assert app.query_one("#table", DataTable).get_row_at(0)[5] == "pinned"


@sync
async def test_purge_moves_the_session_to_the_trash(demo: Demo) -> None:
    transcript = demo.transcript(BIG_OLD, "/home/you/cli-tool")
    assert transcript.exists()
    app = AgentkeepApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await _select(app, pilot, BIG_OLD)
        await pilot.press("d")
        await settle(app, pilot)
        assert isinstance(app.screen, Confirm)
        body = str(app.screen.body)
        assert "to the trash" in body and "can be restored" in body, body
        await pilot.press("y")
        await settle(app, pilot)
        assert not transcript.exists()
        assert (BIG_OLD, "claude") in {(e["id"], e["agent"]) for e in app.snapshot.trash}
        assert BIG_OLD not in {s["id"] for s in app.snapshot.sessions}
    kept = [p for p in demo.trash.rglob(f"{BIG_OLD}.jsonl")]
    assert kept, "the transcript is not in the trash"


@sync
async def test_purge_of_a_parent_offers_cascade(demo: Demo) -> None:
    """The old parent of a recent fork is refused alone; the dialog says why
    and offers --cascade, which takes the fork first, then the parent."""
    app = AgentkeepApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        words = app.plans.of("claude", OLD_PARENT).words
        assert words.startswith("kept: parent of a session used 3 days ago"), words
        await _select(app, pilot, OLD_PARENT)
        await pilot.press("d")
        await settle(app, pilot)
        assert isinstance(app.screen, Confirm)
        assert "--cascade" in app.screen.yes
        body = str(app.screen.body)
        assert "parent of a session used 3 days ago" in body and RECENT_FORK[:8] in body, body
        await pilot.press("y")
        await settle(app, pilot)
        ids = {s["id"] for s in app.snapshot.sessions}
        assert OLD_PARENT not in ids and RECENT_FORK not in ids
        assert {OLD_PARENT, RECENT_FORK} <= {e["id"] for e in app.snapshot.trash}


@sync
async def test_purge_of_a_pinned_session_is_refused_in_words(demo: Demo) -> None:
    demo.fh.cli("pin", "claude", OLDER, check=True)
    app = AgentkeepApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await _select(app, pilot, OLDER)
        await pilot.press("d")
        await settle(app, pilot)
        assert isinstance(app.screen, Notice)
        assert "pinned" in str(app.screen.body)
        await pilot.press("escape")
    assert demo.transcript(OLDER, "/home/you/cli-tool").exists()


@sync
async def test_restore_from_the_trash(demo: Demo) -> None:
    demo.fh.cli("purge", "claude", BIG_OLD, check=True)
    transcript = demo.transcript(BIG_OLD, "/home/you/cli-tool")
    assert not transcript.exists(), "SETUP INVALID: the purge did not remove the transcript"
    app = AgentkeepApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("3")
        await settle(app, pilot)
        assert app.query_one("#trash-table", DataTable).row_count == 1
        await pilot.press("u")
        await settle(app, pilot)
        assert isinstance(app.screen, Confirm)
        await pilot.press("y")
        await settle(app, pilot)
        assert transcript.exists()
        assert app.snapshot.trash == []
        assert BIG_OLD in {s["id"] for s in app.snapshot.sessions}


@sync
async def test_prune_shows_the_dry_run_then_prunes(demo: Demo) -> None:
    app = AgentkeepApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        planned = {r["id"] for r in app.plan.report["removed"]}
        assert {BIG_OLD, OLDER, "refactor-parser", "grok-notes"} <= planned
        assert OLD_PARENT not in planned  # the parent of a recent fork stays
        await pilot.press("P")
        await settle(app, pilot)
        assert isinstance(app.screen, PlanView)
        table = app.screen.query_one("#plan-table", DataTable)
        assert table.row_count == len(app.plan.report["removed"]) + len(app.plan.report["kept"])
        # Nothing has happened yet.
        assert demo.transcript(BIG_OLD, "/home/you/cli-tool").exists()
        await pilot.press("y")
        await settle(app, pilot)
        assert isinstance(app.screen, Notice)
        assert "moved" in str(app.screen.body)
        await pilot.press("escape")
        await settle(app, pilot)
        assert planned <= {e["id"] for e in app.snapshot.trash}
    assert not demo.transcript(BIG_OLD, "/home/you/cli-tool").exists()
    assert demo.transcript(OLD_PARENT, "/home/you/webapp").exists()


@sync
async def test_filter_sort_and_the_keys(demo: Demo) -> None:
    app = AgentkeepApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("2")
        # Largest first by default.
        sizes = [s["bytes"] for s in app.snapshot.sessions]
        shown = [app._sessions()[k]["bytes"] for k in _rows(app)]
        assert shown == sorted(sizes, reverse=True)
        await pilot.press("s")  # then by idle time, oldest first
        await settle(app, pilot)
        idle = [app._sessions()[k]["last_activity"] for k in _rows(app)]
        assert idle == sorted(idle, reverse=True)
        await pilot.press("slash", *"goes zero", "enter")
        await settle(app, pilot)
        assert _rows(app) == [("zero", "refactor-parser")]
        await pilot.press("escape")
        assert app.query_one("#filter", Input).value == ""
        await pilot.press("question_mark")
        assert isinstance(app.screen, Help)
        await pilot.press("escape")
        await pilot.press("q")
    assert app.return_code == 0


@sync
async def test_the_detail_pane_says_why(demo: Demo) -> None:
    app = AgentkeepApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await _select(app, pilot, OLD_PARENT)
        text = str(app.query_one("#detail").render())
        assert "kept: parent of a session used 3 days ago (1f2e3d4c)" in text
        assert f"children {RECENT_FORK}" in text
        assert "transcript" in text and "file-history" in text


class HeldShow(Backend):
    """The real backend, whose `show` waits until `release` is set: the
    seam that lets a newer selection arrive while a show is being read."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.asked: list[str] = []

    def show(self, agent: str, sid: str) -> dict[str, Any]:
        self.asked.append(sid)
        if not self.release.wait(30):
            raise AssertionError(f"show {sid} was never released")
        return super().show(agent, sid)


class Overtaken(AgentkeepApp):
    """The app, whose turn to show `target` releases the held backend: at
    that moment the show before it is still being read."""

    backend: HeldShow
    target: tuple[str, str] | None = None
    during: list[str] | None = None  # the shows asked for by then

    def _show(self, key: tuple[str, str] | None) -> None:
        super()._show(key)
        if key is not None and key == self.target and not self.backend.release.is_set():
            self.during = list(self.backend.asked)
            self.backend.release.set()


@sync
async def test_a_show_overtaken_by_a_newer_selection(demo: Demo) -> None:
    """The cursor moves on while a session's `show` is still being read, and
    the app is being waited for: the wait does not raise, and the detail is
    the session the cursor is on, read after the first one ended."""
    backend = HeldShow()
    backend.release.set()
    app = Overtaken(backend)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await settle(app, pilot)
        first, second, third = _rows(app)[:3]
        backend.release.clear()
        await pilot.press("down")
        deadline = time.monotonic() + 20
        while backend.asked[-1:] != [second[1]]:
            if time.monotonic() > deadline:
                pytest.fail("SETUP INVALID: the second session's show was never asked for")
            await pilot.pause(0.02)
        app.target = third
        await pilot.press("down")
        await settle(app, pilot)  # the third's turn comes while this waits
        if app.during != [first[1], second[1]]:
            pytest.fail(f"SETUP INVALID: the third's turn came with {app.during} asked")
        assert backend.asked == [first[1], second[1], third[1]], backend.asked
        text = str(app.query_one("#detail").render())
        assert f"{third[0]} {third[1]}" in text, text


def test_without_textual_ui_says_how_to_install_and_exits_2(demo: Demo, tmp_path) -> None:
    """A `textual` that cannot be imported (found first on the path) stands
    for an installation without the extra."""
    stub = tmp_path / "stub" / "textual"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('no textual here', name='textual')\n")
    env = {**demo.fh.environ, "PYTHONPATH": str(stub.parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "agentkeep", "ui"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "agentkeep[ui]" in proc.stderr
    assert json.dumps  # (the CLI's other commands still work without it)
    assert demo.fh.cli("ls", env=env).returncode == 0


SIZES = [(80, 24), (120, 36)]


def _regions(app: AgentkeepApp, selector: str) -> list[Any]:
    return [w.region for w in app.screen.query(selector) if w.display and w.region.area]


@pytest.mark.parametrize("size", SIZES)
@sync
async def test_every_pane_fits_the_screen_whole(demo: Demo, size: tuple[int, int]) -> None:
    """Each pane's footer keys, and the overview to its histogram's last
    line, lie within the screen (nothing scrolls out of sight)."""
    app = AgentkeepApp()
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        screen = app.screen.region
        for pane in ("1", "2", "3"):
            await pilot.press(pane)
            await settle(app, pilot)
            keys = _regions(app, "FooterKey")
            assert keys, "no key in the footer"
            cut = [r for r in keys if screen.intersection(r) != r]
            cut += [a for n, a in enumerate(keys) for b in keys[n + 1 :] if a.overlaps(b)]
            assert not cut, f"pane {pane}: footer keys cut at {size}: {cut}"
        await pilot.press("1")
        await settle(app, pilot)
        histogram = app.query_one("#histogram")
        overview = app.query_one("#overview-pane")
        assert histogram.region.area, "the histogram is not drawn"
        assert overview.max_scroll_y == 0, f"the overview scrolls at {size}"
        assert overview.region.contains_region(histogram.region), (histogram.region, size)
        lines = histogram.render_lines(Region(0, 0, *histogram.size))
        assert "<1d" in lines[-1].text, "the histogram's last line is not its ages"


@pytest.mark.parametrize("size", SIZES)
@sync
async def test_ids_and_agents_are_told_apart(demo: Demo, size: tuple[int, int]) -> None:
    """pi's two ids share their first 9 characters: each row's id is a
    prefix of its own id that starts no other session's, agents are whole,
    and the detail says the id whole."""
    app = AgentkeepApp()
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        await pilot.press("2")
        await settle(app, pilot)
        table = app.query_one("#table", DataTable)
        ids = {sid for _, sid in _rows(app)}
        assert {PI_EARLIER, PI_LATER} <= ids, "SETUP INVALID: the pi sessions are not listed"
        assert PI_EARLIER[:9] == PI_LATER[:9], "SETUP INVALID: the pi ids share no prefix"
        for n, (agent, sid) in enumerate(_rows(app)):
            shown_id, shown_agent = table.get_row_at(n)[:2]
            assert shown_agent == agent
            assert sid.startswith(shown_id), (shown_id, sid)
            others = [o for o in ids if o != sid and o.startswith(shown_id)]
            assert not others, f"{shown_id!r} names {sid} and {others}"
        width = table.columns[next(iter(table.columns))].width
        assert all(len(str(table.get_row_at(n)[0])) <= width for n in range(table.row_count))
        # The detail names the highlighted session by its whole id.
        await pilot.press(*["down"] * _rows(app).index(("pi", PI_LATER)))
        await settle(app, pilot)
        text = str(app.query_one("#detail").render())
        assert f"pi {PI_LATER}" in text, text


@sync
async def test_a_toast_leaves_a_dialogs_buttons_free(demo: Demo) -> None:
    """At 80x24 the prune's dialog, and the notice after it (its one
    button), stay clickable while a notification shows."""
    app = AgentkeepApp()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(app, pilot)
        await pilot.press("P")
        await settle(app, pilot)
        assert isinstance(app.screen, PlanView)
        for dialog in ("the plan", "the notice after the prune"):
            app.notify("a notification long enough to wrap onto a second line " * 2)
            deadline = time.monotonic() + 10
            while not (toasts := _regions(app, "Toast")) and time.monotonic() < deadline:
                await pilot.pause(0.05)
            buttons = _regions(app, "Button")
            assert toasts and buttons, f"SETUP INVALID: {dialog}: {toasts} {buttons}"
            covered = [(b, t) for b in buttons for t in toasts if b.overlaps(t)]
            assert not covered, f"{dialog}: a toast covers a button: {covered}"
            if dialog == "the plan":
                await pilot.press("y")
                await settle(app, pilot)
                assert isinstance(app.screen, Notice)
                assert len(_regions(app, "Button")) == 1


# keep_last keeps each agent's most recent session of a workspace; Copilot
# alone has a size cap and no keep_last, so its one session, young enough
# for the retention, goes for its size.
SHAPES = 'retention = "30d"\nkeep_last = 1\n[agents.copilot]\nmax_size = "4K"\nkeep_last = 0\n'


@sync
async def test_every_retention_shape_in_the_plans_words(demo: Demo) -> None:
    """At 80x24, with a retention, keep_last and max_size: the sessions'
    PLAN column, the detail pane and the prune's dialog say why each goes
    or stays, as the one plan (the dry run) decided it."""
    demo.fh.write_config(SHAPES)
    app = AgentkeepApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        report = app.plan.report
        why = {(r["agent"], r["id"]): r["why"] for r in report["removed"]}
        reasons = {(k["agent"], k["id"]): k["reason"] for k in report["kept"]}
        if why.get(("copilot", COPILOT)) != "size" or reasons.get(("grok", "grok-notes")) != (
            "recent"
        ):
            pytest.fail(f"SETUP INVALID: the plan took no shape but age: {why} {reasons}")
        assert why[("claude", BIG_OLD)] == "age"
        await pilot.press("2")
        await settle(app, pilot)
        table = app.query_one("#table", DataTable)
        plan = {key: str(table.get_row_at(n)[-1]) for n, key in enumerate(_rows(app))}
        assert plan[("copilot", COPILOT)] == "goes: size"
        assert plan[("grok", "grok-notes")] == "kept: recent"
        assert plan[("claude", BIG_OLD)] == "goes"
        widths = {c.key.value: c.width for c in table.columns.values()}
        assert widths["plan"] >= len("kept: recent"), widths
        for sid, words in (
            (COPILOT, "over max_size: the longest idle go first"),
            ("grok-notes", "one of the 1 most recently active in /home/you/notes (keep_last)"),
            (BIG_OLD, "past the retention (30d)"),
        ):
            await _select(app, pilot, sid)
            text = str(app.query_one("#detail").render())
            assert words in text, text
            await pilot.press("escape")
        await pilot.press("P")
        await settle(app, pilot)
        assert isinstance(app.screen, PlanView)
        dialog = app.screen.query_one("#plan-table", DataTable)
        cause = {
            str(dialog.get_row_at(n)[2]): str(dialog.get_row_at(n)[-1])
            for n in range(dialog.row_count)
        }
        assert cause[app.names(COPILOT)] == "over max_size: the longest idle go first"
        assert cause[app.names("grok-notes")].startswith("one of the 1 most recently active"), cause
        assert cause[app.names(BIG_OLD)] == "past the retention (30d)"
