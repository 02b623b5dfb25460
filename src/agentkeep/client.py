"""The CLI's side of the daemon's socket: one request, one answer.

`NoDaemon` means nothing of the request was done (nobody serves, the
daemon closed the connection before the request was sent, or it is `Busy`):
the CLI then works in-process. An error answer raises the errors.Failure
the daemon raised. A socket served by another user is not ours to talk to.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import structlog

from agentkeep.errors import Failed, Failure
from agentkeep.paths import Env
from agentkeep.protocol import BUSY, decode, encode, peer_credentials, result_head

log = structlog.get_logger("agentkeep.client")

_ids = itertools.count(1)

CONNECT_TIMEOUT = 5.0
# Test seam: called with each connect error that is retried. None in production.
_retrying: Callable[[OSError], None] | None = None


class NoDaemon(Exception):
    """No daemon of this user took the request: nothing of it was done."""


class Busy(NoDaemon):
    """The daemon is there but took no request: its backlog stayed full, or
    it had no room for the connection (error BUSY)."""


def call(env: Env, method: str, params: dict[str, Any], *, timeout: float = 600) -> Any:
    """Send one request to the daemon and return its result."""
    return request(connect(env), method, params, timeout=timeout)


def request(
    sock: socket.socket,
    method: str,
    params: dict[str, Any],
    *,
    timeout: float = 600,
    raw: bool = False,
) -> Any:
    """Send one request on a socket from connect(), close it, return the
    result; with `raw`, the result's JSON text (see _result_text)."""
    with sock:
        deadline = time.monotonic() + timeout
        sock.settimeout(timeout)
        request_id = _send(sock, method, params)
        try:
            line = _read_line(sock, deadline)
        except OSError as exc:
            raise Failed(f"the daemon did not answer: {exc}") from exc
    return _result_text(line, request_id) if raw else _result(line)


def results(sock: socket.socket, method: str, params: dict[str, Any]) -> Iterator[Any]:
    """Send one request whose answer is a stream (`subscribe`) on a socket
    from connect(), and yield each result as its line comes, until the
    daemon closes the connection. Another thread stops it by shutting the
    socket down; an error answer raises as request() does."""
    sock.settimeout(None)  # the next line may be hours away
    _send(sock, method, params)
    buf = b""
    with suppress(OSError):  # the connection ended
        while chunk := sock.recv(1 << 16):
            buf += chunk
            while (end := buf.find(b"\n")) >= 0:
                line, buf = buf[:end], buf[end + 1 :]
                yield _result(line)


def connect(env: Env, timeout: float = CONNECT_TIMEOUT) -> socket.socket:
    """A connection to this user's daemon; NoDaemon when none answers, Busy
    when its backlog stays full (EAGAIN) for `timeout` seconds."""
    path = env.socket_path
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(os.fspath(path))
            _pid, uid = peer_credentials(sock)
            break
        except BlockingIOError as exc:
            # A full backlog: a live daemon that has not accepted yet.
            sock.close()
            if time.monotonic() + pause > deadline:
                raise Busy(f"the daemon on {path} accepted nothing for {timeout:g} s") from exc
            if _retrying is not None:
                _retrying(exc)
            time.sleep(pause)
            pause = min(2 * pause, 0.1)
        except OSError as exc:
            sock.close()
            raise NoDaemon(f"no daemon answers on {path}: {exc.strerror or exc}") from exc
    if uid != env.uid:
        sock.close()
        log.warning("the socket is served by another user; not using it", path=str(path), uid=uid)
        raise NoDaemon(f"{path} is served by uid {uid}, not {env.uid}")
    return sock


def _send(sock: socket.socket, method: str, params: dict[str, Any]) -> int:
    """Send one request; its id. NoDaemon when it could not be sent: a line
    that never reached the daemon whole (its newline is last) was never read."""
    request_id = next(_ids)
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    try:
        sock.sendall(encode(message))
    except OSError as exc:
        raise _unsent(sock, exc) from exc
    return request_id


def _unsent(sock: socket.socket, exc: OSError) -> NoDaemon:
    """Why a request could not be sent: what the daemon said before it
    closed the connection (Busy), if it said it."""
    try:
        sock.settimeout(0)
        said = sock.recv(65536)
    except OSError:
        said = b""
    if said.endswith(b"\n"):
        try:
            _result(said.split(b"\n")[0])
        except Busy as busy:
            return busy
        except Failure:
            pass
    return NoDaemon(f"the daemon closed the connection before the request: {exc}")


def _read_line(sock: socket.socket, deadline: float) -> bytes:
    chunks: list[bytes] = []
    while True:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        # Large reads: an ls answer at 50,000 sessions is about 10 MB.
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise OSError("connection closed before the answer")
        head, newline, _ = chunk.partition(b"\n")
        chunks.append(head)
        if newline:
            return b"".join(chunks)


def _result_text(line: bytes, request_id: int) -> str:
    """The result as JSON text: a folded list (jsontext) taken from the
    answer as the daemon wrote it, without decoding it (an ls at 50,000
    sessions is 12 MB); any other result decoded and encoded again."""
    head = result_head(request_id)
    if line.startswith(head) and line.endswith(b"}"):
        text = line[len(head) : -1]
        if text == b"[]" or (text.startswith(b"[\t") and text.endswith(b"\t]")):
            return text.decode()
    return json.dumps(_result(line))


def _result(line: bytes) -> Any:
    try:
        answer = decode(line)
    except (ValueError, TypeError) as exc:
        raise Failed(f"the daemon's answer is not a JSON object: {exc}") from None
    error = answer.get("error")
    if error is not None:
        if isinstance(error, dict) and error.get("code") == BUSY:
            raise Busy(f"the daemon is busy: {error.get('message', '')}")
        raise Failure.from_answer(error)
    return answer.get("result")
