"""The real daemon (`python -m agentkeep serve`) in a fake home, over its real
socket: status, the socket's life, bad input, slow clients, leases, peer
checks, signals, sd_notify and the watch-limit fallback.

`start_daemon` is the harness test_daemon_sessions.py uses too. Seams are set
by starting the daemon through `python -c` with a line of set-up before the
CLI's own main(), so the daemon under test is still the real one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentkeep import client, leases
from agentkeep.errors import Failure
from agentkeep.paths import Env
from waiting import wait_until

pytestmark = pytest.mark.slow

STATUS_KEYS = {
    "pid",
    "version",
    "uptime_s",
    "sessions",
    "watch",
    "config",
    "last_prune",
    "next_prune",
    "paused",
    "compaction_waiting",
}


@dataclass
class Daemon:
    fh: Any
    proc: subprocess.Popen[bytes]
    log: Path
    environ: dict[str, str]

    @property
    def env(self) -> Env:
        return Env.from_environ(self.environ)

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        return client.call(self.env, method, params or {}, timeout=timeout)

    def status(self) -> dict[str, Any]:
        return self.call("status")

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def wait(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        """wait_until (an expectation), with the daemon's log in the failure."""
        try:
            return wait_until(condition, what, timeout, setup=False)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\ndaemon stderr:\n{self.stderr()}") from None

    def connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(15)
        sock.connect(str(self.env.socket_path))
        return sock


def start_daemon(
    fh: Any,
    *,
    seams: str = "",
    everywhere: str = "",
    extra: dict[str, str] | None = None,
    ready: bool = True,
    name: str = "daemon",
    prefix: Sequence[str] = (),
) -> Daemon:
    """Start `agentkeep serve`; with `ready`, wait until it answers status.
    `seams` run in the daemon's process before it starts; `everywhere` run
    in it and in every Python process it starts (its prunes' processes, its
    scans' workers), as the sitecustomize module Python imports at start.
    `prefix` is put before its command (setpriv ...)."""
    environ = {**fh.environ, **(extra or {})}
    if everywhere:
        site = fh.root / f"site-{uuid.uuid4().hex[:6]}"
        site.mkdir()
        (site / "sitecustomize.py").write_text(everywhere + "\n")
        environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(site), environ.get("PYTHONPATH")])
        )
    if seams:
        code = f"{seams}\nimport sys\nsys.argv = ['agentkeep', 'serve']\n"
        code += "from agentkeep.cli import main\nmain()\n"
        argv = [sys.executable, "-c", code]
    else:
        argv = [sys.executable, "-m", "agentkeep", "serve"]
    log = fh.root / f"{name}-{uuid.uuid4().hex[:6]}.stderr"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*prefix, *argv], env=environ, stdout=subprocess.DEVNULL, stderr=err
        )
    daemon = Daemon(fh, proc, log, environ)
    _RUNNING.append(daemon)
    if ready:
        wait_ready(daemon)
    return daemon


def wait_ready(daemon: Daemon, timeout: float = 30) -> dict[str, Any]:
    def answered() -> dict[str, Any] | None:
        if daemon.proc.poll() is not None:
            raise AssertionError(
                f"daemon exited {daemon.proc.returncode} while starting:\n{daemon.stderr()}"
            )
        try:
            return daemon.call("status", timeout=timeout)
        except client.NoDaemon:
            return None

    return wait_until(answered, "the daemon to answer status", timeout, setup=False)


_RUNNING: list[Daemon] = []


@pytest.fixture(autouse=True)
def stop_daemons() -> Iterator[None]:
    """Kill every daemon a test started (import it where start_daemon is used)."""
    yield
    while _RUNNING:
        daemon = _RUNNING.pop()
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait(10)


