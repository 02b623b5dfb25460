"""The fields of `status` the core knows: the index's count, the config's
health, the last prune, whether the schedule is paused, and what could not
be listed."""

from __future__ import annotations

from typing import Any

from agentkeep import __version__, compaction
from agentkeep.core.context import Context
from agentkeep.prune.pause import read_pause, state_disk_full
from agentkeep.statefiles import read_json


def status_fields(ctx: Context) -> dict[str, Any]:
    """`unreadable`: the places the index recorded as not listable, by
    agent, only when there are some (their sessions are kept unsafe)."""
    last = ctx.unsaved_prune or read_json(ctx.state_dir / "last_prune.json", None)
    if isinstance(last, dict):
        last = {k: v for k, v in last.items() if k != "ts"}
    fields = {
        "version": __version__,
        "sessions": ctx.index.count(),
        "config": {
            "ok": ctx.config_error is None,
            "error": ctx.config_error,
            "retention": ctx.config.retention_text if not ctx.config_error else None,
        },
        "last_prune": last,
        "paused": read_pause(ctx.state_dir) or state_disk_full(ctx.state_dir),
        "compaction_waiting": _compaction_waiting(ctx),
    }
    unreadable = ctx.index.unreadable()
    if unreadable:
        fields["unreadable"] = unreadable
    return fields


def _compaction_waiting(ctx: Context) -> dict[str, int] | None:
    """The free pages of databases a prune could not compact (a process had
    them open), which a later prune gives back."""
    waiting = compaction.waiting_bytes(ctx.state_dir)
    if not waiting:
        return None
    return {"bytes": sum(waiting.values()), "databases": len(waiting)}
