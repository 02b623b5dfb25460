"""The overview: the daemon, the trash, disk use by agent, kind and
workspace (what a prune reclaims now drawn within each bar), and the
sessions by idle age with the retention's cutoff. It fits the pane whole,
down to 80x24: the charts share the rows the status and the histogram leave,
each summing in one line the groups it has no room for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from agentkeep.model import rfc3339
from agentkeep.render import age, count, size, when
from agentkeep.ui import charts
from agentkeep.ui.backend import Plan, Snapshot
from agentkeep.ui.text import home_relative
from agentkeep.verdict import Names, retention_label

TALL = 28  # rows of the pane from which the charts have room to breathe
GAP = 2  # cells between the charts by agent and by kind

# `du --by kind`'s groups in a label's worth of words; a key not here is
# shown as it comes, its dashes as spaces.
KIND_WORDS = {
    "database-rows": "db rows",
    "database-free-pages": "free pages",
    "runtime-leftovers": "leftovers",
    "agentkeep-state": "agentkeep",
}


class _Sized:
    """A renderable made for the width it is given (redrawn on resize)."""

    def __init__(self, make: Callable[[int], Text]) -> None:
        self.make = make

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.make(options.max_width)


class Overview(VerticalScroll):
    """The daemon and the charts, fitted to the pane."""

    can_focus = True

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._shown: tuple[Snapshot, Plan | None, str, str, Names] | None = None

    def compose(self) -> ComposeResult:
        """The status line and the charts."""
        yield Static("reading…", id="daemon")
        yield Static("", id="by-agent", classes="chart")
        yield Static("", id="by-workspace", classes="chart")
        yield Static("", id="histogram", classes="chart")

    def show(self, snap: Snapshot, plan: Plan | None, live: str, home: str, names: Names) -> None:
        """Show this snapshot and plan."""
        self._shown = (snap, plan, live, home, names)
        self._draw()

    def on_resize(self) -> None:
        """Drawn again for the new size."""
        self._draw()

    def _draw(self) -> None:
        if self._shown is None:
            return
        snap, plan, live, home, names = self._shown
        width = self.content_size.width or max(40, self.app.size.width - 2)
        height = self.size.height or max(10, self.app.size.height - 4)
        gap = 1 if height >= TALL else 0
        daemon = _pack(_status_parts(snap, plan, live, names), width)
        self.query_one("#daemon", Static).update(daemon)
        bars = 6 if gap else 3
        kinds = kind_groups(snap.by_kind)
        spaces = [{**g, "key": home_relative(g["key"], home)} for g in snap.by_workspace]
        used = len(daemon.wrap(self.app.console, width)) + 3 * gap + 2 + (1 + bars + 2)
        top, low = _share([max(len(snap.by_agent), len(kinds)), len(spaces)], height - used)
        for chart in self.query(".chart"):
            chart.styles.margin = (gap, 0, 0, 0)
        self.query_one("#by-agent", Static).update(_Sized(lambda w: _disk_top(snap, kinds, w, top)))
        spaces_title = titled("Disk by workspace", snap if kinds else None)
        self.query_one("#by-workspace", Static).update(
            _Sized(
                lambda w: charts.group_rows(
                    spaces_title, spaces, w, label=min(30, max(10, w // 3)), rows=low
                )
            )
        )
        cutoffs = {agent: seconds / charts.DAY for agent, seconds in snap.retentions.items()}
        sessions, now = snap.sessions, snap.taken_at
        self.query_one("#histogram", Static).update(
            _Sized(lambda w: charts.histogram(sessions, cutoffs, w, bars, now))
        )


def _share(wants: list[int], rows: int) -> list[int]:
    """`rows` lines dealt to charts wanting `wants` lines each, one at a
    time to the one with the fewest so far that wants more."""
    got = [0] * len(wants)
    for _ in range(max(0, rows)):
        open_ = [n for n, want in enumerate(wants) if got[n] < want]
        if not open_:
            break
        got[min(open_, key=lambda n: got[n])] += 1
    return got


def kind_groups(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`du --by kind`'s groups that hold anything, largest first, keyed by
    their words."""
    found = sorted((g for g in groups if g["bytes"] > 0), key=lambda g: g["bytes"], reverse=True)
    return [{**g, "key": KIND_WORDS.get(g["key"], g["key"].replace("-", " "))} for g in found]


def titled(words: str, snap: Snapshot | None = None) -> Text:
    """A chart's title; given `snap`, with the bars' legend after it."""
    text = Text().append(words, "bold")
    if snap is None:
        return text
    retention = (snap.status.get("config") or {}).get("retention")
    text.append("  ").append(charts.STAYS, charts.STAYS_STYLE)
    if not retention and not snap.retentions:
        return text.append(" on disk (no retention is set)")
    text.append(" stays ").append(charts.RECLAIM, charts.RECLAIM_STYLE)
    return text.append(f" reclaimable now ({retention or 'per agent'})")


def _disk_top(snap: Snapshot, kinds: list[dict[str, Any]], width: int, rows: int) -> Text:
    """The disk by agent, with the bars' legend; or where `du` splits the
    disk by kind, by agent and by kind side by side (the legend goes to the
    chart below, which has the width)."""
    if not kinds:
        return charts.group_rows(titled("Disk by agent", snap), snap.by_agent, width, 8, rows)
    half = (width - GAP) // 2
    agents = charts.group_rows(titled("Disk by agent"), snap.by_agent, half, 8, rows)
    label = min(12, max(len(str(g["key"])) for g in kinds))
    rest = width - GAP - half
    by_kind = charts.group_rows(titled("Disk by kind"), kinds, rest, label, rows, sessions=False)
    return _beside(agents, by_kind, half)


