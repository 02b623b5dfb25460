"""The daemon's child: a prune, a purge, a scan or the reconcile after a
flood of events, each run in a process of its own (why: see
agentkeep.children).

The child is `python -m agentkeep.daemon.child`, in the daemon's
environment. It opens a Context of its own and calls the same core.prune,
core.purge or core.scan as the CLI, which take the same flock locks (the
prune lock, each session's lease): a lease the daemon holds for a client
keeps its session from the child as from any other process. Its answer goes
to the file that is its stdout, which the daemon sends as it reads it back;
its outcome (a Failure as data, the counts, what the daemon keeps from one
prune to the next) to a second file. Stopping: prune.STOP, set as the
daemon stops, is passed on as SIGTERM; a prune finishes the session in
flight, anything else ends at once. So does a child whose daemon was
killed: the daemon holds the child's stdin open, and its end of file is the
daemon's end."""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import structlog

from agentkeep import logs, processes, prune
from agentkeep.errors import Failure, state_file_failure
from agentkeep.jsontext import JSONText, folded_parts

if TYPE_CHECKING:
    from agentkeep.core import Context

log = structlog.get_logger("agentkeep.daemon")

# How often the daemon looks at prune.STOP while a prune runs.
POLL = 0.1
_CHUNK = 1 << 20


@dataclass
class Done:
    """What the child finished with: its answer (None: a prune skipped, as
    when another prune runs) and its counts for the daemon's log."""

    answer: JSONText | None
    counts: dict[str, Any]


def run(ctx: Context, method: str, params: dict[str, Any], asked_by: int | None = None) -> Done:
    """core.prune, core.purge, core.scan or core.reconcile (`method`), given
    `params`, run in a child process for a request from `asked_by`; raises
    the Failure it ended in. The child starts from what `ctx` (the daemon's) keeps between
    prunes, the unsaved record and the trash expiry's last read, and both
    come back from it."""
    ask = {
        "method": method,
        "params": params,
        "asked_by": asked_by,
        "log": logs.settings(),
        "unsaved_prune": ctx.unsaved_prune,
        "expiry": ctx.trash_expiry.known(),
    }
    # In the state dir, which is the user's alone (a report names every
    # path removed), and unnamed. Closed here unless an answer is read from
    # it: then by _read().
    answer = tempfile.TemporaryFile(dir=ctx.state_dir)  # noqa: SIM115
    try:
        outcome = _child(ask, answer, ctx)
    except BaseException:
        answer.close()
        raise
    ctx.unsaved_prune = outcome["unsaved_prune"]
    ctx.trash_expiry.trust(outcome["expiry"])
    failure = outcome["failure"]
    if failure is not None or outcome["counts"] is None:
        answer.close()
    if failure is not None:
        raise Failure(failure["exit"], failure["message"], failure["code"], failure["report"])
    if outcome["counts"] is None:
        return Done(None, {})
    answer.seek(0)
    return Done(JSONText(_read(answer)), outcome["counts"])


def _child(ask: dict[str, Any], answer: IO[bytes], ctx: Context) -> dict[str, Any]:
    """Start the child, wait for it (passing prune.STOP on) and read its
    outcome."""
    with tempfile.TemporaryFile(dir=ctx.state_dir) as outcome:
        ask = {**ask, "outcome_fd": outcome.fileno()}
        child = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=answer,
            env=dict(ctx.env.environ),
            pass_fds=(outcome.fileno(),),
        )
        assert child.stdin is not None
        # Kept open until the child ends: its end of file tells the child
        # that the daemon is gone.
        with child.stdin:
            child.stdin.write(json.dumps(ask).encode() + b"\n")
            child.stdin.flush()
            _wait(child)
        outcome.seek(0)
        text = outcome.read()
    if child.returncode != 0 or not text:
        why = f"the {ask['method']}'s child process exited {child.returncode}"
        raise Failure(1, f"{why}; see the daemon's log")
    doc: dict[str, Any] = json.loads(text)
    return doc


def _wait(child: subprocess.Popen[bytes]) -> None:
    signalled = False
    while True:
        try:
            child.wait(POLL)
            return
        except subprocess.TimeoutExpired:
            if prune.STOP.is_set() and not signalled:
                child.send_signal(signal.SIGTERM)
                signalled = True


