"""Half of a big prune's act in a second process.

The act is the interpreter's work per session (its leases, its listing
again, its removal), bound to one CPU. A prune of many sessions hands half
of its plan, whole families (see plan.halves), to a forked child, which acts
on them exactly as this process acts on the other half: it takes each
session's leases itself, lists it again under them, journals its own
batches, removes. Neither touches a session of the other's half, and a
session is checked again only in the process that removes its descendants,
so every rule of the act holds in each as it does in one. The child sends
each outcome as it is decided, through an unnamed file (a pipe would block
it while this process is busy with its own half); what a child that died
never decided is the caller's to report.

The child is forked, never spawned: it starts with the listing, the plan
and the adapters' caches this process holds, at no cost. So only where a
fork is safe (workers.start_method). It must never unwind into the
caller's frames: they hold the prune lock and the index's connection, which
it shares and must leave alone, so it ends with os._exit whatever happens.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from agentkeep.children import scan as workers

# Below this many planned sessions one process acts alone: a fork costs
# little, but a half of a few hundred sessions is over in under a second.
SPREAD_FROM = 2000

# Test seam, None in production: the least plan that is spread.
_spread_from: int | None = None


def worth_spreading(planned: int) -> bool:
    least = SPREAD_FROM if _spread_from is None else _spread_from
    return planned >= least and workers.cpus() >= 2 and workers.start_method() == "fork"


class Sent:
    """One list of the child's report: each item is written to the parent
    as it is added, and only counted here."""

    def __init__(self, out: IO[bytes], kind: str) -> None:
        self._out, self._kind, self._count = out, kind, 0

    def append(self, item: object) -> None:
        pickle.dump((self._kind, item), self._out, pickle.HIGHEST_PROTOCOL)
        self._count += 1

    def extend(self, items: Iterable[object]) -> None:
        for item in items:
            self.append(item)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Any]:
        return iter(())


@dataclass
class Apart:
    """A child acting on its half: wait() for it, then read what it sent."""

    pid: int
    file: IO[bytes]

    def wait(self) -> str | None:
        """None when the child exited 0, else how it ended."""
        _, status = os.waitpid(self.pid, 0)
        if os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
            return None if code == 0 else f"exited {code}"
        return f"was killed by signal {os.WTERMSIG(status)}"

    def records(self) -> Iterator[tuple[str, Any]]:
        """Every record the child sent, in order, read one at a time (the
        report takes them as they come, and spools its removals). A record
        cut short by the child's death ends them."""
        self.file.seek(0)
        try:
            while True:
                yield pickle.load(self.file)
        except (EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError):
            return
        finally:
            self.file.close()


def start(half: Callable[[IO[bytes]], None]) -> Apart:
    """Fork a child that runs `half(out)` and exits; its records go to `out`.
    OSError when no child can be started (nothing was forked then)."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by Apart.records)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        out.close()
        raise
    if pid:
        return Apart(pid, out)
    code = 1
    try:
        try:
            half(out)
            code = 0
        except BaseException as exc:  # noqa: BLE001 (sent to the parent, which raises it)
            pickle.dump(("error", _picklable(exc)), out, pickle.HIGHEST_PROTOCOL)
        out.flush()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 (anything that does not come back is told as text)
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
