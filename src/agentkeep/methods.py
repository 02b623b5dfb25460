"""The one table of the methods the daemon's socket answers, as both ends
know them: the daemon's dispatch (daemon/answers.py) has an answer for each
and no other; the CLI reads it without importing the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One method of the socket."""

    # The parameters it takes besides `env`: any other is INVALID_PARAMS.
    params: tuple[str, ...]
    # Answered from the index: in-process, the CLI brings it up to date first.
    reads_index: bool = False
    # What clients are shown may have changed after it (unless a dry run).
    changes: bool = False


# An unknown method is METHOD_NOT_FOUND.
METHODS: dict[str, Method] = {
    "status": Method(()),
    "ls": Method(("agent", "idle_over"), reads_index=True),
    # `verdict` (default true): what the plan says of it; the UI, which
    # holds the plan, asks without.
    "show": Method(("agent", "id", "verdict"), reads_index=True),
    "du": Method(("by",), reads_index=True),
    "prune": Method(("dry_run", "older_than", "agent"), changes=True),
    "purge": Method(("agent", "id", "dry_run", "cascade"), changes=True),
    "hold": Method(("agent", "id"), changes=True),
    "release": Method(("lease",), changes=True),
    "pin": Method(("agent", "id"), changes=True),
    "unpin": Method(("agent", "id"), changes=True),
    "scan": Method((), changes=True),
    "reload": Method((), changes=True),
    "subscribe": Method(()),
}
