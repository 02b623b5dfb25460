"""Prune: plan which idle sessions go, then act on each under its lease.

Every session old enough to go ends in the report: removed, kept with a
reason, or failed (invariant 9). The modules: report (what a run reports),
view (the disk as listed), evidence (who holds a session), plan (the pure
decision), act (leases, the check again, the journal, the removal),
recovery (finishing the journal), pause (the scheduled prune's pause files).
"""

from __future__ import annotations

from agentkeep.prune.act import BATCH, STOP, Pruner
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
from agentkeep.prune.view import DiskView

__all__ = [
    "BATCH",
    "STOP",
    "DiskView",
    "Failed",
    "Kept",
    "PruneOptions",
    "PrunePlan",
    "PruneRefused",
    "PruneReport",
    "Pruner",
    "Removed",
    "ancestors",
    "check_floor",
    "decide",
    "descendants",
    "lift_pause",
    "pause_reason",
    "read_pause",
    "record_last_prune",
    "state_disk_full",
]
