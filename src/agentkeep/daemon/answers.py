"""The socket's method table: what the daemon answers to each method.

`handle` is the server's handler. It answers only a client that resolved
the same config, state dir and roots as the daemon (`env`), only with the
parameters a method takes, and from ANSWERS, built from the one table of
methods (methods.METHODS): an answer for every method there and for no
other, or the daemon does not start. A Failure comes back as the error the
CLI gives for it in-process, exit code and report included. Each answer is
work the daemon waits for when it stops; once sent, a heavy one gives back
what it kept and allocated (memory.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Protocol

import structlog

from agentkeep import leases, processes
from agentkeep.core.context import Context
from agentkeep.core.ending import ends_as
from agentkeep.daemon import memory
from agentkeep.daemon.changes import Changes
from agentkeep.daemon.connection import Connection, Stream
from agentkeep.daemon.work import Work
from agentkeep.errors import BadParams, EnvMismatch, UnknownMethod, state_file_failure
from agentkeep.jsontext import JSONText
from agentkeep.methods import METHODS

log = structlog.get_logger("agentkeep.daemon")

# What allocates in proportion to the sessions: its memory is given back
# to the system once it is answered (see memory.py).
_HEAVY = frozenset({"ls", "du", "scan", "prune", "purge"})


class Serving(Protocol):
    """The daemon as its answers use it (main.Daemon)."""

    ctx: Context | None
    changes: Changes
    work: Work

    def status(self) -> dict[str, Any]: ...

    def reload(self, why: str) -> dict[str, Any]: ...


def handle(d: Serving, conn: Connection, method: str, params: dict[str, Any]) -> object:
    """The answer to one request of `conn` (server.Handler)."""
    ctx = _ctx(d)
    if method not in METHODS:
        raise UnknownMethod(f"unknown method {method!r}")
    if "env" in params:
        _check_env(ctx, params["env"])
    params = {k: v for k, v in params.items() if k != "env"}
    sent_later = False
    with d.work.working(), processes.asked_by(conn.pid):
        try:
            answer = _call(d, conn, method, params)
            if isinstance(answer, JSONText):
                # Its parts are read from this thread's index connection
                # as they are sent: it is closed once they all went.
                sent_later = True
                return JSONText(_Then(answer.parts(), partial(_answered, ctx, method)))
            return answer
        except OSError as exc:
            failure = state_file_failure(exc)
            log.error("request failed", method=method, error=failure.message)
            raise failure from None
        finally:
            if not sent_later:
                _answered(ctx, method)
            if METHODS[method].changes and params.get("dry_run") is not True:
                d.changes.bump()


def _call(d: Serving, conn: Connection, method: str, params: dict[str, Any]) -> object:
    unknown = sorted(set(params) - set(METHODS[method].params))
    if unknown:
        raise BadParams(f"unknown parameter(s): {', '.join(unknown)}")
    return ANSWERS[method](d, conn, params)


def _check_env(ctx: Context, theirs: object) -> None:
    """Answer only a client that resolved the same config, state dir and
    roots: anything else would be the daemon's view under the client's name."""
    ours = ctx.fingerprint()
    if theirs != ours:
        raise EnvMismatch(
            "the daemon sees another config file, state dir or agent roots",
            data={"daemon": ours},
        )


def _hold(ctx: Context, conn: Connection, params: dict[str, Any]) -> dict[str, str]:
    agent, raw = params.get("agent"), params.get("id")
    if not isinstance(agent, str) or not isinstance(raw, str):
        raise BadParams("hold needs agent and id (strings)")
    session_id = ctx.session_id(agent, raw)
    path = leases.lease_path(ctx.state_dir, agent, session_id)
    try:
        lease = leases.hold_shared(path, wait=False)
    except leases.LeaseError as exc:
        raise ends_as(exc, f"cannot take the lease of {agent} {session_id}: {exc}") from None
    token = secrets.token_urlsafe(16)
    # The lease belongs to the connection: it ends at release or when
    # the connection closes, whichever comes first.
    conn.keep(token, lease.release)
    log.info("lease taken", agent=agent, id=session_id, conn=conn.number, pid=conn.pid)
    return {"lease": token}


def _release(conn: Connection, params: dict[str, Any]) -> dict[str, bool]:
    token = params.get("lease")
    if not isinstance(token, str) or not conn.release(token):
        raise BadParams("no such lease on this connection")
    return {"released": True}


# What answers each method of the socket, given the daemon, the connection
# and the parameters (without `env`, checked before, and only those the
# method takes).
Answer = Callable[[Serving, Connection, dict[str, Any]], object]


def _ctx(d: Serving) -> Context:
    assert d.ctx is not None
    return d.ctx


def _answer_from_child(
    d: Serving, c: Connection, method: str, params: dict[str, Any]
) -> JSONText | None:
    """The answer of work run in the daemon's child (daemon.child), sent
    as it is read from the child: the daemon never holds a prune's tens of
    thousands of removals at once."""
    done = d.work.in_child(method, params, c.pid)
    if done.counts is not None:
        log.info(f"{method} done", **done.counts)
        d.work.after_removal(method, params)
    return done.answer


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise BadParams(f"{name} must be a string")
    return value


def _opt_str(p: dict[str, Any], name: str) -> str | None:
    value = p.get(name)
    return None if value is None else _str(value, name)


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadParams(f"{name} must be true or false")
    return value


# The answers below import their modules when first asked: they bring the
# plan's, which a daemon that has only started and watched does not need.
def _ls(d: Serving, p: dict[str, Any]) -> object:
    from agentkeep.core.sessions import ls_text

    return ls_text(_ctx(d), _opt_str(p, "agent"), _opt_str(p, "idle_over"))


def _show(d: Serving, p: dict[str, Any]) -> object:
    from agentkeep.core.sessions import show

    return show(
        _ctx(d),
        _str(p.get("agent"), "agent"),
        _str(p.get("id"), "id"),
        verdict=_bool(p.get("verdict", True), "verdict"),
    )


def _du(d: Serving, p: dict[str, Any]) -> object:
    from agentkeep.core.reclaim import du

    return du(_ctx(d), _opt_str(p, "by") or "agent")


def _pin(d: Serving, p: dict[str, Any], pinned: bool) -> object:
    from agentkeep.core.sessions import pin

    return pin(_ctx(d), _str(p.get("agent"), "agent"), _str(p.get("id"), "id"), pinned)


def _answering(answers: dict[str, Answer]) -> dict[str, Answer]:
    """The dispatch, built from the one table of methods (methods.METHODS):
    an answer for every method there and for no other, or the daemon does
    not start (a method the CLI could ask that nothing answers)."""
    missing, extra = set(METHODS) - set(answers), set(answers) - set(METHODS)
    if missing or extra:
        raise RuntimeError(
            f"the daemon's answers do not match methods.METHODS: "
            f"unanswered {sorted(missing)}, unknown {sorted(extra)}"
        )
    return {name: answers[name] for name in METHODS}


ANSWERS: dict[str, Answer] = _answering(
    {
        "status": lambda d, c, p: d.status(),
        "ls": lambda d, c, p: _ls(d, p),
        "show": lambda d, c, p: _show(d, p),
        "du": lambda d, c, p: _du(d, p),
        "prune": lambda d, c, p: _answer_from_child(
            d,
            c,
            "prune",
            {
                "dry_run": _bool(p.get("dry_run", False), "dry_run"),
                "older_than": _opt_str(p, "older_than"),
                "agent": _opt_str(p, "agent"),
            },
        ),
        "purge": lambda d, c, p: _answer_from_child(
            d,
            c,
            "purge",
            {
                "agent": _str(p.get("agent"), "agent"),
                "id": _str(p.get("id"), "id"),
                "dry_run": _bool(p.get("dry_run", False), "dry_run"),
                "cascade": _bool(p.get("cascade", False), "cascade"),
            },
        ),
        "hold": lambda d, c, p: _hold(_ctx(d), c, p),
        "release": lambda d, c, p: _release(c, p),
        "pin": lambda d, c, p: _pin(d, p, True),
        "unpin": lambda d, c, p: _pin(d, p, False),
        "scan": lambda d, c, p: _answer_from_child(d, c, "scan", {}),
        "reload": lambda d, c, p: d.reload("request"),
        "subscribe": lambda d, c, p: Stream(d.changes.stream()),
    }
)


def _answered(ctx: Context, method: str) -> None:
    """A request is answered: its thread's index connection closed, and
    what a heavy one kept and allocated given back."""
    memory.close_thread_index(ctx)
    if method in _HEAVY:
        memory.after_work(ctx)


class _Then:
    """`parts`, then `done()` once: when they all went, or when the send is
    given up (close(), called whether or not a part was read)."""

    def __init__(self, parts: Iterator[str], done: Callable[[], None]) -> None:
        self._parts = parts
        self._done: Callable[[], None] | None = done

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        try:
            return next(self._parts)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        done, self._done = self._done, None
        if done is not None:
            close = getattr(self._parts, "close", None)
            if close is not None:
                close()
            done()
