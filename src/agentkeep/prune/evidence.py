"""Who holds a session: the evidence of use a prune's plan reads.

A session is in use when a process holds it (the process table, read through
the agent's adapter), when a lease of it is held (agentkeep's own, or a lock
file of the agent's, probed with leases.is_held), or when it is pinned. The
plan (plan.static_reason) asks only for what it needs, in that order, and
only of sessions old enough to go: a lease probe takes a flock for a
moment, and the process table is read at the first question. So the
evidence is looked up on demand, and the same lookup serves the plan and the
check under the leases (`fresh`), which asks it again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agentkeep import leases
from agentkeep.adapters.base import Adapter
from agentkeep.model import Holder, Session
from agentkeep.processes import ProcessTable

PROCESS_SNAPSHOT_TTL = 1.0


class Evidence(Protocol):
    """What the plan knows of a session's use."""

    def holders(self, s: Session) -> Sequence[Holder]:
        """The processes holding it."""
        ...

    def lease(self, s: Session) -> str | None:
        """A held lease of it, described (`lease <path>`), or None."""
        ...

    def pinned(self, s: Session) -> bool: ...


@dataclass(frozen=True)
class Observed:
    """Evidence as plain values, looked at already."""

    holding: Mapping[tuple[str, str], Sequence[Holder]] = field(default_factory=dict)
    leased: Mapping[tuple[str, str], str] = field(default_factory=dict)
    pins: frozenset[tuple[str, str]] = frozenset()

    def holders(self, s: Session) -> Sequence[Holder]:
        return self.holding.get(s.key, ())

    def lease(self, s: Session) -> str | None:
        return self.leased.get(s.key)

    def pinned(self, s: Session) -> bool:
        return s.key in self.pins


class Watch:
    """The evidence of one user's sessions, looked up when asked: one
    process table for a whole run, read again as it ages."""

    def __init__(
        self, adapters: dict[str, Adapter], state_dir: Path, pins: set[tuple[str, str]]
    ) -> None:
        self.adapters = adapters
        self.state_dir = state_dir
        self.pins = pins
        self._procs: ProcessTable | None = None
        self._procs_at = 0.0

    def evidence(self, fresh: bool = False) -> Evidence:
        """`fresh`: for the check under the lease: the process table is
        looked at again now (see procs), once for every session checked
        with this evidence (a batch whose leases are all held already)."""
        return _Looked(self, self.procs(fresh=True) if fresh else None)

    def procs(self, fresh: bool = False) -> ProcessTable:
        """The user's processes. `fresh` (the check under the lease): at least
        every process started since the last look is read, so one that began
        after the plan is seen; a full snapshot at most PROCESS_SNAPSHOT_TTL
        old also catches a command line exec'd in place."""
        stale = time.monotonic() - self._procs_at > PROCESS_SNAPSHOT_TTL
        if self._procs is None or stale:
            self._procs = ProcessTable.snapshot()
            self._procs_at = time.monotonic()
        elif fresh:
            self._procs = self._procs.refreshed()
        return self._procs

    def lease(self, s: Session) -> str | None:
        paths = [leases.lease_path(self.state_dir, s.agent, s.id)]
        paths += self.adapters[s.agent].lock_files(s)
        for path in paths:
            if leases.is_held(path):
                return f"lease {path}"
        return None


@dataclass(frozen=True)
class _Looked:
    watch: Watch
    # The table read for the check under the lease; None: the plan's, read
    # at its first question.
    procs: ProcessTable | None

    def holders(self, s: Session) -> Sequence[Holder]:
        procs = self.procs if self.procs is not None else self.watch.procs()
        return self.watch.adapters[s.agent].holders(s, procs)

    def lease(self, s: Session) -> str | None:
        return self.watch.lease(s)

    def pinned(self, s: Session) -> bool:
        return s.key in self.watch.pins
