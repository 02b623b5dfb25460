"""The methods the daemon's socket answers, as both ends know them: each
one's name, the parameters it takes, and what a client needs to know of it.

This is the one table of them. The daemon (daemon/main.py) builds its
dispatch from it, an answer for each name and no other; the CLI
(runner.py) reads it when no daemon answers, to know whether the index must
be brought up to date first, without importing the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One method of the socket."""

    # The parameters it takes besides `env` (checked first): any other is
    # refused (INVALID_PARAMS).
    params: tuple[str, ...]
    # Answered from the index: in-process (no daemon answering), the CLI
    # brings the index up to date first (runner.Runner.ask).
    reads_index: bool = False
    # What clients are shown may have changed after it (a dry run changes
    # nothing: it is not counted).
    changes: bool = False


# Every method the socket answers, and nothing else: an unknown one is
# METHOD_NOT_FOUND, an unknown parameter INVALID_PARAMS.
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
