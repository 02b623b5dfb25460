"""The trash: pruned sessions wait here, restorable, until they expire.

The modules: entries (an entry and its entry.json, finding and reading
them), writing (an entry written during a prune: renamed in, nothing
copied), rows (the database rows an entry keeps), packing (an entry
compressed after the prune, and unpacked again: archive and unpack are
its format), moveback (a tree moved back, never overwriting), restoring
(a session and its trashed ancestors put back), restored (when each was
last restored), expiry (expiry and emptying). Every action on an entry takes its session's leases
(leases.take_session): it never acts on a session someone holds, nor
races a prune of it.
Each name is imported from its module when first asked for (agentkeep.lazy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentkeep import lazy

if TYPE_CHECKING:
    from agentkeep.trash.entries import (
        NoSuchEntry,
        Packing,
        RestoreConflict,
        RestoreRefused,
        TrashEntry,
        TrashError,
        TrashItem,
        agent_dirs,
        entry_dir,
        list_entries,
        trash_dir,
    )
    from agentkeep.trash.expiry import Emptied, Expiry, empty
    from agentkeep.trash.packing import Compressed, compress, waiting
    from agentkeep.trash.restored import restored_at
    from agentkeep.trash.restoring import RestoreResult, restore
    from agentkeep.trash.rows import saved_rows
    from agentkeep.trash.writing import TrashWriter, open_entry
else:  # the type checker sees the imports, Python this
    __all__, __getattr__ = lazy.names(
        __name__,
        {
            "packing": ("Compressed", "compress", "waiting"),
            "entries": (
                "NoSuchEntry",
                "Packing",
                "RestoreConflict",
                "RestoreRefused",
                "TrashEntry",
                "TrashError",
                "TrashItem",
                "agent_dirs",
                "entry_dir",
                "list_entries",
                "trash_dir",
            ),
            "expiry": ("Emptied", "Expiry", "empty"),
            "restoring": ("RestoreResult", "restore"),
            "restored": ("restored_at",),
            "rows": ("saved_rows",),
            "writing": ("TrashWriter", "open_entry"),
        },
    )