def read_answer(sock: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return json.loads(data)


def ask(sock: socket.socket, line: bytes) -> dict[str, Any]:
    sock.sendall(line + b"\n")
    return read_answer(sock)


# -- status and the socket -------------------------------------------------------
def test_status_over_the_socket(fake_home) -> None:
    daemon = start_daemon(fake_home)
    doc = daemon.status()
    assert set(doc) == STATUS_KEYS
    assert doc["pid"] == daemon.proc.pid
    assert isinstance(doc["uptime_s"], int) and doc["uptime_s"] >= 0
    assert doc["sessions"] == 0
    assert doc["watch"]["mode"] == "inotify"
    assert {r["agent"] for r in doc["watch"]["roots"]} >= {"claude", "codex"}
    assert doc["config"] == {"ok": True, "error": None, "retention": None}
    # No retention: nothing is pruned, so no prune is announced.
    assert doc["next_prune"] is None and doc["paused"] is None
    cli = fake_home.cli("status", "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["pid"] == daemon.proc.pid


def test_socket_folder_0700_and_socket_0600(fake_home) -> None:
    daemon = start_daemon(fake_home)
    sock_path = daemon.env.socket_path
    assert sock_path == fake_home.socket
    assert stat.S_IMODE(os.stat(sock_path.parent).st_mode) == 0o700
    st = os.lstat(sock_path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600


def test_an_unsafe_socket_folder_is_refused_not_chmodded(fake_home) -> None:
    folder = fake_home.socket.parent
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o777)
    daemon = start_daemon(fake_home, ready=False)
    assert daemon.proc.wait(20) == 1
    assert "written by other users" in daemon.stderr()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o777
    assert not fake_home.socket.exists()


def test_a_stale_socket_is_replaced(fake_home) -> None:
    fake_home.socket.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(fake_home.socket))
    stale.close()  # what a crashed daemon leaves: a socket nobody listens on
    os.link(fake_home.socket, fake_home.socket.parent / "stale-copy")  # keep its inode taken
    stale_inode = os.lstat(fake_home.socket).st_ino
    daemon = start_daemon(fake_home)
    assert os.lstat(fake_home.socket).st_ino != stale_inode
    assert daemon.status()["pid"] == daemon.proc.pid


def test_a_second_daemon_exits_1_and_leaves_the_first_alone(fake_home) -> None:
    first = start_daemon(fake_home)
    inode = os.lstat(fake_home.socket).st_ino
    second = start_daemon(fake_home, ready=False, name="second")
    assert second.proc.wait(20) == 1
    message = second.stderr()
    assert "already running" in message and str(first.proc.pid) in message, message
    assert os.lstat(fake_home.socket).st_ino == inode
    assert first.status()["pid"] == first.proc.pid


def test_a_second_daemon_on_the_same_socket_with_another_state_dir_exits_1(fake_home) -> None:
    first = start_daemon(fake_home)
    other_state = fake_home.root / "other-state"
    second = start_daemon(
        fake_home, ready=False, name="second", extra={"XDG_STATE_HOME": str(other_state)}
    )
    assert second.proc.wait(20) == 1
    assert "already serving" in second.stderr()
    assert first.status()["pid"] == first.proc.pid


# -- bad input and bad clients -------------------------------------------------------
def test_bad_lines_get_errors_while_others_are_served(fake_home) -> None:
    daemon = start_daemon(fake_home)
    cases = [
        (b"garbage that is not json", -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "frobnicate"}', -32601),
        (b'{"jsonrpc": "2.0", "id": 2, "method": "ls", "params": {"agent": 5}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 3, "method": "status", "params": {"bogus": 1}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 4, "method": "hold", "params": {"agent": "claude"}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 5, "method": "ls", "params": "agent"}', -32602),
        (b'{"jsonrpc": "2.0", "id": 6, "method": "release", "params": {"lease": "nope"}}', -32602),
        (b'"just a string"', -32600),
    ]
    with daemon.connect() as sock:
        for line, code in cases:
            answer = ask(sock, line)
            assert answer["jsonrpc"] == "2.0"
            assert answer["error"]["code"] == code, (line, answer)
            assert isinstance(answer["error"]["data"]["exit"], int)
            assert daemon.status()["pid"] == daemon.proc.pid  # another client, meanwhile
        big = b'{"jsonrpc": "2.0", "id": 9, "method": "ls", "params": {"x": "' + b"a" * (2 << 20)
        answer = ask(sock, big + b'"}}')
        assert answer["error"]["code"] == -32600 and "1 MiB" in answer["error"]["message"]
        # The same connection still works after all of that.
        answer = ask(sock, b'{"jsonrpc": "2.0", "id": 10, "method": "status"}')
        assert answer["id"] == 10 and answer["result"]["pid"] == daemon.proc.pid


def test_a_client_that_never_reads_does_not_block_others(fake_home) -> None:
    daemon = start_daemon(fake_home)
    deaf = daemon.connect()
    deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = b'{"jsonrpc": "2.0", "id": 1, "method": "status"}\n'
    sent = [0]

    def flood() -> None:
        try:
            deaf.settimeout(30)
            for _ in range(50000):
                deaf.sendall(request)
                sent[0] += 1
        except OSError:
            pass

    threading.Thread(target=flood, daemon=True).start()

    # The flood stalls once the daemon's answers fill the deaf client's
    # buffers and the daemon's thread for it blocks: wait for that.
    def stalled() -> bool:
        before = sent[0]
        time.sleep(0.3)
        return before > 0 and sent[0] == before

    wait_until(stalled, "the deaf client's flood to stall", 15, setup=False)
    assert sent[0] < 50000, "SETUP INVALID: the daemon never blocked on the deaf client"
    started = time.monotonic()
    assert daemon.status()["pid"] == daemon.proc.pid
    assert time.monotonic() - started < 2
    deaf.close()
    assert daemon.status()["pid"] == daemon.proc.pid


def test_a_client_stalled_mid_line_does_not_block_others(fake_home) -> None:
    daemon = start_daemon(fake_home)
    with daemon.connect() as stalled:
        stalled.sendall(b'{"jsonrpc": "2.0", "id": 1, "meth')
        started = time.monotonic()
        assert daemon.status()["pid"] == daemon.proc.pid
        assert time.monotonic() - started < 2


# -- leases ----------------------------------------------------------------------------
def test_hold_and_release_over_a_connection(fake_home) -> None:
    daemon = start_daemon(fake_home)
    sid = str(uuid.uuid4())
    lease_file = leases.lease_path(fake_home.state, "claude", sid)
    with daemon.connect() as sock:
        params = {"agent": "claude", "id": sid.upper()}
        hold = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "hold", "params": params}).encode()
        token = ask(sock, hold)["result"]["lease"]
        assert isinstance(token, str) and token
        assert leases.is_held(lease_file)  # the canonical (lowercase) id's lease
        release = json.dumps(
            {"jsonrpc": "2.0", "id": 2, "method": "release", "params": {"lease": token}}
        )
        assert ask(sock, release.encode())["result"] == {"released": True}
        assert not leases.is_held(lease_file)
        again = ask(sock, release.encode())
        assert again["error"]["code"] == -32602
        # A lease taken on one connection cannot be released from another.
        token = ask(sock, hold)["result"]["lease"]
        with pytest.raises(Failure):
            daemon.call("release", {"lease": token})
        assert leases.is_held(lease_file)
    # Closing the connection ends its lease.
    wait_until(
        lambda: not leases.is_held(lease_file),
        "the lease to end with its connection",
        5,
        setup=False,
    )


