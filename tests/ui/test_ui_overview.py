"""The overview's disk by kind: read from `du --by kind` when the core or the
daemon answers it, each group in words beside the disk by agent, a field a
group lacks read as 0, and the pane still whole at 80x24."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from textual.geometry import Region
from uihome import Demo, settle, sync

from agentkeep import core
from agentkeep.errors import BadParams
from agentkeep.paths import Env
from agentkeep.ui.app import AgentkeepApp
from agentkeep.ui.backend import Backend, Snapshot

# `du --by kind`'s groups as the core gives them, with a key the UI does not
# know, a group without the reclaimable and sessions fields, and empty ones.
KINDS: list[dict[str, Any]] = [
    {"key": "transcripts", "bytes": 90_000, "reclaimable_bytes": 60_000, "sessions": 9},
    {"key": "tool-output", "bytes": 40_000, "reclaimable_bytes": 0, "sessions": 3},
    {"key": "database-free-pages", "bytes": 12_288},
    {"key": "core-dumps", "bytes": 5_000, "reclaimable_bytes": 5_000, "sessions": 0},
    {"key": "runtime-leftovers", "bytes": 0, "reclaimable_bytes": 0, "sessions": 0},
    {"key": "trash", "bytes": 0, "reclaimable_bytes": 0, "sessions": 0},
]


class WithKinds(Backend):
    """The real backend, whose snapshot carries KINDS as its disk by kind
    (the core here may not split the disk by kind yet)."""

    def snapshot(self) -> Snapshot:
        return dataclasses.replace(super().snapshot(), by_kind=KINDS)


def test_by_kind_is_what_du_answers(demo: Demo) -> None:
    """None where `du` refuses `--by kind`, else its groups."""
    kinds = Backend().snapshot().by_kind
    ctx = core.Context.open(Env.from_environ(demo.fh.environ))
    try:
        try:
            groups = core.du(ctx, "kind")["groups"]
        except BadParams:
            assert kinds is None
            return
    finally:
        ctx.index.close()
    assert kinds is not None
    assert [g["key"] for g in kinds] == [g["key"] for g in groups]


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
@sync
async def test_the_disk_by_kind_beside_the_agents(demo: Demo, size: tuple[int, int]) -> None:
    app = AgentkeepApp(WithKinds())
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        chart = app.query_one("#by-agent")
        text = "\n".join(s.text for s in chart.render_lines(Region(0, 0, *chart.size)))
        assert "Disk by agent" in text and "Disk by kind" in text, text
        for words in ("transcripts", "tool output", "free pages", "core dumps"):
            assert words in text, f"{words!r} is not shown:\n{text}"
        assert "leftovers" not in text and "trash " not in text, "an empty group is shown"
        overview = app.query_one("#overview-pane")
        assert overview.max_scroll_y == 0, f"the overview scrolls at {size}"
        legend = app.query_one("#by-workspace")
        first = legend.render_lines(Region(0, 0, legend.size.width, 1))[0].text
        assert "reclaimable now (30d)" in first, "the bars' legend is not said"
