"""The daemon's `status` as a person reads it."""

from __future__ import annotations

from typing import Any

from agentkeep.render.sessions import retention_hint, unreadable
from agentkeep.render.table import RED, YELLOW, Out
from agentkeep.render.words import count, duration, size, when


def status(out: Out, doc: dict[str, Any]) -> None:
    """The daemon, the config, the last and next prune, and what waits."""
    if doc.get("pid") is None:
        out.line("agentkeep daemon: not running")
    else:
        out.line(f"agentkeep daemon: pid {doc['pid']}, up {duration(doc.get('uptime_s') or 0)}")

    def field(label: str, value: str, code: str = "") -> None:
        out.say(f"{out.style(f'{label:<17}', code) if code else f'{label:<17}'} {value}", "  ")

    field("sessions indexed", str(doc.get("sessions") or 0))
    watch = doc.get("watch") or {}
    if watch.get("mode"):
        roots = len(watch.get("roots") or [])
        field("watch", f"{watch['mode']} ({count(roots, 'root')})")
    config = doc.get("config") or {}
    if config.get("ok", True):
        field("retention", config.get("retention") or "none (nothing is pruned)")
    else:
        field("config error", str(config.get("error")), RED)
    last = doc.get("last_prune")
    field("last prune", when(last.get("time")) if last else "never")
    for error in (last or {}).get("errors") or []:
        field("failed", str(error), RED)
    if last and last.get("preview"):
        would = count(last.get("would_remove") or 0, "session")
        field(
            "preview",
            f"{last['preview']}: it would remove {would} ({size(last.get('would_free'))});"
            " see them with `agentkeep prune --dry-run`",
            YELLOW,
        )
    if doc.get("pid") is not None:
        field("next prune", when(doc["next_prune"]) if doc.get("next_prune") else "none scheduled")
    if doc.get("paused"):
        field("paused", f"{doc['paused']} (run `agentkeep prune` once to resume)", YELLOW)
    for line in unreadable(doc):
        field("cannot list", line, YELLOW)
    waiting = doc.get("compaction_waiting")
    if waiting:
        field(
            "compaction",
            f"{size(waiting['bytes'])} of free pages wait in"
            f" {count(waiting['databases'], 'database')} a process has open",
        )
    retention_hint(out, doc.get("reclaim_hint"))
