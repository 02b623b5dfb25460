"""The socket server in-process, over real unix sockets: framing, errors, slow
clients, peer checks, the socket file's life, the budgets (slots, leases,
unfinished lines) and the client's side of a busy daemon. (test_daemon_serve.py
runs the same protocol against a real daemon process, and
hardening/test_hardening_slots.py the budgets.)"""

from __future__ import annotations

import json
import os
import resource
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentkeep import client, protocol
from agentkeep.daemon import connection, limits, server
from agentkeep.daemon.connection import Connection
from agentkeep.daemon.limits import Budgets
from agentkeep.daemon.server import AlreadyServing, Server, ServerError
from agentkeep.errors import Failure, UnknownMethod
from agentkeep.paths import Env
from waiting import wait_until

pytestmark = pytest.mark.slow


class Recorder:
    """A small handler: echo, a big answer, a resource per connection."""

    def __init__(self) -> None:
        self.closed: list[str] = []
        self.lock = threading.Lock()
        # "wait" blocks until `go` is set; `waiting` counts who is inside.
        self.go = threading.Event()
        self.waiting = 0

    def __call__(self, conn: Connection, method: str, params: dict[str, object]) -> object:
        if method == "echo":
            return params
        if method == "big":
            return "x" * int(params["bytes"])  # type: ignore[call-overload]
        if method == "take":
            token = str(params["name"])
            conn.keep(token, lambda: self._closed(token))
            return {"lease": token}
        if method == "give":
            return conn.release(str(params["name"]))
        if method == "boom":
            raise ValueError("kaboom")
        if method == "wait":
            with self.lock:
                self.waiting += 1
            self.go.wait(30)
            return "went"
        raise UnknownMethod(f"unknown method {method!r}")

    def _closed(self, token: str) -> None:
        with self.lock:
            self.closed.append(token)


@pytest.fixture
def env(fake_home) -> Env:
    return Env.from_environ(fake_home.environ)


@pytest.fixture
def running(env: Env) -> Iterator[tuple[Server, Recorder]]:
    handler = Recorder()
    srv = Server(env.socket_path, handler)
    srv.bind()
    srv.start()
    yield srv, handler
    srv.close()


@contextmanager
def serving(env: Env, budgets: Budgets) -> Iterator[tuple[Server, Recorder]]:
    handler = Recorder()
    srv = Server(env.socket_path, handler, budgets=budgets)
    srv.bind()
    srv.start()
    try:
        yield srv, handler
    finally:
        handler.go.set()
        srv.close()


@pytest.fixture
def small(env: Env) -> Iterator[tuple[Server, Recorder]]:
    """A server with small budgets: 2 slots and 3 leases."""
    with serving(env, Budgets(slots=2, leases=3)) as running:
        yield running


def raw_connect(env: Env) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(env.socket_path))
    return sock


def read_answer(sock: socket.socket) -> dict[str, object]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return json.loads(data)


def test_folder_0700_socket_0600_and_removed_on_close(env: Env) -> None:
    srv = Server(env.socket_path, Recorder())
    srv.bind()
    srv.start()
    try:
        assert stat.S_IMODE(os.stat(env.socket_path.parent).st_mode) == 0o700
        assert stat.S_IMODE(os.lstat(env.socket_path).st_mode) == 0o600
        assert client.call(env, "echo", {"a": 1}) == {"a": 1}
    finally:
        srv.close()
    assert not env.socket_path.exists()
    with pytest.raises(client.NoDaemon):
        client.call(env, "echo", {})


def test_a_folder_others_can_write_is_refused_not_chmodded(env: Env) -> None:
    folder = env.socket_path.parent
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o777)
    with pytest.raises(ServerError, match="written by other users"):
        Server(env.socket_path, Recorder()).bind()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o777
    assert not env.socket_path.exists()


def test_a_stale_socket_is_replaced(env: Env) -> None:
    env.socket_path.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(env.socket_path))
    stale.close()  # bound, never listening: what a crashed daemon leaves
    # A second name keeps the stale inode alive, so a replacement must differ.
    os.link(env.socket_path, env.socket_path.parent / "stale-copy")
    with pytest.raises(client.NoDaemon):
        client.call(env, "echo", {})
    before = os.lstat(env.socket_path).st_ino
    srv = Server(env.socket_path, Recorder())
    srv.bind()
    srv.start()
    try:
        assert os.lstat(env.socket_path).st_ino != before
        assert client.call(env, "echo", {"ok": True}) == {"ok": True}
    finally:
        srv.close()


