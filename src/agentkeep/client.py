"""The CLI's side of the daemon's socket: one request, one answer.

`NoDaemon` means nobody of this user is serving (no socket, a stale one, a
refused connect): the CLI then does the work in-process. `RemoteError` is
an error answer; code -32001 means the daemon sees another config, state dir
or roots than the CLI, which also sends the CLI to work in-process. The
daemon's peer is checked as the daemon checks its clients: a socket served
by another user is not ours to talk to.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from typing import Any

import structlog

from agentkeep.daemon.server import ENV_MISMATCH, SERVER_ERROR, encode, peer_credentials
from agentkeep.paths import Env

log = structlog.get_logger("agentkeep.client")

_ids = itertools.count(1)


class NoDaemon(Exception):
    """No daemon of this user answers on the socket."""


class RemoteError(Exception):
    """The daemon answered with an error."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data: dict[str, Any] = data or {}

    @property
    def exit(self) -> int:
        value = self.data.get("exit")
        return value if isinstance(value, int) and not isinstance(value, bool) else 1

    @property
    def env_mismatch(self) -> bool:
        return self.code == ENV_MISMATCH


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
    request_id = next(_ids)
    with sock:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        deadline = time.monotonic() + timeout
        try:
            sock.settimeout(timeout)
            sock.sendall(encode(message))
            line = _read_line(sock, deadline)
        except (TimeoutError, OSError) as exc:
            raise RemoteError(
                SERVER_ERROR, f"the daemon did not answer: {exc}", {"exit": 1}
            ) from exc
    return _result_text(line, request_id) if raw else _result(line)


def request_with_env(
    env: Env,
    fingerprint: dict[str, Any],
    method: str,
    params: dict[str, Any],
    *,
    timeout: float = 600,
) -> Any:
    """`call`, with the view the CLI resolved; the daemon answers -32001 when
    its own differs."""
    return call(env, method, {**params, "env": fingerprint}, timeout=timeout)


def connect(env: Env) -> socket.socket:
    """A connection to this user's daemon; NoDaemon when none answers."""
    path = env.socket_path
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5)
        sock.connect(os.fspath(path))
        _pid, uid = peer_credentials(sock)
    except OSError as exc:
        sock.close()
        raise NoDaemon(f"no daemon answers on {path}: {exc.strerror or exc}") from exc
    if uid != env.uid:
        sock.close()
        log.warning("the socket is served by another user; not using it", path=str(path), uid=uid)
        raise NoDaemon(f"{path} is served by uid {uid}, not {env.uid}")
    return sock


def _read_line(sock: socket.socket, deadline: float) -> bytes:
    chunks: list[bytes] = []
    while True:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        # Large reads: an ls answer at 50,000 sessions is about 10 MB.
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise OSError("connection closed before the answer")
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[:end])
            return b"".join(chunks)
        chunks.append(chunk)


def _result_text(line: bytes, request_id: int) -> str:
    """The result as JSON text: a folded list (jsontext) taken from the
    answer as the daemon wrote it, without decoding it (an ls at 50,000
    sessions is 12 MB); any other result decoded and encoded again."""
    head = b'{"jsonrpc":"2.0","id":%d,"result":' % request_id
    if line.startswith(head) and line.endswith(b"}"):
        text = line[len(head) : -1]
        if text == b"[]" or (text.startswith(b"[\t") and text.endswith(b"\t]")):
            return text.decode()
    return json.dumps(_result(line))


def _result(line: bytes) -> Any:
    try:
        answer = json.loads(line)
    except ValueError as exc:
        raise RemoteError(
            SERVER_ERROR, f"the daemon's answer is not JSON: {exc}", {"exit": 1}
        ) from None
    if not isinstance(answer, dict):
        raise RemoteError(SERVER_ERROR, "the daemon's answer is not an object", {"exit": 1})
    error = answer.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise RemoteError(SERVER_ERROR, f"malformed error answer: {error!r}", {"exit": 1})
        code, data = error.get("code"), error.get("data")
        raise RemoteError(
            code if isinstance(code, int) else SERVER_ERROR,
            str(error.get("message", "")),
            data if isinstance(data, dict) else None,
        )
    return answer.get("result")
