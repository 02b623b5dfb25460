"""Giving memory back to the system after a big piece of work.

The daemon lives for months; what one big answer, scan or prune allocated
must not stay its size ever after. Python's allocator returns a 1 MiB arena
only when every object in it is gone, so on glibc the daemon runs on the
system allocator (PYTHONMALLOC=malloc), which `malloc_trim(0)` makes give
every free page back. Elsewhere (macOS, musl) nothing is done.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


_TRIM = _malloc_trim()
# Set in the environment of the process run again, and taken out of it there.
_AGAIN = "AGENTKEEP_SYSTEM_MALLOC"


def use_system_malloc() -> None:
    """Run this process again on the system allocator: the same pid (the
    service manager's main process), the same command line. Not when someone
    chose an allocator (PYTHONMALLOC set), nor where there is no
    malloc_trim(). Children get the environment the daemon was given."""
    if _TRIM is None:
        return
    if os.environ.pop(_AGAIN, None) is not None:
        os.environ.pop("PYTHONMALLOC", None)
        return
    if "PYTHONMALLOC" in os.environ:
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    environ = {**os.environ, "PYTHONMALLOC": "malloc", _AGAIN: "1"}
    os.execve(sys.executable, sys.orig_argv, environ)


def give_back() -> None:
    """After work in proportion to the sessions: return the free memory of
    every malloc arena to the system (the adapters keep nothing between
    calls; per-session state lives in the index)."""
    if _TRIM is not None:
        _TRIM(0)