def test_a_live_socket_is_not_taken(running, env: Env) -> None:
    with pytest.raises(AlreadyServing):
        Server(env.socket_path, Recorder()).bind()
    assert client.call(env, "echo", {"still": "served"}) == {"still": "served"}


def test_a_file_that_is_not_a_socket_is_left_alone(env: Env) -> None:
    env.socket_path.parent.mkdir(mode=0o700)
    env.socket_path.write_text("precious")
    with pytest.raises(ServerError, match="not a socket"):
        Server(env.socket_path, Recorder()).bind()
    assert env.socket_path.read_text() == "precious"


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"this is not json", protocol.PARSE_ERROR),
        (b"\xff\xfe not utf-8", protocol.PARSE_ERROR),
        (b"[1, 2, 3]", protocol.INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 7}', protocol.INVALID_REQUEST),
        (b'{"jsonrpc": "1.0", "id": 7, "method": "echo"}', protocol.INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "echo", "params": [1]}', protocol.INVALID_PARAMS),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "nope"}', protocol.METHOD_NOT_FOUND),
        (b"[" * 100000 + b"]" * 100000, protocol.PARSE_ERROR),
    ],
    # Short ids: an id in PYTEST_CURRENT_TEST over 128 KiB makes exec fail.
    ids=["text", "not-utf8", "array", "no-method", "v1", "list-params", "unknown", "deep"],
)
def test_bad_lines_get_errors_and_the_connection_goes_on(running, env: Env, line, code) -> None:
    with raw_connect(env) as sock:
        sock.sendall(line + b"\n")
        answer = read_answer(sock)
        assert answer["error"]["code"] == code, answer
        assert answer["error"]["data"]["exit"] == 2
        sock.sendall(b'{"jsonrpc": "2.0", "id": 8, "method": "echo", "params": {"n": 1}}\n')
        assert read_answer(sock) == {"jsonrpc": "2.0", "id": 8, "result": {"n": 1}}


def test_an_exception_in_a_handler_is_an_error_answer(running, env: Env) -> None:
    with pytest.raises(Failure) as err:
        client.call(env, "boom", {})
    assert err.value.code == protocol.SERVER_ERROR and "kaboom" in err.value.message
    assert err.value.exit == 1
    assert client.call(env, "echo", {"after": 1}) == {"after": 1}


def test_a_line_over_1_mib_is_answered_and_skipped(running, env: Env) -> None:
    with raw_connect(env) as sock:
        huge = b'{"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"x": "' + b"a" * (2 << 20)
        sock.sendall(huge + b'"}}\n')
        answer = read_answer(sock)
        assert answer["id"] is None and answer["error"]["code"] == protocol.INVALID_REQUEST
        assert "1 MiB" in answer["error"]["message"]
        sock.sendall(b'{"jsonrpc": "2.0", "id": 2, "method": "echo", "params": {"y": 2}}\n')
        assert read_answer(sock)["result"] == {"y": 2}
    fill = protocol.MAX_LINE - len(b'{"id":3,"method":"echo","params":{"x":""}}')
    # One byte over, arriving with its newline: still too long.
    over = b'{"id":4,"method":"echo","params":{"x":"' + b"c" * (fill + 1) + b'"}}'
    assert len(over) == protocol.MAX_LINE + 1
    with raw_connect(env) as sock:
        sock.sendall(over + b"\n")
        assert "1 MiB" in read_answer(sock)["error"]["message"]
        sock.sendall(b'{"id": 5, "method": "echo", "params": {"z": 3}}\n')
        assert read_answer(sock)["result"] == {"z": 3}
    # A line of exactly 1 MiB is still a line.
    exact = b'{"id":3,"method":"echo","params":{"x":"' + b"b" * fill + b'"}}'
    assert len(exact) == protocol.MAX_LINE
    with raw_connect(env) as sock:
        sock.sendall(exact + b"\n")
        assert read_answer(sock)["result"] == {"x": "b" * fill}


