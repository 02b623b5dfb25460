"""The socket's method table: what the daemon answers to each method.

`handle` answers only a client that resolved the same config, state dir and
roots as the daemon (`env`), only with the parameters a method takes, from
ANSWERS: an answer for every method of methods.METHODS and no other, or the
daemon does not start. A heavy answer gives back its memory once sent.
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

# What allocates in proportion to the sessions.
_HEAVY = frozenset({"ls", "du", "scan", "prune", "purge"})


class Daemon(Protocol):
    """The daemon as its answers use it (main.Daemon)."""

    ctx: Context | None
    changes: Changes
    work: Work

    def status(self) -> dict[str, Any]:
        """The `status` answer."""
        ...

    def reload(self, why: str) -> dict[str, Any]:
        """Read the config again; the status."""
        ...


def handle(d: Daemon, conn: Connection, method: str, params: dict[str, Any]) -> object:
    """The answer to one request of `conn` (connection.Handler)."""
    ctx = _ctx(d)
    if method not in METHODS:
        raise UnknownMethod(f"unknown method {method!r}")
    if "env" in params and params["env"] != ctx.fingerprint():
        # Anything else would be the daemon's view under the client's name.
        raise EnvMismatch(
            "the daemon sees another config file, state dir or agent roots",
            data={"daemon": ctx.fingerprint()},
        )
    params = {k: v for k, v in params.items() if k != "env"}
    unknown = sorted(set(params) - set(METHODS[method].params))
    sent_later = False
    with d.work.working(), processes.asked_by(conn.pid):
        try:
            if unknown:
                raise BadParams(f"unknown parameter(s): {', '.join(unknown)}")
            answer = ANSWERS[method](d, conn, params)
            if isinstance(answer, JSONText):
                # Read from this thread's index as sent: closed once all went.
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


def _ctx(d: Daemon) -> Context:
    assert d.ctx is not None
    return d.ctx


def _str(p: dict[str, Any], name: str) -> str:
    value = p.get(name)
    if not isinstance(value, str):
        raise BadParams(f"{name} must be a string")
    return value


def _opt_str(p: dict[str, Any], name: str) -> str | None:
    return None if p.get(name) is None else _str(p, name)


def _bool(p: dict[str, Any], name: str, default: bool) -> bool:
    value = p.get(name, default)
    if not isinstance(value, bool):
        raise BadParams(f"{name} must be true or false")
    return value


def _hold(d: Daemon, conn: Connection, params: dict[str, Any]) -> dict[str, str]:
    ctx, agent = _ctx(d), _str(params, "agent")
    session_id = ctx.session_id(agent, _str(params, "id"))
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


def _release(d: Daemon, conn: Connection, params: dict[str, Any]) -> dict[str, bool]:
    token = params.get("lease")
    if not isinstance(token, str) or not conn.release(token):
        raise BadParams("no such lease on this connection")
    return {"released": True}


def _in_child(method: str, d: Daemon, c: Connection, params: dict[str, Any]) -> JSONText | None:
    """Work run in the daemon's child (daemon.child), its answer sent as it
    is read from the child: a prune's report is never held whole here."""
    done = d.work.in_child(method, params, c.pid)
    if done.counts is not None:
        log.info(f"{method} done", **done.counts)
        d.work.after_removal(method, params)
    return done.answer


# Imported when first asked: a daemon that only watched needs no plan.
def _ls(d: Daemon, c: Connection, p: dict[str, Any]) -> object:
    from agentkeep.core.sessions import ls_text

    return ls_text(_ctx(d), _opt_str(p, "agent"), _opt_str(p, "idle_over"))


def _show(d: Daemon, c: Connection, p: dict[str, Any]) -> object:
    from agentkeep.core.sessions import show

    verdict = _bool(p, "verdict", True)
    return show(_ctx(d), _str(p, "agent"), _str(p, "id"), verdict=verdict)


def _du(d: Daemon, c: Connection, p: dict[str, Any]) -> object:
    from agentkeep.core.reclaim import du

    return du(_ctx(d), _opt_str(p, "by") or "agent")


def _pin(pinned: bool, d: Daemon, c: Connection, p: dict[str, Any]) -> object:
    from agentkeep.core.sessions import pin

    return pin(_ctx(d), _str(p, "agent"), _str(p, "id"), pinned)


def _prune(d: Daemon, c: Connection, p: dict[str, Any]) -> object:
    dry_run, older_than = _bool(p, "dry_run", False), _opt_str(p, "older_than")
    params = {"dry_run": dry_run, "older_than": older_than, "agent": _opt_str(p, "agent")}
    return _in_child("prune", d, c, params)


def _purge(d: Daemon, c: Connection, p: dict[str, Any]) -> object:
    params = {
        "agent": _str(p, "agent"),
        "id": _str(p, "id"),
        "dry_run": _bool(p, "dry_run", False),
        "cascade": _bool(p, "cascade", False),
    }
    return _in_child("purge", d, c, params)


# An answer, given the daemon, the connection and the method's own params.
Answer = Callable[[Daemon, Connection, dict[str, Any]], object]


def _answering(answers: dict[str, Answer]) -> dict[str, Answer]:
    """The dispatch in the order of methods.METHODS: an answer for every
    method there and for no other, or the daemon does not start."""
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
        "ls": _ls,
        "show": _show,
        "du": _du,
        "prune": _prune,
        "purge": _purge,
        "hold": _hold,
        "release": _release,
        "pin": partial(_pin, True),
        "unpin": partial(_pin, False),
        "scan": lambda d, c, p: _in_child("scan", d, c, {}),
        "reload": lambda d, c, p: d.reload("request"),
        "subscribe": lambda d, c, p: Stream(d.changes.stream()),
    }
)


def _answered(ctx: Context, method: str) -> None:
    """A request is answered: its thread's index connection closed (in
    CPython 3.11 one left to its thread's end lives on, page cache and all,
    until a full collection), and what a heavy one allocated given back."""
    ctx.index.close()
    if method in _HEAVY:
        memory.give_back()


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
        """Close the parts and call `done`, once."""
        done, self._done = self._done, None
        if done is not None:
            close = getattr(self._parts, "close", None)
            if close is not None:
                close()
            done()
