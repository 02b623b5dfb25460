"""The overview: the daemon, the trash, disk use by agent and by workspace
(what the configured retention reclaims now drawn within each bar), and the
sessions by idle age with the retention's cutoff."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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

DAY = 86400.0


class Sized:
    """A renderable made for the width it is given (redrawn on resize)."""

    def __init__(self, make: Callable[[int], Text]) -> None:
        self.make = make

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.make(options.max_width)


class Overview(VerticalScroll):
    can_focus = True

    def compose(self) -> ComposeResult:
        yield Static("reading…", id="daemon")
        yield Static("", id="by-agent", classes="chart")
        yield Static("", id="by-workspace", classes="chart")
        yield Static("", id="histogram", classes="chart")

    def show(self, snap: Snapshot, plan: Plan | None, live: str, home: str, names: Names) -> None:
        daemon = daemon_text(snap, plan, live)
        daemon.append("\n").append_text(trash_text(snap.trash, snap.taken_at, names))
        self.query_one("#daemon", Static).update(daemon)
        retention = (snap.status.get("config") or {}).get("retention")
        if snap.retentions and not retention:
            retention = "per agent"
        title = Text("Disk by agent", "bold").append("  ").append_text(charts.legend(retention))
        agents = snap.by_agent
        spaces = [{**g, "key": home_relative(g["key"], home)} for g in snap.by_workspace]
        tall = self.size.height >= 26  # the screen's -tall (32 rows) less title, tabs, footer
        self.query_one("#by-agent", Static).update(
            Sized(lambda w: charts.group_rows(title, agents, w, label=8, limit=8))
        )
        spaces_title = Text("Disk by workspace", "bold")
        self.query_one("#by-workspace", Static).update(
            Sized(
                lambda w: charts.group_rows(
                    spaces_title, spaces, w, label=min(30, max(10, w // 3)), limit=8 if tall else 4
                )
            )
        )
        cutoffs = {agent: seconds / DAY for agent, seconds in snap.retentions.items()}
        sessions, now = snap.sessions, snap.taken_at
        height = 6 if tall else 3
        self.query_one("#histogram", Static).update(
            Sized(lambda w: charts.histogram(sessions, cutoffs, w, height, now))
        )


def daemon_text(snap: Snapshot, plan: Plan | None, live: str) -> Text:
    st = snap.status
    text = Text()
    config = st.get("config") or {}
    if st.get("pid") is None:
        text.append("daemon ", "bold").append("not running", "yellow")
        text.append(": nothing is pruned on schedule; r reads again")
    else:
        up = age(rfc3339(snap.taken_at - float(st.get("uptime_s") or 0)), snap.taken_at)
        mode = (st.get("watch") or {}).get("mode") or "-"
        text.append("daemon ", "bold").append("running", "green")
        text.append(f" pid {st['pid']}, up {up}, watch {mode}; {live}")
    text.append("\n")
    if not config.get("ok", True):
        text.append("config error: ", "red bold").append(str(config.get("error")))
        text.append(" (nothing is pruned until it is fixed)\n")
    else:
        text.append("retention ", "bold").append(config.get("retention") or _per_agent(snap))
    last = st.get("last_prune")
    if last:
        text.append("  last prune ", "bold").append(when(last.get("time"), snap.taken_at))
        text.append(f": {last.get('removed', 0)} removed ({size(last.get('bytes'))})")
        for error in last.get("errors") or []:
            text.append(f"\n  failed: {error}", "red")
    else:
        text.append("  last prune ", "bold").append("never")
    if st.get("next_prune"):
        text.append("  next ", "bold").append(when(st["next_prune"], snap.taken_at))
    if st.get("paused"):
        text.append("\n")
        text.append("pruning paused: ", "yellow bold").append(str(st["paused"]))
        text.append(" (a prune from here, P, resumes it)")
    if plan is not None and plan.report is not None:
        report = plan.report
        gone = sum(r["bytes"] for r in report["removed"])
        text.append("\n")
        text.append("a prune now ", "bold")
        text.append(f"would take {count(len(report['removed']), 'session')} ({size(gone)}), ")
        text.append(f"keep {len(report['kept'])} old")
        if report["failed"]:
            text.append(f", fail on {len(report['failed'])}", "red")
        taken = when(rfc3339(plan.taken_at), snap.taken_at)
        text.append(f"  (dry run {taken}: P)", "dim")
    elif snap.hint is not None and snap.hint.get("sessions"):
        hint = snap.hint
        text.append(f"\na {hint['retention']} retention", "bold")
        text.append(f" would reclaim {size(hint['bytes'])} in {count(hint['sessions'], 'session')}")
        text.append(f": add {hint['config_line']} to {hint['config_path']}", "dim")
    return text


def _per_agent(snap: Snapshot) -> str:
    if not snap.retentions:
        return "none: nothing is ever pruned"
    return ", ".join(f"{a} {retention_label(s)}" for a, s in sorted(snap.retentions.items()))


def trash_text(entries: list[dict[str, Any]], now: float, names: Names) -> Text:
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
