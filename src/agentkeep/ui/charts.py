"""Bars and the idle-age histogram, as rich text.

Each part of a bar has its own glyph as well as its own colour, so the
charts read the same with NO_COLOR (Textual then draws in monochrome).
"""

from __future__ import annotations

import bisect
import math
import time
from typing import Any

from rich.text import Text

from agentkeep.model import parse_rfc3339
from agentkeep.render import count, size
from agentkeep.ui.text import fit_end
from agentkeep.verdict import days_label

STAYS, RECLAIM = "█", "▒"
STAYS_STYLE, RECLAIM_STYLE = "cyan", "yellow"
CUT, CUT_STYLE = "┃", "red bold"
DAY = 86400.0


def _bar(total: int, reclaim: int, biggest: int, width: int) -> Text:
    """`total` on a scale where `biggest` fills `width` cells; its
    reclaimable part drawn last, in its own glyph (never rounded away)."""
    text = Text()
    if biggest <= 0 or width <= 0:
        return text.append(" " * width)
    cells = max(1, round(total / biggest * width)) if total else 0
    gone = min(cells, max(1, round(reclaim / biggest * width))) if reclaim else 0
    text.append(STAYS * (cells - gone), STAYS_STYLE)
    text.append(RECLAIM * gone, RECLAIM_STYLE)
    return text.append(" " * (width - cells))


FIGURE = 9  # " 114.6 kB": one figure and the space before it
MIN_BAR = 8  # the narrowest bar worth a sessions column beside it


def group_rows(
    title: Text,
    groups: list[dict[str, Any]],
    width: int,
    label: int,
    rows: int,
    *,
    sessions: bool = True,
) -> Text:
    """A title line with the figures' headings, then a line per group
    (largest first) in at most `rows` lines, the last of them summing the
    rest when not all fit: key, bar, size, what a prune reclaims now, and
    (`sessions`: the groups count sessions) the sessions where the width
    has room for them."""
    column = sessions and width >= label + 1 + MIN_BAR + 3 * FIGURE
    figures = 3 if column else 2
    shown = groups if len(groups) <= rows else groups[: max(0, rows - 1)]
    rest = groups[len(shown) :]
    biggest = max((g["bytes"] for g in shown), default=0)
    bar_width = max(4, width - label - 1 - figures * FIGURE)
    text = Text(no_wrap=True, overflow="ellipsis")
    headings = f" {'size':>8} {'reclaim':>8}" + (f" {'sessions':>8}" if column else "")
    text.append_text(title[: max(0, width - len(headings))])
    text.append(" " * max(0, width - len(headings) - title.cell_len))
    text.append(headings + "\n", "dim")
    for g in shown:
        total, reclaim = g["bytes"], g["reclaimable_bytes"]
        text.append(fit_end(str(g.get("key")), label).ljust(label) + " ")
        text.append_text(_bar(total, reclaim, biggest, bar_width))
        text.append(f" {size(total):>8} {size(reclaim) if reclaim else '-':>8}")
        text.append(f" {g['sessions']:>8}\n" if column else "\n")
    if rest and rows > 0:
        total = sum(g["bytes"] for g in rest)
        text.append(f"… and {len(rest)} more: {size(total)}", "dim")
        if sessions:
            n = sum(g["sessions"] for g in rest)
            text.append(f" in {count(n, 'session')}", "dim")
    text.rstrip()
    return text


# Bin edges of the histogram, in days; the retentions are added as edges of
# their own so a cutoff always falls between two bars.
EDGES = (1, 2, 7, 14, 30, 60, 90, 180, 365)


_EIGHTHS = " ▁▂▃▄▅▆▇█"


def histogram(
    sessions: list[dict[str, Any]],
    cutoffs: dict[str, float],
    width: int,
    height: int,
    now: float | None = None,
) -> Text:
    """A title line naming the cutoffs, then vertical bars of sessions by
    idle age, each retention's cutoff drawn as a line between the bars
    (`cutoffs`: retention in days by agent); counts and ages below."""
    now = time.time() if now is None else now
    edges = sorted({*EDGES, *(c for c in cutoffs.values() if c > 0)})
    counts = [0] * (len(edges) + 1)
    dated = [s["last_activity"] for s in sessions if s["last_activity"] is not None]
    for rfc in dated:
        counts[bisect.bisect_right(edges, max(0.0, (now - parse_rfc3339(rfc)) / DAY))] += 1
    found = list(zip([0.0, *edges], [*edges, math.inf], counts, strict=True))  # low, high, count
    cut = sorted(set(cutoffs.values()))
    cell = max(3, min(12, (width - len(cut)) // max(1, len(found))))
    top = max(counts)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("Sessions by idle age", "bold")
    if cut:
        names = days_label(cut[0])
        if len(cut) > 1:
            names = "; ".join(
                f"{days_label(c)} ({', '.join(sorted(a for a, d in cutoffs.items() if d == c))})"
                for c in cut
            )
        text.append("  ").append(CUT, CUT_STYLE).append(f" cutoff {names}: older goes")
    text.append("\n")

    def edge(low: float) -> None:
        if low in cut:
            text.append(CUT, CUT_STYLE)

    for row in range(height, 0, -1):
        for low, _, n in found:
            edge(low)
            eighths = 0 if top == 0 else round(n / top * height * 8)
            filled = min(8, max(0, eighths - (row - 1) * 8))
            if n and row == 1 and filled == 0:
                filled = 1  # a bar with any session shows
            style = RECLAIM_STYLE if any(low >= c for c in cut) else STAYS_STYLE
            text.append(_EIGHTHS[filled] * (cell - 1), style).append(" ")
        text.append("\n")
    for low, _, n in found:
        edge(low)
        text.append((str(n) if n else "")[: cell - 1].ljust(cell))
    text.append("\n")
    for low, high, _ in found:
        edge(low)
        label = f"<{days_label(high)}" if low == 0 else f"{days_label(low)}+"
        text.append(label[: cell - 1].ljust(cell), "dim")
    if undated := len(sessions) - len(dated):
        text.append(f" undated {undated}", "dim")
    return text
