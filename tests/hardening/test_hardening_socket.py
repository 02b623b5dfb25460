"""The real daemon's socket under fuzz (issue #7): random bytes, partial lines,
lines over 1 MiB, deeply nested JSON, near-valid requests, many connections at
once and clients that never read. After every example, a well-behaved client
still gets `status` within 2 seconds, and the daemon is still the same process.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hardening_util import discard_home, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkeep import client
from agentkeep.daemon.limits import MAX_CONNECTIONS
from agentkeep.errors import Failure
from agentkeep.methods import METHODS
from agentkeep.protocol import MAX_LINE
from fakehome import make_fake_home
from test_daemon_serve import Daemon, ask, read_answer, start_daemon

pytestmark = pytest.mark.slow

STATUS_WITHIN = 2.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for the whole module (a fresh one per example would make 50
    examples cost minutes); killed when the module ends."""
    fh = make_fake_home(tmp_path_factory.mktemp("fuzz"))
    d = start_daemon(fh)
    yield d
    if d.proc.poll() is None:
        d.proc.kill()
    d.proc.wait(10)
    discard_home(fh)


@pytest.fixture(scope="module")
def base_threads(daemon: Daemon) -> int:
    """The daemon's threads before any fuzzing (slack for its own pools)."""
    return threads_of(daemon.proc.pid) + 2


def status_in_time(d: Daemon) -> dict[str, Any]:
    """What a well-behaved client gets, asserted to come within 2 s."""
    started = time.monotonic()
    try:
        doc = client.call(d.env, "status", {}, timeout=STATUS_WITHIN)
    except (client.NoDaemon, Failure) as exc:
        raise AssertionError(f"status failed: {exc}\n{d.stderr()[-3000:]}") from None
    took = time.monotonic() - started
    assert took < STATUS_WITHIN, f"status took {took:.2f} s"
    assert doc["pid"] == d.proc.pid
    return doc


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


def _try_connect(d: Daemon) -> socket.socket | None:
    try:
        return d.connect()
    except BlockingIOError:
        return None


@dataclass
class Clients:
    """The fuzzing side's sockets; all closed after each example."""

    d: Daemon
    open: list[socket.socket] = field(default_factory=list)
    # (socket, what the answer's error code must be) for lines that must be answered.
    expect: list[tuple[socket.socket, set[int]]] = field(default_factory=list)

    def connect(self) -> socket.socket:
        # A full accept backlog (EAGAIN) is the fuzzer going faster than
        # accept(): wait for room, as a real client would.
        sock = wait_until(lambda: _try_connect(self.d), "room in the accept backlog", 10)
        self.open.append(sock)
        return sock

    def close(self) -> None:
        for sock in self.open:
            sock.close()
        self.open.clear()
        self.expect.clear()


def send_some(sock: socket.socket, data: bytes, budget: float = 2.0) -> int:
    """Send without ever blocking longer than `budget` (a daemon that stops
    reading a client must not stall the fuzzer either); bytes sent."""
    sock.settimeout(budget)
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent : sent + 65536])
    except (TimeoutError, BlockingIOError, BrokenPipeError, ConnectionResetError):
        pass
    return sent


# -- the actions ------------------------------------------------------------------------


def do_bytes(c: Clients, payload: bytes, newline: bool) -> None:
    send_some(c.connect(), payload + (b"\n" if newline else b""))


def do_partial(c: Clients, payload: bytes, _: object) -> None:
    # Half a line, and then nothing: the connection stays open, mid-line.
    send_some(c.connect(), payload.replace(b"\n", b"") or b"{")


def do_huge(c: Clients, size: int, terminated: bool) -> None:
    sock = c.connect()
    line = b'{"jsonrpc": "2.0", "id": 1, "method": "status", "params": {"x": "'
    line += b"a" * (size - len(line))
    if terminated:
        sent = send_some(sock, line + b"\n", budget=10)
        assert sent == len(line) + 1, "the daemon stopped reading a huge line"
        c.expect.append((sock, {-32600}))
    else:
        send_some(sock, line)


def do_deep(c: Clients, depth: int, _: object) -> None:
    sock = c.connect()
    sent = send_some(sock, b"[" * depth + b"]" * depth + b"\n")
    if sent == 2 * depth + 1:
        c.expect.append((sock, {-32700, -32600}))


def do_request(c: Clients, request: dict[str, Any], _: object) -> None:
    sock = c.connect()
    if send_some(sock, json.dumps(request).encode() + b"\n"):
        c.expect.append((sock, set()))  # any answer, error or result


def do_many(c: Clients, n: int, payload: bytes) -> None:
    for _ in range(n):
        send_some(c.connect(), payload)


