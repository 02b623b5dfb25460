"""One client's connection: its JSON-RPC lines read, checked and answered,
its leases, and a stream it subscribed to.

Each connection has a thread of its own, so a slow or dead client only
stalls its own: one that never reads is dropped when a send times out, and
a line over MAX_LINE is answered with an error and skipped without being
held in memory.

A handler may answer with a Stream (`subscribe`): each item it yields goes
out as an answer line with the request's id, until the client closes or
sends anything more, the budgets close it, or the stream ends. Waiting for
its next item the connection is idle, the first closed to make room.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import structlog

from agentkeep.daemon.limits import Budgets, LeasesSpent, Seat
from agentkeep.errors import BadParams, BadRequest, Failed, Failure, NotJSON, error_message
from agentkeep.jsontext import JSONText
from agentkeep.protocol import MAX_LINE, decode, encode, encoded

log = structlog.get_logger("agentkeep.daemon.server")

SEND_TIMEOUT = 10.0
_TOO_LONG = error_message(None, BadRequest("line over 1 MiB"))
# A connection that says nothing this long, and holds no lease, is closed:
# idle clients must not use up the connection slots of everyone else.
IDLE_TIMEOUT = 60.0


@dataclass
class Connection:
    """One client: its requests, each answered in turn, and the leases it
    took, closed when it goes and each counted against the lease budget."""

    number: int
    pid: int | None
    seat: Seat
    budgets: Budgets
    handler: Handler
    _closers: dict[str, Callable[[], None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def _holds_anything(self) -> bool:
        """Whether it holds a lease (then it is never idled out)."""
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

    def _close_all(self) -> None:
        """Close everything it took: the client is gone."""
        with self._lock:
            closers, self._closers = list(self._closers.values()), {}
        for close in closers:
            try:
                close()
            except OSError as exc:
                log.warning("closing a connection's resource failed", error=str(exc))
            finally:
                self.budgets.drop_lease(self.seat)

    def run(self) -> None:
        """Answer until the client goes, idles out, or the budgets close the
        connection; then close what it took."""
        try:
            self._answer_lines()
        except OSError as exc:
            log.info("connection dropped", conn=self.number, pid=self.pid, error=str(exc))
        finally:
            self._close_all()

    def _answer_lines(self) -> None:
        sock, seat = self.seat.sock, self.seat
        buf = bytearray()
        skipping = False  # inside a line over MAX_LINE, already answered
        while seat.closed is None:
            sock.settimeout(IDLE_TIMEOUT)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if self._holds_anything:
                    continue  # a lease lasts as long as its connection
                log.info("idle connection closed", conn=self.number, pid=self.pid)
                return
            finally:
                sock.settimeout(None)  # blocking: _client_spoke's MSG_DONTWAIT must not wait
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
                    self._send(_TOO_LONG)
                elif not self._answer(line):
                    return
            if len(buf) > MAX_LINE:
                # Answer now and drop the rest of the line as it comes, so a
                # huge line never sits in memory.
                buf.clear()
                skipping = True
                self._send(_TOO_LONG)
            self.budgets.unfinished(seat, len(buf))

    def _answer(self, line: bytes) -> bool:
        """Answer one line; False when the connection was closed before it
        could be (then nothing of it was done)."""
        if not line.strip():
            return True
        if not self.budgets.begin(self.seat):
            return False
        try:
            answer = self._answer_for(line)
            if not isinstance(answer, tuple):
                return self._send_parts(answer)
        finally:
            self.budgets.end(self.seat)
        self._stream(*answer)
        return False  # the connection was the stream's: it ends with it

    def _stream(self, request_id: object, stream: Stream) -> None:
        try:
            for result in stream.results:
                if self.seat.closed is not None or _client_spoke(self.seat.sock):
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
            request = _request(line)
            request_id = _request_id(request.get("id"))
            method, params = _fields(request)
            result = self.handler(self, method, params)
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
            log.exception("request failed", conn=self.number)
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
            log.exception("answer failed half way; connection closed", conn=self.number)
            return False
        finally:
            answer.close()
        return True

    def _send(self, message: dict[str, object]) -> None:
        self._send_bytes(encode(message))

    def _send_bytes(self, data: bytes) -> None:
        # A client that does not read its answers would block this thread
        # forever: the timeout drops it instead (its leases end with it).
        sock = self.seat.sock
        sock.settimeout(SEND_TIMEOUT)
        try:
            sock.sendall(data)
        finally:
            sock.settimeout(None)


@dataclass
class Stream:
    """A result sent as many lines, one per item of `results`; None sends
    nothing, only lets the server look whether the client is still there."""

    results: Generator[object, None, None]


Handler = Callable[[Connection, str, dict[str, object]], object]


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


def _request(line: bytes) -> dict[str, object]:
    try:
        return decode(line)
    except ValueError as exc:
        raise NotJSON(f"not JSON: {exc}") from None
    except TypeError:
        raise BadRequest("a request is a JSON object") from None


def _request_id(value: object) -> object:
    """JSON-RPC ids are strings, integers or null; a float is tolerated when
    it can be written back (NaN and Infinity cannot: answered with id null)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise BadRequest("id must be a string, a number or null")


def _fields(request: dict[str, object]) -> tuple[str, dict[str, object]]:
    """(method, params) of a request."""
    method, params = request.get("method"), request.get("params")
    if request.get("jsonrpc", "2.0") != "2.0":
        raise BadRequest('jsonrpc must be "2.0"')
    if not isinstance(method, str):
        raise BadRequest("method must be a string")
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise BadParams("params must be an object")
    return method, params
