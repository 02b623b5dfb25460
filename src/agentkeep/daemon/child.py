"""The daemon's child: a prune, a purge, a scan or the reconcile after a
flood of events, each run in a process of its own (why: agentkeep.children).

`python -m agentkeep.daemon.child <daemon pid> <log format> <log level>`
reads what it is asked (one JSON line) on stdin and calls the same core
functions as the CLI, under the same flocks: a lease the daemon holds for a
client keeps its session from the child too. Its stdout carries one line of
outcome (a Failure as data, the counts, what the daemon keeps between
prunes), then the answer, passed on as it is read; a full state disk costs
none of it.

Stopping (invariant 12): SIGTERM comes from the daemon as it stops, or from
the kernel when the daemon is gone. A prune or purge that has begun
removing finishes the session it is removing and keeps the rest; anything
else ends at once, with nothing half done.
"""

from __future__ import annotations

import codecs
import itertools
import json
import os
import resource
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from agentkeep import children, journal, logs, processes
from agentkeep.errors import Failed, Failure, state_file_failure
from agentkeep.jsontext import JSONText, folded_parts
from agentkeep.prune.report import PruneReport

if TYPE_CHECKING:
    from agentkeep.core.context import Context

log = structlog.get_logger("agentkeep.daemon")

# How often the daemon looks at prune.STOP while its child works.
POLL = 0.1
_CHUNK = 1 << 16


@dataclass
class Done:
    """What the child finished with: its counts for the log (None: nothing
    was done) and its answer, read as it is sent (None: none)."""

    counts: dict[str, Any] | None
    answer: JSONText | None


class Stopped(Failure):
    """The daemon stopped its child before it finished."""

    def __init__(self, method: str) -> None:
        super().__init__(1, f"the {method} was stopped: the daemon is stopping")


def run(
    ctx: Context,
    method: str,
    params: dict[str, Any],
    asked_by: int | None = None,
    *,
    answer: bool = True,
) -> Done:
    """core.prune, purge, scan or reconcile (`method`) in the daemon's child,
    for a request from `asked_by`; raises the Failure it ended in. What
    `ctx` keeps between prunes (the unsaved record, the trash expiry's last
    read) goes to the child and comes back. Whoever is given the answer
    reads it to its end or closes it. The calling thread must outlive the
    child (the kernel ends the child with it: children.end_with_parent)."""
    ask = {
        "method": method,
        "params": params,
        "asked_by": asked_by,
        "answer": answer,
        "unsaved_prune": ctx.unsaved_prune,
        "expiry": ctx.trash_expiry.known(),
    }
    child = _start(ask, dict(ctx.env.environ))
    try:
        outcome, rest = _outcome(child, method)
    except BaseException:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)  # it stops as it would with the daemon
        _end(child)
        raise
    ctx.unsaved_prune = outcome["unsaved_prune"]
    ctx.trash_expiry.trust(outcome["expiry"])
    failure, counts = outcome["failure"], outcome["counts"]
    if failure is not None or counts is None or not answer:
        _end(child)
    if failure is not None:
        raise Failure.from_answer(failure)
    if counts is None or not answer:
        return Done(counts, None)
    return Done(counts, JSONText(_Answer(child, method, rest)))


def _start(ask: dict[str, Any], environ: dict[str, str]) -> subprocess.Popen[bytes]:
    json_lines, level = logs.settings()
    argv = [sys.executable, "-m", __name__, str(os.getpid()), "json" if json_lines else "text"]
    child = subprocess.Popen(
        [*argv, level], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environ
    )
    assert child.stdin is not None
    try:
        with child.stdin:
            child.stdin.write(json.dumps(ask).encode() + b"\n")
    except BrokenPipeError:
        pass  # the child ended already: its outcome says how
    return child


def _outcome(child: subprocess.Popen[bytes], method: str) -> tuple[dict[str, Any], bytes]:
    """The child's outcome line, and what it sent after it (the answer's
    first bytes), waiting for it while passing prune.STOP on as SIGTERM.
    Raises a Failure when the child ended without one."""
    from agentkeep.prune.act import STOP  # here: serving alone never imports the act

    assert child.stdout is not None
    fd = child.stdout.fileno()
    got = bytearray()
    signalled = False
    while b"\n" not in got:
        readable, _, _ = select.select([fd], [], [], POLL)
        if not readable:
            if STOP.is_set() and not signalled:
                child.send_signal(signal.SIGTERM)
                signalled = True
            continue
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            code = child.wait()
            if signalled:
                raise Stopped(method)
            raise Failed(f"the {method}'s child process exited {code}; see the daemon's log")
        got += chunk
    line, _, rest = bytes(got).partition(b"\n")
    doc: dict[str, Any] = json.loads(line)
    return doc, rest


def _end(child: subprocess.Popen[bytes]) -> None:
    """Stop reading the child, and wait for it: with nobody reading, its
    next write fails and it ends."""
    if child.stdout is not None:
        child.stdout.close()
    child.wait()


