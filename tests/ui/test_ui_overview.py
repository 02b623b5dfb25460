"""The overview's disk by kind: `du --by kind` as the core answers it for
the demo home, each group in words beside the disk by agent (the largest
first, the rest summed in one line), and the pane still whole at 80x24."""

from __future__ import annotations

import re
from typing import Any

import pytest
from textual.geometry import Region
from uihome import Demo, settle, sync

from agentkeep.core.context import Context
from agentkeep.core.reclaim import du
from agentkeep.paths import Env
from agentkeep.ui.app import AgentkeepApp
from agentkeep.ui.backend import Backend
from agentkeep.ui.overview import kind_groups


def _du_by_kind(demo: Demo) -> list[dict[str, Any]]:
    ctx = Context.open(Env.from_environ(demo.fh.environ))
    try:
        groups: list[dict[str, Any]] = du(ctx, "kind")["groups"]
        return groups
    finally:
        ctx.index.close()


def test_by_kind_is_what_du_answers(demo: Demo) -> None:
    kinds = Backend().snapshot().by_kind
    assert kinds is not None, "the snapshot has no disk by kind"
    assert [g["key"] for g in kinds] == [g["key"] for g in _du_by_kind(demo)]


def test_kind_groups_in_words() -> None:
    """Empty groups are left out, the rest largest first; a key the UI has
    no words for is shown as it comes, its dashes as spaces."""
    groups = [
        {"key": "tool-output", "bytes": 40_000, "reclaimable_bytes": 0, "sessions": 3},
        {"key": "trash", "bytes": 0, "reclaimable_bytes": 0, "sessions": 0},
        {"key": "database-free-pages", "bytes": 12_288, "reclaimable_bytes": 0, "sessions": 0},
        {"key": "core-dumps", "bytes": 5_000, "reclaimable_bytes": 5_000, "sessions": 0},
        {"key": "transcripts", "bytes": 90_000, "reclaimable_bytes": 60_000, "sessions": 9},
    ]
    keys = [g["key"] for g in kind_groups(groups)]
    assert keys == ["transcripts", "tool output", "free pages", "core dumps"]


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
@sync
async def test_the_disk_by_kind_beside_the_agents(demo: Demo, size: tuple[int, int]) -> None:
    """Every kind that holds anything is shown by its words, or counted in
    the line that sums the ones with no room; the overview does not scroll."""
    app = AgentkeepApp()
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)  # the index is built
        kinds = kind_groups(_du_by_kind(demo))
        assert len(kinds) >= 5, f"SETUP INVALID: the demo home fills only {kinds}"
        chart = app.query_one("#by-agent")
        lines = [s.text for s in chart.render_lines(Region(0, 0, *chart.size))]
        text = "\n".join(lines)
        assert "Disk by agent" in text and "Disk by kind" in text, text
        half = (chart.size.width - 2) // 2
        right = [line[half + 2 :].strip() for line in lines[1:]]
        shown = [line.split()[0] if line else "" for line in right]
        more = re.search(r"… and (\d+) more", right[-1] if right else "")
        rest = int(more.group(1)) if more else 0
        words = [g["key"].split()[0] for g in kinds]
        assert shown[: len(kinds) - rest] == words[: len(kinds) - rest], text
        assert len(kinds) - rest >= 3, f"only {len(kinds) - rest} kinds have room at {size}"
        overview = app.query_one("#overview-pane")
        assert overview.max_scroll_y == 0, f"the overview scrolls at {size}"
        legend = app.query_one("#by-workspace")
        first = legend.render_lines(Region(0, 0, legend.size.width, 1))[0].text
        assert "reclaimable now (30d)" in first, "the bars' legend is not said"
