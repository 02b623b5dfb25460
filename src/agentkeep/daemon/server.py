"""The daemon's unix socket: JSON-RPC 2.0, one object per line each way.

Each connection gets its own thread, so a slow or dead client only ever
stalls its own thread: a client that never reads is dropped when a send
times out, a client that stalls mid-line just parks its thread, and a line
over MAX_LINE is answered with an error and skipped without being held in
memory. How many connections, leases and unfinished bytes clients may hold
is limits.py's to decide; a connection it closes or turns away is told so
with error BUSY, and nothing it had not been answered for was done. Only
the user's own processes are served: the peer's uid comes from the kernel
(SO_PEERCRED, LOCAL_PEERCRED), never from the request, and a peer whose uid
cannot be read is refused. What a method does is the handler's business;
this module only frames, checks and answers.

A handler may answer with a Stream (the `subscribe` method): then each item
it yields goes out as its own answer line with the request's id, and the
connection is given over to it. It ends when the client closes the
connection or sends anything more (a subscribed connection only listens),
when the budgets close it, or when the stream ends (the daemon stops). While
it waits for its next item the connection is not mid-request: it is idle,
and the first to be closed when every slot is taken.
"""

from __future__ import annotations

import errno
import itertools
import math
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentkeep.daemon.limits import Budgets, LeasesSpent, Seat
from agentkeep.jsontext import JSONText
from agentkeep.paths import UnsafeDirectory, ensure_private_dir
from agentkeep.protocol import (
    BUSY,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_LINE,
    PARSE_ERROR,
    SERVER_ERROR,
    decode,
    encode,
    encoded,
    peer_credentials,
)

log = structlog.get_logger("agentkeep.daemon.server")

SEND_TIMEOUT = 10.0
# Enough that a burst of clients waits for accept() instead of being told
# EAGAIN (the kernel caps it at net.core.somaxconn).
BACKLOG = socket.SOMAXCONN
# A connection that says nothing this long, and holds no lease, is closed:
# idle clients must not use up the connection slots of everyone else.
IDLE_TIMEOUT = 60.0

# Test seam: when set, returns the peer uid instead of asking the kernel (a
# test cannot connect as another user). None in production.
_peer_uid_override: Callable[[socket.socket], int] | None = None