class _Answer:
    """The child's answer, part after part as it comes through the pipe;
    the child is waited for at its end, or when the answer is closed
    unread (the client went away)."""

    def __init__(self, child: subprocess.Popen[bytes], method: str, first: bytes) -> None:
        self._child, self._method = child, method
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._first: bytes | None = first

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        stdout = self._child.stdout
        if stdout is None or stdout.closed:
            raise StopIteration
        data, self._first = self._first or os.read(stdout.fileno(), _CHUNK), None
        if data:
            return self._decoder.decode(data)
        self.close()
        if self._child.returncode != 0:
            # A line cut short: the server closes the connection.
            why = f"exited {self._child.returncode} half way through its answer"
            raise Failed(f"the {self._method}'s child process {why}")
        raise StopIteration

    def close(self) -> None:
        """Stop reading, and wait for the child."""
        _end(self._child)


# -- the child ------------------------------------------------------------
_log = structlog.get_logger("agentkeep.daemon.child")
# What the child was asked to do, once it has read it.
_asked: dict[str, Any] = {}
# Work that stops between sessions (prune.STOP) once it removes.
_FINISHES_A_SESSION = frozenset({"prune", "purge"})


def main() -> int:
    """The child's life: read what it is asked, do it, send it back."""
    parent, log_format, level = sys.argv[1:4]
    logs.configure(log_format == "json", level)
    # SIGINT too: Ctrl-C on a daemon in a terminal reaches its whole group.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    children.end_with_parent(int(parent))
    line = sys.stdin.buffer.readline()
    if not line.endswith(b"\n"):
        _log.warning("the daemon went away before it asked anything; nothing was done")
        return 0
    ask = json.loads(line)
    _asked.update(ask)
    try:
        doc, answer = _outcome_here(ask)
    except Exception:
        _log.exception("the daemon's child failed", method=ask["method"])
        return 1
    parts = itertools.chain([json.dumps(doc) + "\n"], _parts(answer) if ask["answer"] else ())
    try:
        # Unbuffered: nothing is left to flush at exit into a pipe nobody reads.
        for part in parts:
            children.write_all(sys.stdout.fileno(), part.encode())
    except BrokenPipeError:
        _log.info("the daemon no longer reads the answer", method=ask["method"])
    return 0


def _stop(signum: int, frame: object) -> None:
    """SIGTERM or SIGINT: a prune or purge that has begun removing finishes
    the session it is removing (prune.STOP); anything else ends now."""
    method = _asked.get("method")
    if method in _FINISHES_A_SESSION and journal.began_removing():
        from agentkeep.prune.act import STOP  # the act's, imported by the removal begun

        if not STOP.is_set():
            _log.info("stopping after the session being removed", method=method)
        STOP.set()
        return
    if method is None:
        _log.info("stopped before the daemon asked anything")
    else:
        _log.info("stopped: nothing was being removed", method=method)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(1)


def _outcome_here(ask: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The outcome of the work `ask` names, and its answer (None: none)."""
    from agentkeep.core.context import Context
    from agentkeep.core.indexing import reconcile, scan
    from agentkeep.core.pruning import prune, purge
    from agentkeep.paths import Env

    doc: dict[str, Any] = {
        "failure": None,
        "counts": None,
        "unsaved_prune": ask["unsaved_prune"],
        "expiry": ask["expiry"],
    }
    try:
        ctx = Context.open(Env.from_environ())
    except Failure as exc:
        return doc | {"failure": exc.answer()}, None
    ctx.unsaved_prune = ask["unsaved_prune"]
    ctx.trash_expiry.trust(ask["expiry"])
    calls: dict[str, Callable[..., PruneReport | dict[str, Any] | int | None]] = {
        "prune": prune,
        "purge": purge,
        "scan": scan,
        "reconcile": reconcile,
    }
    answer = None
    try:
        with processes.asked_by(ask["asked_by"]):
            answer = calls[ask["method"]](ctx, **ask["params"])
        doc["counts"] = _counts(answer)
    except Failure as exc:
        doc["failure"] = exc.answer()  # read back by Failure.from_answer
    except OSError as exc:
        doc["failure"] = state_file_failure(exc).answer()
    return doc | {"unsaved_prune": ctx.unsaved_prune, "expiry": ctx.trash_expiry.known()}, answer


def _counts(answer: PruneReport | dict[str, Any] | int | None) -> dict[str, Any] | None:
    """The counts of an answer, for the daemon's log (None: no answer)."""
    if answer is None:
        return None
    # ru_maxrss is in KB on Linux, in bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    counts: dict[str, Any] = {
        "peak_rss_mb": round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)
    }
    if isinstance(answer, PruneReport):
        counts |= answer.counts()
    return counts


def _parts(answer: PruneReport | dict[str, Any] | int | None) -> Iterator[str]:
    if answer is None:
        return iter(())
    if isinstance(answer, PruneReport):
        return folded_parts(answer.json_parts())
    return iter([json.dumps(answer)])


if __name__ == "__main__":
    sys.exit(main())