def test_stalled_and_non_reading_clients_do_not_block_others(
    running, env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, handler = running
    monkeypatch.setattr(connection, "SEND_TIMEOUT", 1.0)
    stalled = raw_connect(env)
    stalled.sendall(b'{"jsonrpc": "2.0", "id": 1, "meth')  # half a line, then nothing
    deaf = raw_connect(env)
    deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    deaf.sendall(b'{"id": 1, "method": "take", "params": {"name": "deaf"}}\n')
    deaf.sendall(b'{"id": 2, "method": "big", "params": {"bytes": 50000000}}\n')
    started = time.monotonic()
    assert client.call(env, "echo", {"others": "served"}, timeout=5) == {"others": "served"}
    assert time.monotonic() - started < 2
    # The deaf client is dropped when its send times out; its resources go with it.
    wait_until(
        lambda: handler.closed == ["deaf"],
        "the deaf client's resource to be closed",
        5.0,
        setup=False,
    )
    assert client.call(env, "echo", {"still": 1}) == {"still": 1}
    stalled.close()
    deaf.close()


def test_resources_end_at_release_or_disconnect(running, env: Env) -> None:
    _, handler = running
    with raw_connect(env) as sock:
        sock.sendall(b'{"id": 1, "method": "take", "params": {"name": "a"}}\n')
        assert read_answer(sock)["result"] == {"lease": "a"}
        sock.sendall(b'{"id": 2, "method": "take", "params": {"name": "b"}}\n')
        read_answer(sock)
        sock.sendall(b'{"id": 3, "method": "give", "params": {"name": "a"}}\n')
        assert read_answer(sock)["result"] is True
        assert handler.closed == ["a"]
        sock.sendall(b'{"id": 4, "method": "give", "params": {"name": "a"}}\n')
        assert read_answer(sock)["result"] is False
    wait_until(
        lambda: handler.closed == ["a", "b"], "b to close with its connection", 5.0, setup=False
    )


def test_another_uid_is_refused(running, env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    _, handler = running
    seen: list[int] = []

    def other_uid(sock: socket.socket) -> int:
        seen.append(protocol.peer_credentials(sock)[1])
        return os.getuid() + 1

    monkeypatch.setattr(server, "_peer_uid_override", other_uid)
    with raw_connect(env) as sock:
        try:
            sock.sendall(b'{"id": 1, "method": "take", "params": {"name": "intruder"}}\n')
        except BrokenPipeError:
            pass  # refused and closed before the line was written: the answer still waits
        answer = read_answer(sock)
        assert "refused" in answer["error"]["message"]
        # ... and the connection is closed (reset: the request was never read).
        try:
            assert sock.recv(100) == b""
        except ConnectionResetError:
            pass
    assert seen == [os.getuid()], "SETUP INVALID: the seam was not consulted"
    assert handler.closed == []
    monkeypatch.setattr(server, "_peer_uid_override", None)
    assert client.call(env, "echo", {"me": 1}) == {"me": 1}


def test_peer_credentials_are_the_kernels(running, env: Env) -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert protocol.peer_credentials(a) == (os.getpid(), os.getuid())


def test_client_sees_no_daemon_without_a_socket(env: Env) -> None:
    with pytest.raises(client.NoDaemon):
        client.call(env, "status", {})


def test_a_daemon_that_closes_without_answering_is_a_remote_error(env: Env) -> None:
    env.socket_path.parent.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(env.socket_path))
    listener.listen(1)

    def close_at_once() -> None:
        conn, _ = listener.accept()
        conn.recv(1000)
        conn.close()

    t = threading.Thread(target=close_at_once)
    t.start()
    with pytest.raises(Failure) as err:
        client.call(env, "status", {})
    assert err.value.code == protocol.SERVER_ERROR
    t.join()
    listener.close()


def test_folder_is_created_0700_even_with_a_loose_umask(env: Env) -> None:
    old = os.umask(0)
    try:
        srv = Server(env.socket_path, Recorder())
        srv.bind()
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.stat(env.socket_path.parent).st_mode) == 0o700
        assert stat.S_IMODE(os.lstat(env.socket_path).st_mode) == 0o600
    finally:
        srv.close()


# -- the budgets ---------------------------------------------------------------------


def ask(sock: socket.socket, request: dict[str, object]) -> dict[str, object]:
    sock.sendall(json.dumps(request).encode() + b"\n")
    return read_answer(sock)