def _beside(left: Text, right: Text, width: int) -> Text:
    """`left`'s lines, each padded to `width` cells, with `right`'s after
    them GAP cells on."""
    lefts, rights = left.split("\n"), right.split("\n")
    out = Text(no_wrap=True, overflow="ellipsis")
    for n in range(max(len(lefts), len(rights))):
        line = lefts[n].copy() if n < len(lefts) else Text()
        line.pad_right(max(0, width - line.cell_len))
        out.append_text(line).append(" " * GAP)
        if n < len(rights):
            out.append_text(rights[n])
        out.append("\n")
    out.rstrip()
    return out


def _pack(parts: list[Text], width: int) -> Text:
    """The parts in order, as many on a line as fit whole in `width`, two
    spaces apart; a part that starts with a new line starts one."""
    out = Text()
    line = 0
    for part in parts:
        fresh = part.plain.startswith("\n")
        if line and not fresh and line + 2 + part.cell_len <= width:
            out.append("  ")
            line += 2
        elif line:
            out.append("\n")
            line = 0
        if fresh:
            part = part[1:]
        out.append_text(part)
        *_, last = part.plain.split("\n")
        line = cell_len(last) if "\n" in part.plain else line + part.cell_len
    return out


def _status_parts(snap: Snapshot, plan: Plan | None, live: str, names: Names) -> list[Text]:
    """The daemon, the retention, the last and next prune, the trash and
    what a prune would do now, each a part of its own (_pack)."""
    st = snap.status
    parts = [_daemon(snap, live)]
    config = st.get("config") or {}
    if not config.get("ok", True):
        error = Text("\n").append("config error: ", "red bold").append(str(config.get("error")))
        parts.append(error.append(" (nothing is pruned until it is fixed)"))
    else:
        retention = config.get("retention") or _per_agent(snap)
        parts.append(Text().append("retention ", "bold").append(retention))
    parts.append(_last_prune(st, snap.taken_at))
    if st.get("next_prune"):
        parts.append(Text().append("next ", "bold").append(when(st["next_prune"], snap.taken_at)))
    parts.append(_trash_text(snap.trash, snap.taken_at, names))
    if st.get("paused"):
        paused = Text("\n").append("pruning paused: ", "yellow bold").append(str(st["paused"]))
        parts.append(paused.append(" (a prune from here, P, resumes it)"))
    parts.append(_would(snap, plan))
    return [p for p in parts if p.plain.strip()]


def _daemon(snap: Snapshot, live: str) -> Text:
    st = snap.status
    text = Text().append("daemon ", "bold")
    if st.get("pid") is None:
        text.append("not running", "yellow")
        return text.append(": nothing is pruned on schedule; r reads again")
    up = age(rfc3339(snap.taken_at - float(st.get("uptime_s") or 0)), snap.taken_at)
    mode = (st.get("watch") or {}).get("mode") or "-"
    text.append("running", "green")
    return text.append(f" pid {st['pid']}, up {up}, watch {mode}; {live}")


def _last_prune(st: dict[str, Any], now: float) -> Text:
    last = st.get("last_prune")
    text = Text().append("last prune ", "bold")
    if not last:
        return text.append("never")
    text.append(when(last.get("time"), now))
    text.append(f": {last.get('removed', 0)} removed ({size(last.get('bytes'))})")
    for error in last.get("errors") or []:
        text.append(f"\n  failed: {error}", "red")
    return text


def _would(snap: Snapshot, plan: Plan | None) -> Text:
    """What a prune would do now, or with no retention what 30 days would."""
    text = Text()
    if plan is not None and plan.report is not None:
        report = plan.report
        gone = sum(r["bytes"] for r in report["removed"])
        text.append("a prune now ", "bold")
        text.append(f"would take {count(len(report['removed']), 'session')} ({size(gone)}), ")
        text.append(f"keep {len(report['kept'])} old")
        if report["failed"]:
            text.append(f", fail on {len(report['failed'])}", "red")
        taken = when(rfc3339(plan.taken_at), snap.taken_at)
        text.append(f"  (dry run {taken}: P)", "dim")
    elif snap.hint is not None and snap.hint.get("sessions"):
        hint = snap.hint
        text.append(f"a {hint['retention']} retention", "bold")
        text.append(f" would reclaim {size(hint['bytes'])} in {count(hint['sessions'], 'session')}")
        text.append(f": add {hint['config_line']} to {hint['config_path']}", "dim")
    return text


def _per_agent(snap: Snapshot) -> str:
    if not snap.retentions:
        return "none: nothing is ever pruned"
    return ", ".join(f"{a} {retention_label(s)}" for a, s in sorted(snap.retentions.items()))


def _trash_text(entries: list[dict[str, Any]], now: float, names: Names) -> Text:
    text = Text()
    text.append("trash ", "bold")
    if not entries:
        return text.append("empty")
    total = sum(e["bytes"] for e in entries)
    first = min(entries, key=lambda e: e["expires_at"])
    text.append(f"{count(len(entries), 'session')}, {size(total)}; next expiry ")
    text.append(when(first["expires_at"], now))
    text.append(f" ({first['agent']} {names(first['id'])})", "dim")
    return text
