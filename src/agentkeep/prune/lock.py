"""`<state>/prune.lock`: one prune at a time per user, whoever runs it (the
daemon's schedule, a socket request, the CLI in-process)."""

from __future__ import annotations

from pathlib import Path

import structlog

from agentkeep.errors import Failed
from agentkeep.leases import Lease, LeaseError, hold_exclusive, try_exclusive

log = structlog.get_logger("agentkeep.leases")


class PrunerLock:
    """The prune lock, taken by acquire() and given back by release()."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / "prune.lock"
        self._lease: Lease | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._lease is not None and self._lease.held

    def acquire(self, *, wait: bool) -> bool:
        """Take the lock; False when another prune holds it and `wait` is
        False, else waits as long as it runs (Ctrl-C ends the wait). Raises
        Failed when the lock cannot be taken at all: then no prune runs."""
        if self.held:
            return True
        try:
            self._lease = try_exclusive(self.path)
            if self._lease is None:
                if not wait:
                    return False
                log.warning(
                    "another prune is running; waiting for it to finish", lock=str(self.path)
                )
                self._lease = hold_exclusive(self.path)
        except (OSError, LeaseError) as exc:
            # A plain LeaseError names the path already: say its OSError.
            said = exc.__cause__ if type(exc) is LeaseError else exc
            raise Failed(f"cannot take the prune lock {self.path}: {said}") from exc
        return True

    def release(self) -> None:
        """Give the lock back (nothing when it is not held)."""
        if self._lease is not None:
            self._lease.release()
            self._lease = None
