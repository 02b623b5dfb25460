"""Prune: plan which idle sessions go, then act on each under its lease.

Every session old enough to go ends in the report: removed, kept with a
reason, or failed (invariant 9). The modules: report (what a run reports),
view (the disk as listed), evidence (who holds a session), plan (the pure
decision), remove (taking and removing one session), act (the plan carried
out batch by batch), recovery (finishing the journal), run (one run's
steps), pause (the scheduled prune's pause files), lock (one prune at a
time).
Each name is imported from its module when first asked for (agentkeep.lazy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentkeep import lazy

if TYPE_CHECKING:
    from agentkeep.prune.act import BATCH, STOP
    from agentkeep.prune.pause import (
        lift_pause,
        pause_reason,
        read_pause,
        record_last_prune,
        state_disk_full,
    )
    from agentkeep.prune.plan import PrunePlan, ancestors, check_floor, decide, descendants
    from agentkeep.prune.report import (
        Failed,
        Kept,
        PruneOptions,
        PruneRefused,
        PruneReport,
        Removed,
    )
    from agentkeep.prune.run import Pruner
    from agentkeep.prune.view import DiskView
else:  # the type checker sees the imports, Python this
    __all__, __getattr__ = lazy.names(
        __name__,
        {
            "act": ("BATCH", "STOP"),
            "pause": (
                "lift_pause",
                "pause_reason",
                "read_pause",
                "record_last_prune",
                "state_disk_full",
            ),
            "plan": ("PrunePlan", "ancestors", "check_floor", "decide", "descendants"),
            "report": ("Failed", "Kept", "PruneOptions", "PruneRefused", "PruneReport", "Removed"),
            "run": ("Pruner",),
            "view": ("DiskView",),
        },
    )