def take(sock: socket.socket, name: str) -> dict[str, object]:
    return ask(sock, {"id": 1, "method": "take", "params": {"name": name}})


def notice(sock: socket.socket) -> dict[str, object] | None:
    """The closing notice the server sent on `sock`, or None while it is open."""
    sock.settimeout(0)
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return None
    finally:
        sock.settimeout(10)
    assert data.endswith(b"\n"), data
    return json.loads(data)


def test_lease_holders_take_no_slot_and_are_never_closed_to_make_room(small, env: Env) -> None:
    srv, handler = small
    holders = []
    for i in range(3):  # each takes its lease before the next connects
        holders.append(raw_connect(env))
        assert take(holders[-1], f"lease{i}")["result"] == {"lease": f"lease{i}"}
    # Three holders on a server of two slots, and still both slots free:
    idle = [raw_connect(env) for _ in range(2)]
    wait_until(lambda: srv.budgets.counts["in_slots"] == 2, "the idle clients to be seated")
    # ... so a newcomer closes the longest idle of them, never a holder.
    assert client.call(env, "echo", {"n": 1}) == {"n": 1}
    closed = wait_until(lambda: notice(idle[0]), "the idlest client's notice", 5, setup=False)
    assert closed["error"]["code"] == protocol.BUSY
    assert "closed to make room" in closed["error"]["message"]
    assert notice(idle[1]) is None
    for i, sock in enumerate(holders):
        assert notice(sock) is None
        assert ask(sock, {"id": 2, "method": "give", "params": {"name": f"lease{i}"}})["result"]
    assert handler.closed == ["lease0", "lease1", "lease2"]
    for sock in holders + idle:
        sock.close()


def test_a_hold_past_the_lease_budget_is_refused_and_nothing_held_is_dropped(
    small, env: Env
) -> None:
    srv, handler = small
    first, second = raw_connect(env), raw_connect(env)
    assert take(first, "a")["result"] and take(first, "b")["result"]
    assert take(second, "c")["result"]
    refused = take(second, "d")
    assert refused["error"]["code"] == protocol.SERVER_ERROR, refused
    assert "too many leases held (3" in refused["error"]["message"]
    assert refused["error"]["data"]["exit"] == 1
    # The refused resource was closed at once; nothing already held was.
    assert handler.closed == ["d"]
    assert srv.budgets.counts["leases"] == 3
    assert ask(first, {"id": 3, "method": "give", "params": {"name": "a"}})["result"] is True
    assert take(second, "d")["result"] == {"lease": "d"}
    first.close()
    second.close()
    wait_until(lambda: srv.budgets.counts["leases"] == 0, "the leases to end with their clients")
    assert sorted(handler.closed) == ["a", "b", "c", "d", "d"]


def test_when_every_slot_is_mid_request_a_newcomer_is_told_busy(small, env: Env) -> None:
    srv, handler = small
    busy = [raw_connect(env) for _ in range(2)]
    for sock in busy:
        sock.sendall(b'{"id": 1, "method": "wait"}\n')
    wait_until(lambda: handler.waiting == 2, "both slots to be mid-request")
    with pytest.raises(client.Busy, match="too many connections"):
        client.call(env, "echo", {}, timeout=5)
    handler.go.set()
    for sock in busy:
        assert read_answer(sock)["result"] == "went"  # never closed to make room
    assert client.call(env, "echo", {"after": 1}) == {"after": 1}
    for sock in busy:
        sock.close()


def test_unfinished_lines_past_the_total_close_the_largest_others(env: Env) -> None:
    half = b'{"id": 1, "method": "echo", "params": {"x": "' + b"a" * (120 << 10)
    # A whole line of 200 KiB, arriving in pieces: it passes the 256 KiB
    # while it is unfinished, and the stalled ones go for it, never it.
    whole = b'{"id": 2, "method": "echo", "params": {"y": "' + b"b" * (200 << 10) + b'"}}'
    with serving(env, Budgets(unfinished=256 << 10)) as (srv, _):
        stalled = [raw_connect(env) for _ in range(2)]
        for sock in stalled:
            sock.sendall(half)
        wait_until(
            lambda: srv.budgets.counts["unfinished"] == 2 * len(half), "the halves to be read"
        )
        with raw_connect(env) as sock:
            sock.sendall(whole + b"\n")
            assert read_answer(sock)["result"] == {"y": "b" * (200 << 10)}
        for sock in stalled:
            answer = wait_until(lambda s=sock: notice(s), "a notice", 5, setup=False)
            assert answer["error"]["code"] == protocol.BUSY
            assert "unfinished lines over all connections passed 262144 bytes" in str(answer)
            sock.close()
        assert srv.budgets.counts["unfinished"] == 0
        assert client.call(env, "echo", {"still": 1}) == {"still": 1}


