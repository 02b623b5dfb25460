"""One client's connection: its lines read and answered, its leases, and a
stream it subscribed to.

Each connection has a thread of its own, so a slow or dead client only
ever stalls its own thread: a client that never reads is dropped when a
send times out, a client that stalls mid-line just parks its thread, and a
line over MAX_LINE is answered with an error and skipped without being held
in memory. What a method does is the handler's business; this module only
frames, checks and answers.

A handler may answer with a Stream (the `subscribe` method): then each item
it yields goes out as its own answer line with the request's id, and the
connection is given over to it. It ends when the client closes the
connection or sends anything more (a subscribed connection only listens),
when the budgets close it, or when the stream ends (the daemon stops). While
it waits for its next item the connection is not mid-request: it is idle,
and the first to be closed when every slot is taken.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import structlog

from agentkeep.daemon import rpc
from agentkeep.daemon.limits import Budgets, LeasesSpent, Seat
from agentkeep.errors import Failed, Failure, error_message
from agentkeep.jsontext import JSONText
from agentkeep.protocol import MAX_LINE, encode, encoded

log = structlog.get_logger("agentkeep.daemon.server")

SEND_TIMEOUT = 10.0
# A connection that says nothing this long, and holds no lease, is closed:
# idle clients must not use up the connection slots of everyone else.
IDLE_TIMEOUT = 60.0


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
            raise Failed(
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


class Conversation:
    """The requests of one connection, each answered in turn."""

    def __init__(self, sock: socket.socket, conn: Connection, handler: Handler) -> None:
        self.sock, self.conn, self.handler = sock, conn, handler
        self.budgets = conn.budgets

    def run(self) -> None:
        """Answer until the client goes, idles out, or the budgets close the
        connection; then close what it took."""
        try:
            self._read_lines()
        except OSError as exc:
            log.info("connection dropped", conn=self.conn.number, pid=self.conn.pid, error=str(exc))
        finally:
            self.conn.close_all()

    def _read_lines(self) -> None:
        """Answer each line until the client goes, idles out, or the budgets
        close the connection (conn.seat.closed says why)."""
        sock, conn = self.sock, self.conn
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
                    self._send(rpc.TOO_LONG)
                elif not self._answer(line):
                    return
            if len(buf) > MAX_LINE:
                # Answer now and drop the rest of the line as it comes, so a
                # huge line never sits in memory.
                buf.clear()
                skipping = True
                self._send(rpc.TOO_LONG)
            self.budgets.unfinished(seat, len(buf))

    @staticmethod
    def _receive(sock: socket.socket) -> bytes:
        sock.settimeout(IDLE_TIMEOUT)
        try:
            return sock.recv(65536)
        finally:
            sock.settimeout(None)

    def _answer(self, line: bytes) -> bool:
        """Answer one line; False when the connection was closed before it
        could be (then nothing of it was done)."""
        if not line.strip():
            return True
        conn = self.conn
        if not self.budgets.begin(conn.seat):
            return False
        try:
            answer = self._answer_for(line)
            if not isinstance(answer, tuple):
                return self._send_parts(answer)
        finally:
            self.budgets.end(conn.seat)
        self._stream(*answer)
        return False  # the connection was the stream's: it ends with it

    def _stream(self, request_id: object, stream: Stream) -> None:
        try:
            for result in stream.results:
                if self.conn.seat.closed is not None or _client_spoke(self.sock):
                    return
                if result is not None:
                    self._send({"jsonrpc": "2.0", "id": request_id, "result": result})
        finally:
            stream.results.close()

    def _answer_for(
        self, line: bytes
    ) -> bytes | Generator[bytes, None, None] | tuple[object, Stream]:
        request_id: object = None
        try:
            request = rpc.load(line)
            request_id = rpc.request_id(request.get("id"))
            method, params = rpc.fields(request)
            result = self.handler(self.conn, method, params)
            if isinstance(result, Stream):
                return request_id, result
            message: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "result": result}
            if isinstance(result, JSONText):
                # Sent as it is written (ls at tens of thousands of
                # sessions): never held whole, in Python or as bytes.
                return encoded(message)
            data = encode(message)
        except Failure as exc:
            data = encode(error_message(request_id, exc))
        except Exception as exc:
            # Bad input never stops the daemon (invariant 11): answer and go on.
            log.exception("request failed", conn=self.conn.number)
            error = Failed(f"internal error: {type(exc).__name__}: {exc}")
            data = encode(error_message(request_id, error))
        return data

    def _send_parts(self, answer: bytes | Generator[bytes, None, None]) -> bool:
        """Send an answer, whole or part after part; False (the connection is
        closed) when its parts failed half way, after the first was sent: a
        line cut short is all the client can be told then."""
        if isinstance(answer, bytes):
            self._send_bytes(answer)
            return True
        try:
            for part in answer:
                self._send_bytes(part)
        except OSError:
            raise  # the client went away, or stopped reading: dropped
        except Exception:
            log.exception("answer failed half way; connection closed", conn=self.conn.number)
            return False
        finally:
            answer.close()
        return True

    def _send(self, message: dict[str, object]) -> None:
        self._send_bytes(encode(message))

    def _send_bytes(self, data: bytes) -> None:
        sock = self.sock
        # A client that does not read its answers would block this thread
        # forever: the timeout drops it instead (its leases end with it).
        sock.settimeout(SEND_TIMEOUT)
        try:
            sock.sendall(data)
        finally:
            sock.settimeout(None)


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
