"""The daemon's `subscribe` method, on a real daemon over its real socket:
one line at once, one line per change after it (a dry run is none), the
stream ends with the client, and every other client is served meanwhile.
The server's side of a stream (Server with a Stream answer) is tested
in-process at the end."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Generator
from typing import Any

import pytest

from agentkeep import client
from agentkeep.daemon.connection import Connection, Stream
from agentkeep.daemon.server import Server
from agentkeep.paths import Env
from build_claude import make_session
from test_daemon_serve import read_answer, start_daemon, stop_daemons  # noqa: F401 (fixture)
from waiting import wait_until

pytestmark = pytest.mark.slow


def _subscribe(sock: socket.socket, request_id: int = 7) -> None:
    line = {"jsonrpc": "2.0", "id": request_id, "method": "subscribe", "params": {}}
    sock.sendall(json.dumps(line).encode() + b"\n")


class Lines:
    """The answer lines of one connection, read on a thread as they come."""

    def __init__(self, sock: socket.socket) -> None:
        self.got: list[dict[str, Any]] = []
        self.closed = threading.Event()
        self._sock = sock
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed.set()
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self.got.append(json.loads(line))


def test_subscribe_streams_a_line_per_change_and_none_for_a_dry_run(fake_home) -> None:
    fake_home.write_config('retention = "30d"\n')
    s = make_session(fake_home, cwd="/home/u/proj", age_days=40)
    daemon = start_daemon(fake_home)
    sock = daemon.connect()
    sock.settimeout(None)
    _subscribe(sock)
    lines = Lines(sock)
    first = wait_until(lambda: lines.got[:1], "the first line", 15, setup=False)[0]
    assert first["id"] == 7 and set(first["result"]) == {"changes"}
    start = first["result"]["changes"]
    # A dry run changes nothing: a subscription made after two of them
    # starts from the same count.
    daemon.call("prune", {"dry_run": True})
    daemon.call("purge", {"agent": "claude", "id": s.id, "dry_run": True})
    with daemon.connect() as again:
        _subscribe(again, 8)
        assert read_answer(again)["result"] == {"changes": start}
    assert lines.got[1:] == []
    daemon.call("pin", {"agent": "claude", "id": s.id})
    second = wait_until(lambda: lines.got[1:2], "a line for the pin", 15, setup=False)[0]
    assert second == {"jsonrpc": "2.0", "id": 7, "result": {"changes": start + 1}}
    # A change on disk (a new session the watch sees) is a line too.
    make_session(fake_home, cwd="/home/u/proj", age_days=0)
    wait_until(lambda: len(lines.got) >= 3, "a line for a new session on disk", 20, setup=False)
    assert lines.got[2]["result"]["changes"] > start + 1
    # Everyone else is served while the stream stands.
    assert daemon.status()["pid"] == daemon.proc.pid
    sock.close()
    assert daemon.status()["pid"] == daemon.proc.pid


def test_the_stream_ends_when_the_daemon_stops(fake_home) -> None:
    daemon = start_daemon(fake_home)
    sock = daemon.connect()
    sock.settimeout(None)
    _subscribe(sock)
    lines = Lines(sock)
    wait_until(lambda: lines.got, "the first line", 15, setup=False)
    assert daemon.stop() == 0
    assert lines.closed.wait(10), "the stream did not end with the daemon"


def test_client_results_reads_the_stream(fake_home) -> None:
    """client.results (what `agentkeep ui` uses) yields each line's result."""
    daemon = start_daemon(fake_home)
    sock = client.connect(Env.from_environ(fake_home.environ))
    stream = client.results(sock, "subscribe", {})
    assert set(next(stream)) == {"changes"}
    daemon.call("scan")
    assert set(next(stream)) == {"changes"}
    sock.shutdown(socket.SHUT_RDWR)
    assert list(stream) == []
    sock.close()


def test_a_stream_ends_when_its_client_goes_while_nothing_changes(fake_home) -> None:
    """In-process: the server looks at the client at each None the stream
    yields, so a client that went away while nothing changed ends its
    stream (the generator is closed) without a line being sent."""
    env = Env.from_environ(fake_home.environ)
    ticks = threading.Event()
    ended = threading.Event()

    def stream() -> Generator[object, None, None]:
        try:
            yield {"changes": 0}
            while True:
                ticks.wait(5)
                ticks.clear()
                yield None
        finally:
            ended.set()

    def handler(conn: Connection, method: str, params: dict[str, object]) -> object:
        return Stream(stream()) if method == "subscribe" else "pong"

    srv = Server(env.socket_path, handler)
    srv.bind()
    srv.start()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(env.socket_path))
        _subscribe(sock, 3)
        assert read_answer(sock) == {"jsonrpc": "2.0", "id": 3, "result": {"changes": 0}}
        sock.close()
        ticks.set()
        assert ended.wait(10), "the stream went on after its client closed"
        assert client.call(env, "ping", {}) == "pong"
    finally:
        srv.close()
