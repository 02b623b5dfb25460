"""Work agentkeep runs in child processes, why, and how each ends.

- The daemon's heavy work (a prune, a purge, a scan, the reconcile after a
  flood) runs in a child of its own (daemon/child.py), for the daemon's
  memory: such work holds what it lists until it ends, and the allocator
  keeps much of it; a child gives all of it back when it exits.
- A big scan is spread over one child per CPU (children/scan.py): measuring
  is the interpreter's work per file, bound to one CPU.

Invariant 12: nothing agentkeep starts outlives the command or daemon that
started it by more than the session in flight. Every child calls
end_with_parent() as it starts; what SIGTERM does is the child's own
decision. An agent's own command (`codex delete`, `opencode session
delete`) is not transactional: it is SIGKILLed with the process that runs
it (dies_with_us()), or it would go on changing a session half removed.
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
    prctl = _prctl() if KERNEL_TELLS else None
    if prctl is not None and prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0:
        # A parent that ended before the kernel was asked is never signalled.
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


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to the descriptor `fd`."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
