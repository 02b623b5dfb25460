"""The one place each module's own error is said to end a request as one of
errors.py's kinds (and so with which exit code)."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from agentkeep import leases
from agentkeep.config import ConfigError
from agentkeep.errors import BadParams, Failed, Failure, Kind, NotFound, Refused
from agentkeep.statefiles import StateFileError
from agentkeep.trash.entries import NoSuchEntry, TrashError

if TYPE_CHECKING:
    from agentkeep.prune.report import PruneRefused

    Ending = TrashError | leases.LeaseError | StateFileError | PruneRefused | ConfigError


@cache
def _ends_as() -> tuple[tuple[type[Exception], type[Kind]], ...]:
    """The kind each error ends a request as; a subclass before its base."""
    # Imported when first asked: a command that runs no prune imports none of it.
    from agentkeep.prune.report import PruneRefused

    return (
        (NoSuchEntry, NotFound),
        (TrashError, Failed),
        (leases.LeaseHeld, Refused),  # the lease is being taken to remove the session
        (leases.LeaseError, Failed),
        (StateFileError, Failed),
        (PruneRefused, BadParams),  # no cutoff, or one under the floor
        (ConfigError, BadParams),  # an age a person typed
    )


def ends_as(exc: Ending, message: str | None = None) -> Failure:
    """The error `exc` ends a request in, saying `message` (default: `exc`'s)."""
    kind = next(kind for cls, kind in _ends_as() if isinstance(exc, cls))
    return kind(str(exc) if message is None else message)
