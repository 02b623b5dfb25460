"""The socket's protocol, both ends: JSON-RPC 2.0, one object per line.

The daemon and the CLI's client (client.py) frame and read lines only
through this module, and name error codes only by these constants.
"""

from __future__ import annotations

import errno
import json
import socket
import struct
import sys
from collections.abc import Generator

from agentkeep.jsontext import JSONText

# JSON-RPC 2.0 error codes, and the contract's own for "not the same view".
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
SERVER_ERROR = -32000
ENV_MISMATCH = -32001
# The request was not taken (no room for the connection): nothing was done.
BUSY = -32002

# A request line longer than this is answered with an error and skipped.
MAX_LINE = 1 << 20


def encode(message: dict[str, object]) -> bytes:
    """One message as one line. json.dumps escapes newlines inside strings,
    so the only newline is the last byte."""
    return b"".join(encoded(message))


def encoded(message: dict[str, object]) -> Generator[bytes, None, None]:
    """encode(message) in parts: a result already encoded (JSONText: ls at
    tens of thousands of sessions) is sent as it is, part after part, after
    the rest of the message, so it is never copied whole; it is one line too."""
    result = message.get("result")
    if not isinstance(result, JSONText):
        yield json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        return
    parts = result.parts()
    try:
        head = {k: v for k, v in message.items() if k != "result"}
        yield json.dumps(head, separators=(",", ":"), allow_nan=False)[:-1].encode() + b',"result":'
        for part in parts:
            yield part.encode()
        yield b"}\n"
    finally:
        close = getattr(parts, "close", None)
        if close is not None:
            close()  # a send given up half way: the parts' reader ends now


def result_head(request_id: int) -> bytes:
    """How encode() begins the answer to a request: what follows it, up to
    the closing brace, is the result's JSON text as the daemon wrote it."""
    return b'{"jsonrpc":"2.0","id":%d,"result":' % request_id


def decode(line: bytes) -> dict[str, object]:
    """One line (without its newline) as a JSON object; ValueError when it
    is not JSON (nesting too deep included), TypeError when it is no object."""
    try:
        doc = json.loads(line)
    except RecursionError as exc:
        raise ValueError(str(exc)) from exc
    if not isinstance(doc, dict):
        raise TypeError("not a JSON object")
    return doc


def peer_credentials(sock: socket.socket) -> tuple[int | None, int]:
    """(pid, uid) of the process at the other end, from the kernel: each end
    checks the other is the same user."""
    if hasattr(socket, "SO_PEERCRED"):
        fmt = "3i"
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize(fmt))
        pid, uid, _gid = struct.unpack(fmt, raw)
        return pid, uid
    if sys.platform == "darwin":
        # <sys/un.h>: SOL_LOCAL 0, LOCAL_PEERCRED 1 (struct xucred: u_int
        # cr_version, uid_t cr_uid, ...), LOCAL_PEERPID 2.
        raw = sock.getsockopt(0, 1, 76)
        _version, uid = struct.unpack_from("Ii", raw)
        pid = struct.unpack("i", sock.getsockopt(0, 2, 4))[0]
        return pid, uid
    raise OSError(errno.ENOTSUP, "no way to read a unix socket peer's credentials here")
