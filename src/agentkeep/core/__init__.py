"""The functions the CLI and the daemon both call.

Each takes a Context (one user's config, adapters, index and state dir) and
plain parameters, and returns the contract's JSON shapes. The daemon adds
only watching, scheduling and serving around these; the CLI only parsing and
rendering. The modules, one concern each: context (one user's view),
indexing (the index brought up to the disk), sessions (`ls`, `show`, `pin`),
reclaim (`du` and what a prune would give back), pruning (`prune`, `purge`),
trashcan (the trash and `restore`), status.
"""

from __future__ import annotations

from agentkeep.core.context import Context, parse_age
from agentkeep.core.indexing import reconcile, refresh, relist, scan
from agentkeep.core.pruning import prune, purge
from agentkeep.core.reclaim import SUGGESTED_RETENTION, du, reclaim_hint, reclaimable
from agentkeep.core.sessions import find, ls_text, pin, session_json, show, states
from agentkeep.core.status import status_fields
from agentkeep.core.trashcan import expire_trash, restore, trash_empty, trash_list, trash_total

__all__ = [
    "SUGGESTED_RETENTION",
    "Context",
    "du",
    "expire_trash",
    "find",
    "ls_text",
    "parse_age",
    "pin",
    "prune",
    "purge",
    "reclaim_hint",
    "reclaimable",
    "reconcile",
    "refresh",
    "relist",
    "restore",
    "scan",
    "session_json",
    "show",
    "states",
    "status_fields",
    "trash_empty",
    "trash_list",
    "trash_total",
]
