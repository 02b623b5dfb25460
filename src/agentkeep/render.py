"""Text for a person: rich tables, human sizes and ages.

Colour only on a terminal (rich decides from the stream); `--json` output
never comes through here.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentkeep.model import parse_rfc3339


def size(n: int | None) -> str:
    """Decimal units, as disks are sold: 3.2 GB."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def age(rfc: str | None, now: float | None = None) -> str:
    """How long ago, in the largest whole unit: 41 days, 3 hours."""
    if rfc is None:
        return "undated"
    seconds = max(0.0, (now if now is not None else time.time()) - parse_rfc3339(rfc))
    for unit, length in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= length:
            n = int(seconds // length)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return "just now"


def when(rfc: str | None, now: float | None = None) -> str:
    """A moment relative to now: "3 h ago", "in 6 days", "now"."""
    if rfc is None:
        return "never"
    delta = parse_rfc3339(rfc) - (now if now is not None else time.time())
    seconds = abs(delta)
    for unit, length in (("days", 2 * 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            # Days to the nearest (a week from now reads "in 7 days"), the
            # smaller units whole.
            n = round(seconds / 86400) if unit == "days" else int(seconds // length)
            text = f"{n} {unit}"
            return f"in {text}" if delta > 0 else f"{text} ago"
    return "now"


# Ids are copied into commands: never wrapped. Everything else may fold.
_NO_WRAP = (
    "ID",
    "AGENT",
    "KEPT",
    "REMOVED",
    "WOULD REMOVE",
    "TRASHED",
    "WOULD TRASH",
    "SIZE",
    "IDLE",
    "STATE",
    "REASON",
)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _table(*columns: str, right: tuple[str, ...] = ()) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in columns:
        table.add_column(
            col,
            justify="right" if col in right else "left",
            overflow="fold",
            no_wrap=col in _NO_WRAP,
        )
    return table


def _short(session_id: str) -> str:
    return session_id if len(session_id) <= 36 else session_id[:33] + "..."


def sessions(console: Console, rows: list[dict[str, Any]], hint: dict[str, Any] | None) -> None:
    table = _table("AGENT", "ID", "IDLE", "SIZE", "STATE", "WORKSPACE", right=("IDLE", "SIZE"))
    for r in rows:
        table.add_row(
            r["agent"],
            _short(r["id"]),
            age(r["last_activity"]),
            size(r["bytes"]),
            r["state"],
            r["workspace"] or "",
        )
    console.print(table)
    total = sum(r["bytes"] for r in rows)
    console.print(f"{_count(len(rows), 'session')}, {size(total)}")
    _hint(console, hint)


def _hint(console: Console, hint: dict[str, Any] | None) -> None:
    if not hint:
        return
    sessions = _count(hint["sessions"], "session")
    console.print(
        f"No retention is set, so nothing is ever pruned. A {hint['retention']} retention would "
        f"reclaim {size(hint['bytes'])} from {sessions}; to turn it on, add this line to "
        f"{hint['config_path']}:\n  {hint['config_line']}"
    )


def show(console: Console, doc: dict[str, Any]) -> None:
    console.print(f"[bold]{doc['agent']} {doc['id']}[/bold]  {doc['state']}")
    for label, value in (
        ("workspace", doc["workspace"] or "-"),
        ("last activity", when(doc["last_activity"]) if doc["last_activity"] else "undated"),
        ("size", size(doc["bytes"])),
        ("parent", doc["parent"] or "-"),
        ("children", ", ".join(doc["children"]) or "-"),
    ):
        console.print(f"  {label:<14} {value}")
    if doc.get("unsafe"):
        console.print(f"  [yellow]unsafe:[/yellow] {doc['unsafe']}")
    table = _table("KIND", "SIZE", "PATH", right=("SIZE",))
    for a in doc["artifacts"]:
        path = a["path"] + ("  (behind a link: never removed)" if a.get("linked") else "")
        table.add_row(a["kind"], size(a["bytes"]), path)
    console.print(table)
    for h in doc["holders"]:
        pid = h["pid"] if h["pid"] is not None else "-"
        console.print(f"  held by {h['kind']} {pid} {h.get('detail', '')}".rstrip())


def du(
    console: Console,
    doc: dict[str, Any],
    hint: dict[str, Any] | None,
    held: dict[str, int] | None = None,
) -> None:
    """`held`: what the trash holds (disk use too, until it expires)."""
    table = _table(
        doc["by"].upper(),
        "SIZE",
        "SESSIONS",
        "RECLAIMABLE",
        right=("SIZE", "SESSIONS", "RECLAIMABLE"),
    )
    for g in doc["groups"]:
        table.add_row(g["key"], size(g["bytes"]), str(g["sessions"]), size(g["reclaimable_bytes"]))
    console.print(table)
    total = sum(g["bytes"] for g in doc["groups"])
    reclaim = sum(g["reclaimable_bytes"] for g in doc["groups"])
    console.print(f"total {size(total)}, reclaimable now {size(reclaim)}")
    if held and held["sessions"]:
        console.print(
            f"the trash holds {size(held['bytes'])} more ({_count(held['sessions'], 'session')}):"
            " freed when it expires, or now by `agentkeep trash --empty`"
        )
    _hint(console, hint)


def scan(console: Console, doc: dict[str, Any]) -> None:
    table = _table("AGENT", "SESSIONS", right=("SESSIONS",))
    for agent, n in doc["sessions"].items():
        table.add_row(agent, str(n))
    console.print(table)
    console.print(f"{doc['artifacts']} artifacts, {size(doc['bytes'])}, in {doc['seconds']:.2f} s")


def report(console: Console, doc: dict[str, Any]) -> None:
    trash = doc.get("trash")
    if trash:
        verb = "would move to the trash" if doc["dry_run"] else "moved to the trash"
    else:
        verb = "would remove" if doc["dry_run"] else "removed"
    if doc.get("paused"):
        console.print(f"[yellow]paused:[/yellow] {doc['paused']}")
    if doc["removed"]:
        if doc["dry_run"]:
            title = "WOULD TRASH" if trash else "WOULD REMOVE"
        else:
            title = "TRASHED" if trash else "REMOVED"
        table = _table(title, "ID", "SIZE", "IDLE", right=("SIZE", "IDLE"))
        for r in doc["removed"]:
            table.add_row(r["agent"], _short(r["id"]), size(r["bytes"]), age(r["last_activity"]))
        console.print(table)
    # Sessions over max_removals are one line, not thousands of rows.
    capped = [k for k in doc["kept"] if k["reason"] == "capped"]
    listed = [k for k in doc["kept"] if k["reason"] != "capped"]
    if listed:
        table = _table("KEPT", "ID", "REASON", "DETAIL")
        for k in listed:
            table.add_row(k["agent"], _short(k["id"]), k["reason"], k.get("detail", ""))
        console.print(table)
    if capped:
        why = sorted({k.get("detail") or "over max_removals" for k in capped})
        waits = "waits" if len(capped) == 1 else "wait"
        console.print(
            f"{_count(len(capped), 'more old session')} {waits} for the next run"
            f" (capped: {'; '.join(why)})"
        )
    for f in doc["failed"]:
        console.print(f"[red]failed[/red] {f['agent']} {f['id']}: {f['reason']}")
    for r in doc["residual"]:
        console.print(f"residual {r['agent']} {r['id']}: {r['path']}")
    reclaimed = sum(r["bytes"] for r in doc["removed"])
    console.print(
        f"{len(doc['removed'])} {verb} ({size(reclaimed)}), {len(doc['kept'])} kept, "
        f"{len(doc['failed'])} failed"
    )
    if trash and doc["removed"]:
        freed = trash["freed_bytes"]
        console.print(
            f"They wait in the trash until it expires {when(trash['until'])}:"
            f" {'that frees' if doc['dry_run'] else 'this freed'} {size(freed)} now,"
            f" and {size(trash['bytes'])} then"
            " (`agentkeep trash --empty` frees it at once; `agentkeep restore` brings one back)."
        )


def status(console: Console, doc: dict[str, Any]) -> None:
    if doc.get("pid") is None:
        console.print("agentkeep daemon: not running")
    else:
        console.print(f"agentkeep daemon: pid {doc['pid']}, up {int(doc.get('uptime_s') or 0)} s")
    console.print(f"  sessions indexed  {doc.get('sessions')}")
    watch = doc.get("watch") or {}
    if watch:
        console.print(f"  watch             {watch.get('mode')}")
    config = doc.get("config") or {}
    if config.get("ok"):
        console.print(
            f"  retention         {config.get('retention') or 'none (nothing is pruned)'}"
        )
    else:
        console.print(f"  [red]config error[/red]      {config.get('error')}")
    last = doc.get("last_prune")
    console.print(f"  last prune        {when(last.get('time')) if last else 'never'}")
    for error in (last or {}).get("errors") or []:
        console.print(f"  [red]failed[/red]            {error}")
    if last and last.get("preview"):
        would = _count(last["removed"], "session")
        console.print(
            f"  [yellow]preview[/yellow]           {last['preview']}: it would remove {would}"
            f" ({size(last.get('bytes'))}); see them with `agentkeep prune --dry-run`"
        )
    console.print(
        f"  next prune        {when(doc['next_prune']) if doc.get('next_prune') else '-'}"
    )
    if doc.get("paused"):
        resume = "run `agentkeep prune` once to resume"
        console.print(f"  [yellow]paused[/yellow]            {doc['paused']} ({resume})")
    _hint(console, doc.get("reclaim_hint"))


def emptied(console: Console, doc: dict[str, Any]) -> None:
    console.print(
        f"emptied {_count(len(doc['emptied']), 'session')} from the trash:"
        f" {size(doc['bytes'])} freed"
    )
    for e in doc["held"]:
        console.print(f"kept {e['agent']} {e['id']}: its lease is held (in use); try again later")


def trash_entries(console: Console, entries: list[dict[str, Any]]) -> None:
    table = _table("AGENT", "ID", "SIZE", "TRASHED", "EXPIRES", "RESTORES", right=("SIZE",))
    for e in entries:
        table.add_row(
            e["agent"],
            _short(e["id"]),
            size(e["bytes"]),
            when(e["trashed_at"]),
            when(e["expires_at"]),
            "partly" if e["partial"] else "all",
        )
    console.print(table)
    total = size(sum(e["bytes"] for e in entries))
    console.print(f"{_count(len(entries), 'session')} in the trash, {total}")
    if any(e["partial"] for e in entries):
        console.print(
            "partly: some of it was removed at once (it lay on another file system,"
            " or an agent's own command removed it), and cannot come back."
        )


class Working:
    """A progress bar for work that takes longer than `delay` seconds, shown
    only on a terminal and gone when the work is done. `update(done, total)`
    is the callback the core's scan and prune accept."""

    def __init__(self, console: Console, what: str, delay: float = 2.0) -> None:
        self.enabled = console.is_terminal
        self._bar = Progress(
            TextColumn(what),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task = self._bar.add_task(what, total=None)
        self._timer = threading.Timer(delay, self._bar.start)
        self._timer.daemon = True

    def update(self, done: int, total: int) -> None:
        self._bar.update(self._task, completed=done, total=total)

    def __enter__(self) -> Working:
        if self.enabled:
            self._timer.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._timer.cancel()
        if self._bar.live.is_started:  # stopping a bar never shown would print a blank line
            self._bar.stop()
