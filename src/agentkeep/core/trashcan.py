"""The trash as a person sees it: list, empty, restore, and its expiry.
Always in-process (trash holds the mechanics)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentkeep import history
from agentkeep.core.context import Context, parse_age
from agentkeep.core.ending import ends_as
from agentkeep.core.indexing import refresh
from agentkeep.errors import Failed
from agentkeep.model import rfc3339
from agentkeep.prune.act import STOP
from agentkeep.trash import packing, restoring
from agentkeep.trash.entries import NoSuchEntry, TrashEntry, TrashError, list_entries
from agentkeep.trash.expiry import empty
from agentkeep.trash.restoring import RESTORED


def expire_trash(ctx: Context) -> list[TrashEntry]:
    """Let the trash's due entries go."""
    return ctx.trash_expiry.run(time.time())


def compress_trash(state_dir: Path) -> dict[str, int]:
    """Compress every trash entry still waiting (after a prune, and hourly)."""
    waiting = packing.waiting(state_dir)
    if not waiting:
        return {"compressed": 0, "bytes": 0, "compressed_bytes": 0, "waiting": 0}
    # The daemon stopping stops it between two entries (prune.STOP).
    done = packing.compress(waiting, state_dir, STOP.is_set)
    packed = [e.packed for e in done.packed if e.packed is not None]
    return {
        "compressed": len(packed),
        "bytes": sum(p.original for p in packed),
        "compressed_bytes": sum(p.bytes for p in packed),
        "waiting": done.waiting,
    }


def _entry_json(e: TrashEntry) -> dict[str, Any]:
    return {
        "agent": e.agent,
        "id": e.id,
        "parent": e.parent,
        "bytes": e.bytes,
        # What it takes now that it is compressed; null until it is.
        "compressed_bytes": None if e.packed is None else e.packed.bytes,
        "partial": e.partial,
        "trashed_at": rfc3339(e.trashed_at),
        "expires_at": rfc3339(e.expires_at),
        "last_activity": rfc3339(e.last_activity),
    }


def trash_list(state_dir: Path) -> dict[str, Any]:
    """Every entry in the trash."""
    return {"entries": [_entry_json(e) for e in list_entries(state_dir)]}


def trash_empty(state_dir: Path, older_than: str | None = None) -> dict[str, Any]:
    """Free the trash now (all of it, or what is older than `older_than`),
    each entry under its session's lease."""
    before = None if older_than is None else time.time() - parse_age(older_than, "--older-than")
    done = empty(state_dir, trashed_before=before)
    return {
        "emptied": [_entry_json(e) for e in done.removed],
        "held": [_entry_json(e) for e in done.held],
        "bytes": sum(e.bytes for e in done.removed),
    }


def trash_total(state_dir: Path) -> dict[str, int]:
    """What the trash holds: its sessions, and the bytes emptying it frees."""
    entries = list_entries(state_dir)
    kept = sum(e.bytes if e.packed is None else e.packed.bytes for e in entries)
    return {"bytes": kept, "sessions": len(entries)}


def restore(ctx: Context, agent: str, id: str) -> dict[str, Any]:
    """Put a session (and its trashed ancestors) back, into the index too."""
    sid = ctx.session_id(agent, id)
    try:
        result = restoring.restore(ctx.state_dir, agent, sid, now=time.time())
    except NoSuchEntry as exc:
        raise ends_as(exc, f"{exc}{_went(ctx.state_dir, agent, sid)}") from None
    except TrashError as exc:
        raise ends_as(exc) from None
    except OSError as exc:
        raise Failed(str(exc)) from None
    for entry in result.entries:
        refresh(ctx, entry.agent, entry.id)
    return {
        "restored": [
            {"agent": e.agent, "id": e.id, "bytes": e.bytes, "title": e.title}
            for e in result.entries
        ],
        "bytes": result.bytes,
        "paths": result.paths,
    }


def _went(state_dir: Path, agent: str, sid: str) -> str:
    """What the record says of a session not in the trash ("" when nothing)."""
    last = None
    for gone in history.read(state_dir):
        if (gone.agent, gone.id) == (agent, sid):
            last = gone
    if last is None or last.restorable:
        return ""
    what = f" ({last.title})" if last.title else ""
    if last.why == RESTORED:
        return f": it was restored at {rfc3339(last.time)}{what}"
    return f": it went for good ({last.why}) at {rfc3339(last.time)}{what}"