class RpcError(Exception):
    """An error answer. `exit` is the CLI's exit code for it (error.data.exit)."""

    def __init__(
        self, code: int, message: str, *, exit: int = 1, data: dict[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit = exit
        self.data = data or {}

    def payload(self) -> dict[str, object]:
        return {
            "code": self.code,
            "message": self.message,
            "data": {**self.data, "exit": self.exit},
        }


class BadRequest(RpcError):
    """A request the client got wrong (not JSON, not a request, an unknown
    method or parameter): the CLI exits 2 for it, as for any usage error."""

    exit = 2

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message, exit=BadRequest.exit)


class ServerError(Exception):
    """The socket cannot be served (unsafe folder, path taken by a non-socket)."""


class AlreadyServing(ServerError):
    """Another daemon answers on the socket."""


@dataclass
class Connection:
    """One client. Resources it takes (leases) are closed when it goes away,
    and each counts against the lease budget while it is held."""

    number: int
    pid: int | None
    uid: int
    seat: Seat
    budgets: Budgets
    _closers: dict[str, Callable[[], None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def holds_anything(self) -> bool:
        with self._lock:
            return bool(self._closers)

    def keep(self, token: str, close: Callable[[], None]) -> None:
        """Hold `close` until release or disconnect. When the lease budget is
        spent it is closed at once and an error says so: a hold is refused,
        never one already held dropped."""
        try:
            self.budgets.take_lease(self.seat)
        except LeasesSpent as exc:
            close()
            raise RpcError(
                SERVER_ERROR,
                f"too many leases held ({exc.limit}, this daemon's limit): release one, "
                "or take a shared flock on the session's lease file yourself",
            ) from None
        with self._lock:
            self._closers[token] = close

    def release(self, token: str) -> bool:
        """Close one resource this connection took; False when it has none so named."""
        with self._lock:
            close = self._closers.pop(token, None)
        if close is None:
            return False
        try:
            close()
        finally:
            self.budgets.drop_lease(self.seat)
        return True

    def close_all(self) -> None:
        with self._lock:
            closers, self._closers = list(self._closers.values()), {}
        for close in closers:
            try:
                close()
            except OSError as exc:
                log.warning("closing a connection's resource failed", error=str(exc))
            finally:
                self.budgets.drop_lease(self.seat)


@dataclass
class Stream:
    """A result sent as many lines (see the module's docstring). Each item of
    `results` is one answer line; None sends nothing and only lets the server
    look whether the client is still there (yield one every few seconds)."""

    results: Generator[object, None, None]


Handler = Callable[[Connection, str, dict[str, object]], object]


def error_message(request_id: object, error: RpcError) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.payload()}


class Server:
    """A unix socket server at `path` for the user `uid`."""

    def __init__(
        self,
        path: Path,
        handler: Handler,
        uid: int | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        self.path = path
        self.handler = handler
        self.uid = os.getuid() if uid is None else uid
        self.budgets = Budgets() if budgets is None else budgets
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._stop = threading.Event()
        # Written by close() to wake the accept loop out of select().
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._count = itertools.count(1)

    # -- binding ----------------------------------------------------------
    def bind(self) -> None:
        """Take the socket: a safe folder, no live daemon, a stale file replaced."""
        folder = self.path.parent
        try:
            # An existing folder others can write to is refused, never
            # chmodded: whoever can write there can swap the socket under the
            # clients.
            ensure_private_dir(folder, self.uid)
        except UnsafeDirectory as exc:
            raise ServerError(f"refusing the socket's folder: {exc}") from exc
        except OSError as exc:
            raise ServerError(f"cannot create the socket's folder {folder}: {exc}") from exc
        self._clear_stale()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self.path))
            os.chmod(self.path, 0o600)
            listener.listen(BACKLOG)
        except OSError as exc:
            listener.close()
            raise ServerError(f"cannot listen on {self.path}: {exc}") from exc
        st = os.stat(self.path)
        self._inode = (st.st_dev, st.st_ino)
        listener.setblocking(False)
        self._listener = listener

    def _clear_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ServerError(f"{self.path} exists and is not a socket; not replacing it")
        if answers(self.path):
            raise AlreadyServing(f"another agentkeep daemon is already serving {self.path}")
        # Nobody accepts on it: a crashed daemon's socket. The folder is ours
        # and private, so nobody can swap it between this check and the unlink.
        log.info("replacing a stale socket", path=str(self.path))
        os.unlink(self.path)

    # -- serving ----------------------------------------------------------
    def start(self) -> None:
        """Accept connections on a background thread (after bind())."""
        self._thread = threading.Thread(
            target=self._accept_loop, name="agentkeep-accept", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop accepting and remove the socket file, if it is still ours."""
        if self._wake_w < 0:
            return  # already closed
        self._stop.set()
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            waiting: list[socket.socket | int] = [self._listener, self._wake_r]
            readable, _, _ = select.select(waiting, [], [])
            if self._wake_r in readable:
                return
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                log.warning("accept failed", error=str(exc), **self.budgets.counts)
                time.sleep(0.1)  # EMFILE and the like: do not spin
                continue
            sock.setblocking(True)
            threading.Thread(
                target=self._connection,
                args=(sock, next(self._count)),
                name="agentkeep-conn",
                daemon=True,
            ).start()

    def _connection(self, sock: socket.socket, number: int) -> None:
        with sock:
            conn = self._admit(sock, number)
            if conn is None:
                return
            if not self.budgets.join(conn.seat):
                log.warning("connection refused: every slot is mid-request", conn=number)
                _notice(sock, f"too many connections ({self.budgets.slots}, each mid-request)")
                return
            try:
                self._serve(sock, conn)
            finally:
                self.budgets.leave(conn.seat)
            if conn.seat.closed is not None:
                log.info("connection closed", conn=number, pid=conn.pid, why=conn.seat.closed)
                _notice(sock, conn.seat.closed)

    def _serve(self, sock: socket.socket, conn: Connection) -> None:
        try:
            self._read_lines(sock, conn)
        except OSError as exc:
            log.info("connection dropped", conn=conn.number, pid=conn.pid, error=str(exc))
        finally:
            conn.close_all()

    def _admit(self, sock: socket.socket, number: int) -> Connection | None:
        """The connection, or None when its peer is another user (or unknown)."""
        try:
            pid, uid = peer_credentials(sock)
            if _peer_uid_override is not None:
                uid = _peer_uid_override(sock)
        except OSError as exc:
            log.warning("peer credentials unreadable; refused", conn=number, error=str(exc))
            _send_quietly(
                sock, RpcError(SERVER_ERROR, f"refused: peer credentials unreadable ({exc})")
            )
            return None
        if uid != self.uid:
            log.warning("connection from another user refused", conn=number, pid=pid, uid=uid)
            _send_quietly(
                sock,
                RpcError(
                    SERVER_ERROR, f"refused: this daemon serves uid {self.uid}, not uid {uid}"
                ),
            )
            return None
        return Connection(number, pid, uid, Seat(number, sock), self.budgets)

    def _read_lines(self, sock: socket.socket, conn: Connection) -> None:
        """Answer each line until the client goes, idles out, or the budgets
        close the connection (conn.seat.closed says why)."""
        seat = conn.seat
        buf = bytearray()
        skipping = False  # inside a line over MAX_LINE, already answered
        while seat.closed is None:
            try:
                chunk = self._receive(sock)
            except TimeoutError:
                if conn.holds_anything:
                    continue  # a lease lasts as long as its connection
                log.info("idle connection closed", conn=conn.number, pid=conn.pid)
                return
            if not chunk:
                return
            seat.last_seen = time.monotonic()
            if skipping:
                end = chunk.find(b"\n")
                if end < 0:
                    continue
                skipping, chunk = False, chunk[end + 1 :]
            buf += chunk
            while (end := buf.find(b"\n")) >= 0:
                line = bytes(buf[:end])
                del buf[: end + 1]
                self.budgets.unfinished(seat, len(buf))  # an ended line no longer counts
                if len(line) > MAX_LINE:
                    self._send(sock, _TOO_LONG)
                elif not self._answer(sock, conn, line):
                    return
            if len(buf) > MAX_LINE:
                # Answer now and drop the rest of the line as it comes, so a
                # huge line never sits in memory.
                buf.clear()
                skipping = True
                self._send(sock, _TOO_LONG)
            self.budgets.unfinished(seat, len(buf))

    @staticmethod
    def _receive(sock: socket.socket) -> bytes:
        sock.settimeout(IDLE_TIMEOUT)
        try:
            return sock.recv(65536)
        finally:
            sock.settimeout(None)

    def _answer(self, sock: socket.socket, conn: Connection, line: bytes) -> bool:
        """Answer one line; False when the connection was closed before it
        could be (then nothing of it was done)."""
        if not line.strip():
            return True
        if not self.budgets.begin(conn.seat):
            return False
        try:
            answer = self._answer_for(conn, line)
            if not isinstance(answer, tuple):
                return self._send_parts(sock, conn, answer)
        finally:
            self.budgets.end(conn.seat)
        self._stream(sock, conn.seat, *answer)
        return False  # the connection was the stream's: it ends with it

    def _stream(self, sock: socket.socket, seat: Seat, request_id: object, stream: Stream) -> None:
        try:
            for result in stream.results:
                if seat.closed is not None or _client_spoke(sock):
                    return
                if result is not None:
                    self._send(sock, {"jsonrpc": "2.0", "id": request_id, "result": result})
        finally:
            stream.results.close()

    def _answer_for(
        self, conn: Connection, line: bytes
    ) -> bytes | Generator[bytes, None, None] | tuple[object, Stream]:
        request_id: object = None
        try:
            request = _load(line)
            request_id = _request_id(request.get("id"))
            method, params = _fields(request)
            result = self.handler(conn, method, params)
            if isinstance(result, Stream):
                return request_id, result
            message: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "result": result}
            if isinstance(result, JSONText):
                # Sent as it is written (ls at tens of thousands of
                # sessions): never held whole, in Python or as bytes.
                return encoded(message)
            data = encode(message)
        except RpcError as exc:
            data = encode(error_message(request_id, exc))
        except Exception as exc:
            # Bad input never stops the daemon (invariant 11): answer and go on.
            log.exception("request failed", conn=conn.number)
            error = RpcError(SERVER_ERROR, f"internal error: {type(exc).__name__}: {exc}")
            data = encode(error_message(request_id, error))
        return data

    def _send_parts(
        self, sock: socket.socket, conn: Connection, answer: bytes | Generator[bytes, None, None]
    ) -> bool:
        """Send an answer, whole or part after part; False (the connection is
        closed) when its parts failed half way, after the first was sent: a
        line cut short is all the client can be told then."""
        if isinstance(answer, bytes):
            self._send_bytes(sock, answer)
            return True
        try:
            for part in answer:
                self._send_bytes(sock, part)
        except OSError:
            raise  # the client went away, or stopped reading: dropped
        except Exception:
            log.exception("answer failed half way; connection closed", conn=conn.number)
            return False
        finally:
            answer.close()
        return True

    def _send(self, sock: socket.socket, message: dict[str, object]) -> None:
        self._send_bytes(sock, encode(message))

    @staticmethod
    def _send_bytes(sock: socket.socket, data: bytes) -> None:
        # A client that does not read its answers would block this thread
        # forever: the timeout drops it instead (its leases end with it).
        sock.settimeout(SEND_TIMEOUT)
        try:
            sock.sendall(data)
        finally:
            sock.settimeout(None)


_TOO_LONG = error_message(None, BadRequest(INVALID_REQUEST, "line over 1 MiB"))


def _request_id(value: object) -> object:
    """JSON-RPC ids are strings, integers or null; a float is tolerated when
    it can be written back (NaN and Infinity cannot: answered with id null)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise BadRequest(INVALID_REQUEST, "id must be a string, a number or null")


def _load(line: bytes) -> dict[str, object]:
    try:
        request = decode(line)
    except ValueError as exc:
        raise BadRequest(PARSE_ERROR, f"not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise BadRequest(INVALID_REQUEST, "a request is a JSON object")
    return request


def _fields(request: dict[str, object]) -> tuple[str, dict[str, object]]:
    """(method, params) of a request; RpcError when it is not one."""
    method = request.get("method")
    params = request.get("params")
    if request.get("jsonrpc", "2.0") != "2.0":
        raise BadRequest(INVALID_REQUEST, 'jsonrpc must be "2.0"')
    if not isinstance(method, str):
        raise BadRequest(INVALID_REQUEST, "method must be a string")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise BadRequest(INVALID_PARAMS, "params must be an object")
    return method, params


def _client_spoke(sock: socket.socket) -> bool:
    """Whether the client closed its end, or sent something, or the budgets
    shut its reading side: any of them ends a stream. Looked at without
    waiting and without select() (a connection's descriptor may be past
    FD_SETSIZE)."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    return True


def _notice(sock: socket.socket, why: str) -> None:
    """Tell a client its connection is being closed and nothing more of it
    is answered (BUSY: what it asked was not done, so it may do it
    elsewhere). Sent without waiting: a client that does not read is not
    waited for."""
    data = encode(error_message(None, RpcError(BUSY, f"{why}; try again", exit=1)))
    try:
        sock.send(data, socket.MSG_DONTWAIT)
    except OSError:
        pass


def _send_quietly(sock: socket.socket, error: RpcError) -> None:
    try:
        sock.settimeout(SEND_TIMEOUT)
        sock.sendall(encode(error_message(None, error)))
    except OSError:
        pass


def answers(path: Path, timeout: float = 2.0) -> bool:
    """True when something accepts connections on the unix socket at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return False
        except OSError as exc:
            # A full backlog (EAGAIN) means a live, busy daemon.
            return exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK) or isinstance(exc, TimeoutError)
    return True