def do_deaf(c: Clients, requests: int, _: object) -> None:
    """Asks and asks and never reads: the daemon's answers pile up."""
    sock = c.connect()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    send_some(sock, b'{"jsonrpc": "2.0", "id": 1, "method": "status"}\n' * requests, budget=0.5)


ACTIONS = {
    "bytes": do_bytes,
    "partial": do_partial,
    "huge": do_huge,
    "deep": do_deep,
    "request": do_request,
    "many": do_many,
    "deaf": do_deaf,
}

json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
# A non-finite id (NaN, Infinity) is a known bug with its own test below; the
# fuzz leaves it out so that it finds something else.
request_id = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
request_id |= st.floats(allow_nan=False, allow_infinity=False)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)
request = st.fixed_dictionaries(
    {"method": st.sampled_from(sorted(METHODS)) | st.text(max_size=12)},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0"]) | json_leaf,
        "id": request_id,
        "params": st.dictionaries(
            st.sampled_from(["agent", "id", "lease", "by", "env", "dry_run", "x"]), json_value
        )
        | json_value,
    },
)
action = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=4096), st.booleans()),
    st.tuples(st.just("partial"), st.binary(min_size=1, max_size=512), st.none()),
    st.tuples(st.just("huge"), st.sampled_from([MAX_LINE + 1, 2 * MAX_LINE + 7]), st.booleans()),
    st.tuples(st.just("deep"), st.sampled_from([50, 5_000, 200_000]), st.none()),
    st.tuples(st.just("request"), request, st.none()),
    st.tuples(st.just("many"), st.integers(2, 64), st.binary(max_size=256)),
    st.tuples(st.just("deaf"), st.integers(100, 20_000), st.none()),
)


@settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(actions=st.lists(action, min_size=1, max_size=3))
def test_status_is_answered_whatever_else_arrives(
    daemon: Daemon, base_threads: int, actions: list[Any]
) -> None:
    c = Clients(daemon)
    try:
        for name, a, b in actions:
            ACTIONS[name](c, a, b)
        status_in_time(daemon)
        for sock, codes in c.expect:
            sock.settimeout(10)
            answer = read_answer(sock)
            assert answer.get("jsonrpc") == "2.0", answer
            if codes:
                assert answer["error"]["code"] in codes, answer
    finally:
        c.close()
    assert daemon.proc.poll() is None, daemon.stderr()[-3000:]


@pytest.mark.parametrize("bad_id", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_a_request_with_a_non_finite_id_gets_an_answer(daemon: Daemon, bad_id: bytes) -> None:
    c = Clients(daemon)
    try:
        sock = c.connect()
        sock.settimeout(5)
        answer = ask(sock, b'{"jsonrpc": "2.0", "method": "status", "id": ' + bad_id + b"}")
        assert answer["jsonrpc"] == "2.0" and ("error" in answer or "result" in answer)
    finally:
        c.close()
    status_in_time(daemon)


def test_after_the_fuzz_its_threads_go_away(daemon: Daemon, base_threads: int) -> None:
    """Connections that closed leave nothing behind (no thread per dead client)."""
    wait_until(lambda: threads_of(daemon.proc.pid) <= base_threads, "the fuzz's threads to end")
    c = Clients(daemon)
    for _ in range(40):
        send_some(c.connect(), b'{"jsonrpc": "2.0", "id": 1, "meth')
    wait_until(lambda: threads_of(daemon.proc.pid) >= base_threads + 30, "a thread per client")
    c.close()
    wait_until(lambda: threads_of(daemon.proc.pid) <= base_threads, "the threads to end", 10)
    status_in_time(daemon)


def test_more_idle_connections_than_slots_do_not_lock_out_status(daemon: Daemon) -> None:
    c = Clients(daemon)
    try:
        for _ in range(MAX_CONNECTIONS + 20):
            c.connect()
        # SETUP: the daemon really took them all in (a thread each).
        wait_until(
            lambda: threads_of(daemon.proc.pid) >= MAX_CONNECTIONS,
            "the daemon to admit the idle clients",
            10,
        )
        status_in_time(daemon)
    finally:
        c.close()
    wait_until(lambda: status_in_time(daemon), "status after the idle clients left", 10)


def test_a_deaf_client_is_dropped_and_others_go_on(daemon: Daemon) -> None:
    """A client that never reads its answers blocks only its own thread."""
    c = Clients(daemon)
    try:
        deaf = c.connect()
        deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        request = b'{"jsonrpc": "2.0", "id": 1, "method": "status"}\n'
        sent = send_some(deaf, request * 50_000, budget=1.0)
        if sent >= len(request) * 50_000:
            pytest.fail("SETUP INVALID: the daemon never stopped reading the deaf client")
        for _ in range(5):
            status_in_time(daemon)
    finally:
        c.close()
    assert os.path.exists(daemon.env.socket_path)
