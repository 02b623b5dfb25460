"""The functions the CLI and the daemon both call.

Each takes a Context (one user's config, adapters, index and state dir) and
plain parameters, and returns the contract's JSON shapes. The daemon adds
only watching, scheduling and serving around these; the CLI only parsing and
rendering. The modules, one concern each: context (one user's view),
indexing (the index brought up to the disk), sessions (`ls`, `show`, `pin`),
reclaim (`du` and what a prune would give back), pruning (`prune`, `purge`),
trashcan (the trash and `restore`), gone (`history`, the record of what
went), status.

Each name is imported from its module when first asked for (agentkeep.lazy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentkeep import lazy

if TYPE_CHECKING:
    from agentkeep.core.context import Context, parse_age
    from agentkeep.core.gone import history_forget, history_list
    from agentkeep.core.indexing import reconcile, refresh, relist, scan
    from agentkeep.core.pruning import prune, purge
    from agentkeep.core.reclaim import SUGGESTED_RETENTION, du, reclaim_hint, reclaimable
    from agentkeep.core.sessions import find, ls_text, pin, session_json, show, states
    from agentkeep.core.status import status_fields
    from agentkeep.core.trashcan import (
        compress_trash,
        expire_trash,
        restore,
        trash_empty,
        trash_list,
        trash_total,
    )
else:  # the type checker sees the imports, Python this
    __all__, __getattr__ = lazy.names(
        __name__,
        {
            "context": ("Context", "parse_age"),
            "gone": ("history_forget", "history_list"),
            "indexing": ("reconcile", "refresh", "relist", "scan"),
            "pruning": ("prune", "purge"),
            "reclaim": ("SUGGESTED_RETENTION", "du", "reclaim_hint", "reclaimable"),
            "sessions": ("find", "ls_text", "pin", "session_json", "show", "states"),
            "status": ("status_fields",),
            "trashcan": (
                "compress_trash",
                "expire_trash",
                "restore",
                "trash_empty",
                "trash_list",
                "trash_total",
            ),
        },
    )