def test_the_lease_budget_fits_the_descriptor_limit() -> None:
    for nofile in (1400, 3200, 20000):
        budget = limits.lease_budget(nofile)
        used = limits.FDS_OF_THE_DAEMON + limits.MAX_CONNECTIONS * limits.FDS_PER_SLOT
        assert used + 2 * budget <= nofile
    assert limits.lease_budget(1 << 20) == limits.MAX_LEASES
    assert limits.lease_budget(256) == limits.MIN_LEASES


def test_the_descriptor_limit_is_raised_toward_the_hard_one() -> None:
    want = limits.FDS_OF_THE_DAEMON + 256 * limits.FDS_PER_SLOT + 2 * limits.MAX_LEASES
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= want:
        pytest.fail(f"SETUP INVALID: the hard descriptor limit {hard} is at most {want}")
    code = (
        "import resource, sys\n"
        "from agentkeep.daemon import limits\n"
        "for hard in map(int, sys.argv[1:]):\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "    print(limits.fd_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    argv = [sys.executable, "-c", code, str(hard), "2000"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
    # Up to what the budgets can use, never past the hard limit.
    assert out == [str(want), str(want), str(hard), "2000", "2000", "2000"]


# -- the client's side of a busy daemon -------------------------------------------------


@pytest.fixture
def full_backlog(env: Env) -> Iterator[tuple[socket.socket, list[socket.socket]]]:
    """A listener that accepts nothing, its backlog full: (listener, the
    connections queued in it)."""
    env.socket_path.parent.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(env.socket_path))
    listener.listen(0)
    queued: list[socket.socket] = []
    for _ in range(20):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(str(env.socket_path))
        except BlockingIOError:
            sock.close()
            break
        queued.append(sock)
    else:
        pytest.fail("SETUP INVALID: the backlog never filled (no EAGAIN)")
    yield listener, queued
    for sock in queued:
        sock.close()
    listener.close()


def test_connect_retries_a_full_backlog_within_its_deadline(
    env: Env, full_backlog, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener, _ = full_backlog
    retried: list[OSError] = []
    accepted: list[socket.socket] = []

    def make_room(exc: OSError) -> None:
        retried.append(exc)
        if len(retried) == 2:  # the second refusal: one queued client goes
            accepted.append(listener.accept()[0])

    monkeypatch.setattr(client, "_retrying", make_room)
    sock = client.connect(env, timeout=10)
    sock.close()
    assert len(retried) >= 2, "SETUP INVALID: connect never met a full backlog"
    assert all(isinstance(e, BlockingIOError) for e in retried)
    for conn in accepted:
        conn.close()


def test_connect_is_busy_when_the_backlog_stays_full(
    env: Env, full_backlog, monkeypatch: pytest.MonkeyPatch
) -> None:
    retried: list[OSError] = []
    monkeypatch.setattr(client, "_retrying", retried.append)
    started = time.monotonic()
    with pytest.raises(client.Busy, match="accepted nothing for 0.3 s"):
        client.connect(env, timeout=0.3)
    assert time.monotonic() - started < 2
    assert retried, "SETUP INVALID: connect never met a full backlog"


def test_the_backlog_takes_a_burst(env: Env) -> None:
    """Connections queue while nothing accepts: the backlog is SOMAXCONN, not 64."""
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    burst = min(300, somaxconn)
    if burst <= 64:
        pytest.fail(f"SETUP INVALID: net.core.somaxconn is {somaxconn}")
    srv = Server(env.socket_path, Recorder())
    srv.bind()  # bound and listening, not accepting
    queued = []
    try:
        for _ in range(burst):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            queued.append(sock)
            sock.connect(str(env.socket_path))
    finally:
        for sock in queued:
            sock.close()
        srv.close()