def test_hold_refuses_bad_agents_and_ids(fake_home) -> None:
    daemon = start_daemon(fake_home)
    with pytest.raises(Failure) as err:
        daemon.call("hold", {"agent": "nosuch", "id": str(uuid.uuid4())})
    assert err.value.code == -32602 and err.value.exit == 2
    with pytest.raises(Failure) as err:
        daemon.call("hold", {"agent": "claude", "id": "../../etc/passwd"})
    assert err.value.exit == 5
    assert not (fake_home.state / "leases" / "claude").exists() or not any(
        (fake_home.state / "leases" / "claude").iterdir()
    )


# -- who may talk ------------------------------------------------------------------------
def test_another_uid_is_refused(fake_home) -> None:
    seam = (
        "import os\nfrom agentkeep.daemon import server\n"
        "server._peer_uid_override = lambda sock: os.getuid() + 1"
    )
    daemon = start_daemon(fake_home, seams=seam, ready=False)
    sid = str(uuid.uuid4())

    def refused() -> Failure | None:
        assert daemon.proc.poll() is None, daemon.stderr()
        try:
            daemon.call("hold", {"agent": "claude", "id": sid})
        except client.NoDaemon:
            return None
        except Failure as exc:
            return exc
        raise AssertionError("a connection from another uid was served")

    error = wait_until(refused, "the daemon to answer", 30, setup=False)
    assert "refused" in error.message and f"uid {os.getuid() + 1}" in error.message
    assert not leases.is_held(leases.lease_path(fake_home.state, "claude", sid))
    assert "another user refused" in daemon.stderr()


