"""Work agentkeep runs in child processes, why, and how each ends.

- The daemon's heavy work (a prune, a purge, a scan, the reconcile after a
  flood of events) runs in a child of its own, `python -m
  agentkeep.daemon.child` (daemon/child.py), for the daemon's memory: such
  work holds what it lists until it ends, and an allocator keeps much of
  what it was given (at 50,000 sessions a prune took the daemon from 47 MB
  to 170 MB). A child gives all of it back when it exits; the daemon only
  passes the answer on, and stays flat.
- A big scan is spread over one child per CPU (children/scan.py), for its
  speed: measuring is the interpreter's work per file, bound to one CPU, and
  a home of thousands of sessions is measured faster over several.

Invariant 12: nothing agentkeep starts outlives the command or daemon that
started it by more than the session in flight. Every child calls
end_with_parent() as it starts, and is sent SIGTERM when its parent is gone
(killed, out of memory, crashed); what SIGTERM does is the child's own
decision (a scan's children end at once, the daemon's child finishes the
session it is removing).
An agent's own command (`codex delete`, `opencode session delete`) is
SIGKILLed with the process that runs it (dies_with_us()): it is not
transactional, and left running it went on changing the session while the
next prune listed it, and named the id, so that the session was kept `live`
and its journal entry forgotten, half removed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable

# How often a child looks at its parent where the kernel does not tell it.
POLL = 0.5
# Test seam: False makes a child watch its parent as it does off Linux.
KERNEL_TELLS = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1


def end_with_parent(parent: int) -> None:
    """Have SIGTERM sent to this process once `parent` (the pid that started
    it) is gone. On Linux the kernel sends it (PR_SET_PDEATHSIG) when the
    thread that started this process ends: each caller starts its children
    from a thread that waits for them. Elsewhere a thread of this process
    looks at its parent every POLL seconds."""
    if KERNEL_TELLS and _ask_the_kernel():
        # The parent may have ended before the kernel was asked: this
        # process then has another parent already (init, or a subreaper),
        # and the kernel will never send the signal.
        if os.getppid() != parent:
            _parent_gone()
        return
    threading.Thread(target=_watch, args=(parent,), name="agentkeep-parent", daemon=True).start()


def _prctl() -> Callable[..., int] | None:
    # Imported here: ctypes is a few milliseconds of every CLI command's
    # start-up, and only children and the agents' own commands need prctl.
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _ask_the_kernel() -> bool:
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0


def dies_with_us() -> Callable[[], None] | None:
    """For a command agentkeep runs that is not its own (an agent's): a
    preexec_fn that has the kernel SIGKILL it once the thread that started
    it ends (PR_SET_PDEATHSIG), so that it never outlives a killed prune;
    None where the kernel cannot be asked."""
    prctl = _prctl() if KERNEL_TELLS else None
    if prctl is None:
        return None
    parent = os.getpid()

    def in_the_child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # gone before the kernel was asked
            os.kill(os.getpid(), signal.SIGKILL)

    return in_the_child


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL)
    _parent_gone()


def _parent_gone() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
