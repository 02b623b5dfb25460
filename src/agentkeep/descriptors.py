"""How many files this process may open (RLIMIT_NOFILE), for what holds
many open at once: a prune's batch of leases, the daemon's connections."""

from __future__ import annotations

import resource


def allow(want: int) -> int:
    """The soft RLIMIT_NOFILE, first raised to `want` where it is lower
    (never past the hard limit; where it cannot be raised at all, what
    there is). Children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass  # keep what there is
    return soft if soft != resource.RLIM_INFINITY else want