def test_a_different_view_is_answered_with_32001(fake_home) -> None:
    daemon = start_daemon(fake_home)
    theirs = {"config": "/elsewhere/config.toml", "state": "/elsewhere", "roots": {}}
    with pytest.raises(Failure) as err:
        client.call(daemon.env, "status", {"env": theirs})
    assert err.value.code == -32001
    ours = err.value.data["daemon"]
    assert ours["state"] == str(fake_home.state)
    doc = client.call(daemon.env, "status", {"env": ours})
    assert doc["pid"] == daemon.proc.pid


# -- signals -------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signals_stop_within_5s_and_remove_the_socket(fake_home, sig) -> None:
    daemon = start_daemon(fake_home)
    assert fake_home.socket.exists()
    started = time.monotonic()
    assert daemon.stop(sig) == 0, daemon.stderr()
    assert time.monotonic() - started < 5
    assert not fake_home.socket.exists()
    with pytest.raises(client.NoDaemon):
        daemon.call("status")


def test_sighup_with_a_bad_config_keeps_serving_and_shows_the_error(fake_home) -> None:
    fake_home.write_config('retention = "30d"\n')
    daemon = start_daemon(fake_home)
    assert daemon.status()["config"] == {"ok": True, "error": None, "retention": "30d"}
    assert daemon.status()["next_prune"] is not None
    fake_home.write_config('retention = "30x"\n')
    daemon.proc.send_signal(signal.SIGHUP)
    doc = wait_until(
        lambda: (d := daemon.status())["config"]["ok"] is False and d, "the reload", 10, setup=False
    )
    assert "retention" in doc["config"]["error"] and "30x" in doc["config"]["error"]
    assert doc["next_prune"] is None
    fake_home.write_config('retention = "45d"\n')
    assert daemon.call("reload")["config"] == {"ok": True, "error": None, "retention": "45d"}
    assert daemon.proc.poll() is None


# -- systemd ---------------------------------------------------------------------------------
def test_notify_socket_gets_ready_status_and_watchdog(fake_home) -> None:
    address = Path(fake_home.environ["XDG_RUNTIME_DIR"]) / "notify.sock"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(address))
    receiver.settimeout(20)
    with receiver:
        daemon = start_daemon(
            fake_home,
            extra={"NOTIFY_SOCKET": str(address), "WATCHDOG_USEC": "400000"},
            ready=False,
        )
        fields: dict[str, list[str]] = {}
        while not {"READY", "STATUS", "WATCHDOG"} <= set(fields):
            for line in receiver.recv(4096).decode().splitlines():
                key, _, value = line.partition("=")
                fields.setdefault(key, []).append(value)
        assert fields["READY"] == ["1"]
        assert any("sessions" in s and "watch inotify" in s for s in fields["STATUS"])
        # READY=1 means serving: the socket answers.
        assert daemon.status()["pid"] == daemon.proc.pid
        daemon.proc.send_signal(signal.SIGTERM)
        while "STOPPING" not in fields:
            for line in receiver.recv(4096).decode().splitlines():
                key, _, value = line.partition("=")
                fields.setdefault(key, []).append(value)
        assert daemon.proc.wait(10) == 0


# -- the watch budget ------------------------------------------------------------------------
def test_over_the_inotify_budget_roots_fall_back_to_polling(fake_home) -> None:
    daemon = start_daemon(fake_home, extra={"AGENTKEEP_INOTIFY_MAX": "0"})
    watch = daemon.status()["watch"]
    assert watch["mode"] == "polling"
    assert watch["roots"] and all(r["mode"] == "polling" for r in watch["roots"])
    assert all("inotify watches" in r["reason"] for r in watch["roots"])


def test_sigterm_while_indexing_at_start_stops_cleanly(fake_home) -> None:
    seam = (
        "import time\nfrom agentkeep.core import indexing\n_reconcile = indexing.reconcile\n"
        "indexing.reconcile = lambda ctx: (time.sleep(3), _reconcile(ctx))[1]"
    )
    daemon = start_daemon(fake_home, seams=seam, ready=False)
    wait_until(fake_home.socket.exists, "the socket to be bound", 20, setup=False)
    assert daemon.proc.poll() is None, daemon.stderr()
    started = time.monotonic()
    assert daemon.stop() == 0, daemon.stderr()
    assert time.monotonic() - started < 5
    assert not fake_home.socket.exists()
    assert "serving" not in [json.loads(line).get("event") for line in daemon.stderr().splitlines()]
