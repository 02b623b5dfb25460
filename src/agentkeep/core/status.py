"""The fields of `status` the core knows."""

from __future__ import annotations

from typing import Any

from agentkeep import __version__, compaction
from agentkeep.core.context import Context
from agentkeep.prune.pause import read_pause, state_disk_full
from agentkeep.statefiles import read_json


def status_fields(ctx: Context) -> dict[str, Any]:
    """The index's count, the config's health, the last prune, the pause;
    `unreadable` (by agent) only when there are some."""
    last = ctx.unsaved_prune or read_json(ctx.state_dir / "last_prune.json", None)
    if isinstance(last, dict):
        last = {k: v for k, v in last.items() if k != "ts"}
    waiting = compaction.waiting_bytes(ctx.state_dir)
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
        # Free pages of databases a prune could not compact yet.
        "compaction_waiting": {"bytes": sum(waiting.values()), "databases": len(waiting)}
        if waiting
        else None,
    }
    unreadable = ctx.index.unreadable()
    if unreadable:
        fields["unreadable"] = unreadable
    return fields
