"""`du --by kind`: the disk the agents fill, by what fills it, with what a
prune would give back now (`bytes` apparent, `disk_bytes` allocated).

Sessions' artifacts come from the index, each kind mapped to a group by
KIND_GROUPS (an unknown kind counts as "other", never dropped); databases,
leftovers, the trash and agentkeep's state are looked at on disk. A group's
`sessions` counts the sessions with an artifact in it (the trash's: those it
holds; free pages, leftovers and state: 0).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from agentkeep import compaction, disk, leftovers
from agentkeep.core.context import Context
from agentkeep.trash.entries import list_entries

TRANSCRIPTS = "transcripts"
TOOL_OUTPUT = "tool-output"
SNAPSHOTS = "snapshots"
DEBUG_LOGS = "debug-logs"
ROWS = "database-rows"
FREE_PAGES = "database-free-pages"
LEFTOVERS = "runtime-leftovers"
TRASH = "trash"
STATE = "agentkeep-state"
OTHER = "other"

# Every artifact kind of every adapter, by group. Transcripts: the
# conversation and the records a session is listed, resumed and locked by.
_KINDS: dict[str, tuple[str, ...]] = {
    TRANSCRIPTS: ("transcript", "rollout", "archived-rollout", "chat", "chat-copy", "chat-history")
    + ("data",)
    + ("session-info", "messages", "parts", "metadata", "events", "workspace", "store-dir")
    + ("todo", "todos", "tasks", "registry", "registry-key", "session-env", "tui-reference")
    + ("remote-tip", "usage-data", "job", "recording", "session-dir", "session-lock")
    + ("lease-lock", "fork-lock", "inuse-lock", "inuse-hold", "operation-lock"),
    TOOL_OUTPUT: ("tmp", "subagents", "tool-outputs", "tool-output", "degraded-blobs", "files")
    + ("research", "session-db", "uploads"),
    SNAPSHOTS: ("file-history", "checkpoints", "snapshots", "session-diff"),
    DEBUG_LOGS: ("debug-log", "log"),
    ROWS: ("row",),
}
KIND_GROUPS = {kind: group for group, kinds in _KINDS.items() for kind in kinds}
# Claude's `projects/<key>/<id>/` holds its subagents' and tools' output.
AGENT_KIND_GROUPS = {("claude", "session-dir"): TOOL_OUTPUT}
ORDER = (*_KINDS, FREE_PAGES, LEFTOVERS, TRASH, STATE, OTHER)


def group_of(agent: str, kind: str) -> str:
    """The group an agent's artifact kind counts in."""
    return AGENT_KIND_GROUPS.get((agent, kind)) or KIND_GROUPS.get(kind, OTHER)


@dataclass
class Group:
    """One group of the du shape: apparent (st_size) and allocated bytes, and
    of each what a prune would reclaim now."""

    key: str
    bytes: int = 0
    disk_bytes: int = 0
    sessions: int = 0
    reclaimable_bytes: int = 0
    reclaimable_disk_bytes: int = 0

    def add(self, size: int, disk_size: int, *, reclaimable: bool = False) -> None:
        """Count what one more thing takes."""
        self.bytes += size
        self.disk_bytes += disk_size
        if reclaimable:
            self.reclaim(size, disk_size)

    def reclaim(self, size: int, disk_size: int) -> None:
        """Count what a prune would give back of it."""
        self.reclaimable_bytes += size
        self.reclaimable_disk_bytes += disk_size


def du_by_kind(ctx: Context, reclaim: set[tuple[str, str]]) -> dict[str, Any]:
    """The contract's du shape, a group per kind, largest first (on disk)."""
    found = {key: Group(key) for key in ORDER}
    _sessions(ctx, reclaim, found)
    _databases(ctx, found)
    _leftovers(ctx, found)
    _agentkeep(ctx, found)
    ordered = sorted(found.values(), key=lambda g: (-g.disk_bytes, ORDER.index(g.key)))
    return {"by": "kind", "groups": [asdict(g) for g in ordered]}


def _sessions(ctx: Context, reclaim: set[tuple[str, str]], found: dict[str, Group]) -> None:
    """Each session's artifacts by group, as indexed."""
    seen: set[tuple[str, str, str]] = set()
    for agent, sid, kind, size, disk_size in ctx.index.kind_totals():
        key = group_of(agent, kind)
        found[key].add(size, disk_size, reclaimable=(agent, sid) in reclaim)
        if (agent, sid, key) not in seen:
            seen.add((agent, sid, key))
            found[key].sessions += 1


def _databases(ctx: Context, found: dict[str, Group]) -> None:
    """The agents' databases: their free pages (reclaimable where a prune owes
    them back), and the rest, their rows."""
    owed = compaction.owed(ctx.state_dir)
    for db in {os.fspath(p) for a in ctx.adapters.values() for p in a.databases()}:
        size, disk_size = _files(db + suffix for suffix in ("", "-wal", "-shm"))
        free = compaction.free_bytes(db) or 0
        found[FREE_PAGES].add(free, min(free, disk_size), reclaimable=db in owed)
        found[ROWS].add(max(0, size - free), max(0, disk_size - free))


def _files(paths: Iterable[str]) -> tuple[int, int]:
    size = disk_size = 0
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        size += st.st_size
        disk_size += st.st_blocks * 512
    return size, disk_size


def _leftovers(ctx: Context, found: dict[str, Group]) -> None:
    """The user's files of a leftover's name: reclaimable when garbage now."""
    files = leftovers.find(ctx.env.tmp_dirs, leftovers.kinds_for(ctx.adapters))
    mine = [f for f in files if stat.S_ISREG(f.st.st_mode) and f.st.st_uid == ctx.env.uid]
    if not mine:
        return
    named = leftovers.named_paths(mine, leftovers.asking(ctx.adapters))
    now, maps = time.time(), leftovers.mapped(mine)
    gone = {
        f.path for f in leftovers.garbage(mine, uid=ctx.env.uid, now=now, mapped=maps, named=named)
    }
    for f in mine:
        found[LEFTOVERS].add(f.st.st_size, f.st.st_blocks * 512, reclaimable=f.path in gone)


def _agentkeep(ctx: Context, found: dict[str, Group]) -> None:
    """The trash (entries past their time reclaimable) and the rest of the
    state dir."""
    whole = disk.measure(ctx.state_dir)
    held = disk.measure(ctx.state_dir / "trash")
    entries = list_entries(ctx.state_dir)
    found[TRASH].sessions = len(entries)
    if held is not None:
        found[TRASH].add(held.bytes, held.disk_bytes)
    now = time.time()
    for entry in entries:
        if entry.expires_at <= now and (tree := disk.measure(entry.path)) is not None:
            found[TRASH].reclaim(tree.bytes, tree.disk_bytes)
    if whole is not None:
        size, disk_size = (held.bytes, held.disk_bytes) if held is not None else (0, 0)
        found[STATE].add(whole.bytes - size, whole.disk_bytes - disk_size)