def _read(answer: IO[bytes]) -> Iterator[str]:
    with io.TextIOWrapper(answer, encoding="utf-8") as text:
        while chunk := text.read(_CHUNK):
            yield chunk


# -- the child ------------------------------------------------------------
# Work that stops between sessions (prune.STOP); any other ends at once, as
# SIGTERM ends a process: it has no session to finish, and what it wrote to
# the index is one transaction, rolled back.
_FINISHES_A_SESSION = frozenset({"prune", "purge"})


def main() -> int:
    ask = json.loads(sys.stdin.buffer.readline())
    logs.configure(*ask["log"])
    finishes = ask["method"] in _FINISHES_A_SESSION
    # SIGINT too: Ctrl-C on a daemon in a terminal reaches its whole group.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, (lambda *_: prune.STOP.set()) if finishes else signal.SIG_DFL)
    threading.Thread(target=_end_with_the_daemon, args=(finishes,), daemon=True).start()
    try:
        doc = _outcome(ask)
    except Exception:
        log.exception("the daemon's child failed", method=ask["method"])
        return 1
    with os.fdopen(ask["outcome_fd"], "w") as outcome:
        json.dump(doc, outcome)
    return 0


def _end_with_the_daemon(finishes: bool) -> None:
    """The daemon holds the child's stdin open until the child ends: at its
    end of file the daemon is gone (killed), and the child ends as it would
    have had the daemon stopped."""
    # The file descriptor itself: a thread blocked in the buffered reader
    # would hold its lock as the interpreter exits (a fatal error).
    while os.read(sys.stdin.fileno(), 1 << 12):
        pass
    if not finishes:
        os.kill(os.getpid(), signal.SIGTERM)
    elif not prune.STOP.is_set():
        log.warning("the daemon is gone: the prune stops after the session it is removing")
        prune.STOP.set()


def _outcome(ask: dict[str, Any]) -> dict[str, Any]:
    from agentkeep import core
    from agentkeep.paths import Env

    doc: dict[str, Any] = {
        "failure": None,
        "counts": None,
        "unsaved_prune": ask["unsaved_prune"],
        "expiry": ask["expiry"],
    }
    try:
        ctx = core.Context.open(Env.from_environ())
    except Failure as exc:
        return doc | {"failure": _failure(exc)}
    ctx.unsaved_prune = ask["unsaved_prune"]
    ctx.trash_expiry.trust(ask["expiry"])
    calls: dict[str, Callable[..., prune.PruneReport | dict[str, Any] | int | None]] = {
        "prune": core.prune,
        "purge": core.purge,
        "scan": core.scan,
        "reconcile": core.reconcile,
    }
    try:
        with processes.asked_by(ask["asked_by"]):
            answer = calls[ask["method"]](ctx, **ask["params"])
        doc["counts"] = _answered(answer)
    except Failure as exc:
        doc["failure"] = _failure(exc)
    except OSError as exc:
        doc["failure"] = _failure(state_file_failure(exc))
    return doc | {"unsaved_prune": ctx.unsaved_prune, "expiry": ctx.trash_expiry.known()}


def _answered(answer: prune.PruneReport | dict[str, Any] | int | None) -> dict[str, Any] | None:
    """Write the answer to stdout; its counts (None: no answer)."""
    if answer is None:
        return None
    report = answer if isinstance(answer, prune.PruneReport) else None
    parts = folded_parts(report.json_parts()) if report else iter([json.dumps(answer)])
    out = sys.stdout.buffer
    try:
        for part in parts:
            out.write(part.encode())
        out.flush()
    except OSError as exc:
        # The work was done (a prune's record says what it did): only its
        # answer is lost.
        why = exc.strerror or str(exc)
        raise Failure(1, f"the answer could not be written: {why}") from None
    # ru_maxrss is in KB on Linux, in bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    counts: dict[str, Any] = {
        "peak_rss_mb": round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)
    }
    if report is not None:
        counts |= {
            "removed": len(report.removed),
            "kept": len(report.kept),
            "failed": len(report.failed),
            "paused": report.paused,
        }
    return counts


def _failure(exc: Failure) -> dict[str, Any]:
    return {"exit": exc.exit, "message": exc.message, "code": exc.code, "report": exc.report}


if __name__ == "__main__":
    sys.exit(main())
