"""The real daemon's socket budgets (issue #14): clients holding leases never
lock anyone out, a hold past the lease budget is refused and nothing held is
dropped, a daemon with every slot mid-request sends the CLI to work
in-process, and unfinished lines are bounded in total across connections.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import termios
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from hardening_util import wait_until

from agentkeep import client, leases
from agentkeep.daemon import limits
from agentkeep.protocol import BUSY
from agentkeep.prune.lock import PrunerLock
from build_claude import make_session, new_id
from test_daemon_serve import Daemon, ask, read_answer, start_daemon, stop_daemons

pytestmark = pytest.mark.slow

__all__ = ["stop_daemons"]

STATUS_WITHIN = 2.0
HOLDERS = limits.MAX_CONNECTIONS + 44


def status_in_time(d: Daemon) -> dict[str, Any]:
    started = time.monotonic()
    doc = client.call(d.env, "status", {}, timeout=STATUS_WITHIN)
    took = time.monotonic() - started
    assert took < STATUS_WITHIN, f"status took {took:.2f} s"
    assert doc["pid"] == d.proc.pid
    return doc


def rpc(sock: socket.socket, request_id: int, method: str, **params: str) -> dict[str, Any]:
    request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return ask(sock, json.dumps(request).encode())


def hold(sock: socket.socket, session_id: str) -> dict[str, Any]:
    return rpc(sock, 1, "hold", agent="claude", id=session_id)


def release(sock: socket.socket, token: str) -> dict[str, Any]:
    return rpc(sock, 2, "release", lease=token)


def lease_file(d: Daemon, session_id: str) -> Path:
    return leases.lease_path(d.fh.state, "claude", session_id)


def notice(sock: socket.socket) -> dict[str, Any] | None:
    """What the daemon said before closing `sock`; None while it is open."""
    sock.settimeout(0)
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return None
    except ConnectionResetError:
        return {"reset": True}
    finally:
        sock.settimeout(15)
    return json.loads(data) if data.endswith(b"\n") else {"closed": data}


def notices(socks: list[socket.socket], seen: dict[int, dict[str, Any]]) -> dict[int, Any]:
    """`seen`, with the notice of every socket in `socks` closed since (by index)."""
    for i, sock in enumerate(socks):
        if i not in seen and (n := notice(sock)) is not None:
            seen[i] = n
    return seen


def cli_debug(d: Daemon, *args: str) -> Any:
    """The real CLI, logging which way it answered (Runner.ask's debug lines)."""
    return d.fh.cli(*args, env={**d.environ, "AGENTKEEP_LOG_LEVEL": "debug"})


def answered_by(stderr: str) -> set[str]:
    events = set()
    for line in stderr.splitlines():
        try:
            event = json.loads(line).get("event")
        except (ValueError, AttributeError):
            continue
        if event in ("answered by the daemon", "working in-process"):
            events.add(event)
    return events


def test_lease_holders_never_lock_out_status_or_the_cli(fake_home) -> None:
    old = make_session(fake_home, age_days=40)
    d = start_daemon(fake_home)
    ids = [old.id] + [new_id() for _ in range(HOLDERS - 1)]
    holders: list[tuple[socket.socket, str]] = []
    plain: list[socket.socket] = []
    try:
        # The 257th hold and those after it are answered as the first were:
        # a connection holding a lease takes no slot.
        for session_id in ids:
            sock = d.connect()
            answer = hold(sock, session_id)
            assert "result" in answer, f"hold {len(holders) + 1} of {HOLDERS}: {answer}"
            holders.append((sock, answer["result"]["lease"]))
        assert all(leases.is_held(lease_file(d, i)) for i in ids), "a lease was dropped"
        # On top of them, more idle clients than there are slots: they close
        # one another to make room, and never a holder.
        plain = [d.connect() for _ in range(limits.MAX_CONNECTIONS + 20)]
        status_in_time(d)
        made_room: dict[int, Any] = {}
        wait_until(
            lambda: len(notices(plain, made_room)) >= 20, "idle clients to be closed to make room"
        )
        assert all(n["error"]["code"] == BUSY for n in made_room.values()), made_room

        ls = cli_debug(d, "ls", "--json")
        assert ls.returncode == 0, ls.stderr
        assert answered_by(ls.stderr) == {"answered by the daemon"}, ls.stderr
        assert [(s["id"], s["state"]) for s in json.loads(ls.stdout)] == [(old.id, "held")]
        dry = cli_debug(d, "prune", "--dry-run", "--older-than", "30d", "--json")
        assert dry.returncode == 0, dry.stderr
        assert answered_by(dry.stderr) == {"answered by the daemon"}, dry.stderr
        report = json.loads(dry.stdout)
        assert report["removed"] == []
        assert [(k["id"], k["reason"]) for k in report["kept"]] == [(old.id, "held")]
        status_in_time(d)

        # Every lease is still there, on the connection that took it.
        for sock, token in holders:
            assert notice(sock) is None
            assert release(sock, token) == {"jsonrpc": "2.0", "id": 2, "result": {"released": True}}
        assert not any(leases.is_held(lease_file(d, i)) for i in ids)
    finally:
        for sock in [s for s, _ in holders] + plain:
            sock.close()
    assert d.proc.poll() is None, d.stderr()[-3000:]


# The daemon started with this descriptor limit (soft and hard): its lease
# budget is lease_budget(NOFILE), far fewer than the connection slots.
NOFILE = 1300
LOW_NOFILE = f"import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE}))"


def test_a_hold_past_the_lease_budget_is_refused_and_nothing_held_is_dropped(fake_home) -> None:
    budget = limits.lease_budget(NOFILE)
    if not limits.MIN_LEASES < budget < limits.MAX_CONNECTIONS:
        pytest.fail(f"SETUP INVALID: a budget of {budget} leases at {NOFILE} descriptors")
    d = start_daemon(fake_home, seams=LOW_NOFILE)
    ids = [new_id() for _ in range(budget)]
    holders: list[tuple[socket.socket, str]] = []
    late = d.connect()
    try:
        for session_id in ids:
            sock = d.connect()
            answer = hold(sock, session_id)
            assert "result" in answer, f"hold {len(holders) + 1} of {budget}: {answer}"
            holders.append((sock, answer["result"]["lease"]))
        # The next hold, on a connection of its own or on one holding a
        # lease already, is refused and says why; the connection stays.
        extra = new_id()
        for sock in (late, holders[0][0]):
            refused = hold(sock, extra)
            assert refused["error"]["code"] == -32000, refused
            assert f"too many leases held ({budget}" in refused["error"]["message"]
            assert refused["error"]["data"]["exit"] == 1
        assert not leases.is_held(lease_file(d, extra))
        assert all(leases.is_held(lease_file(d, i)) for i in ids)
        status_in_time(d)
        # One released makes room for one more.
        assert release(*holders[-1])["result"] == {"released": True}
        assert "result" in hold(late, extra)
        assert leases.is_held(lease_file(d, extra))
        for sock, token in holders[:-1]:
            assert release(sock, token)["result"] == {"released": True}
    finally:
        for sock in [s for s, _ in holders] + [late]:
            sock.close()
    assert d.proc.poll() is None, d.stderr()[-3000:]


def blocked_on(path: Path, pid: int) -> int:
    """How many flock(2) waits `pid` and its children (the daemon's prunes
    run in processes of their own) have on `path` (/proc/locks, "->" lines)."""
    ino = os.stat(path).st_ino
    pids = {str(pid)} | {str(c.pid) for c in psutil.Process(pid).children(recursive=True)}
    count = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and "FLOCK" in fields:
            at = fields.index("->")
            if fields[at + 4] in pids and fields[at + 5].endswith(f":{ino}"):
                count += 1
    return count


def unread(sock: socket.socket) -> int:
    """Bytes sent on `sock` that its peer has not read yet (SIOCOUTQ)."""
    raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
    return struct.unpack("i", raw)[0]


SLOTS = 2
FEW_SLOTS = f"from agentkeep.daemon import limits\nlimits.MAX_CONNECTIONS = {SLOTS}"


def test_when_every_slot_is_mid_request_the_cli_works_in_process(fake_home) -> None:
    old = make_session(fake_home, age_days=40)
    d = start_daemon(fake_home, seams=FEW_SLOTS)
    # Each slot's client asks for a prune, which waits for the prune lock
    # this test holds: every slot is mid-request.
    lock = PrunerLock(fake_home.state)
    assert lock.acquire(wait=False)
    request = b'{"jsonrpc": "2.0", "id": 5, "method": "prune", '
    request += b'"params": {"dry_run": true, "older_than": "30d"}}\n'
    busy: list[socket.socket] = []
    try:
        # One at a time: a client that has not yet sent its request is idle,
        # and may be closed to make room for the next.
        while len(busy) < SLOTS:
            busy.append(d.connect())
            busy[-1].sendall(request)
            wait_until(
                lambda: blocked_on(lock.path, d.proc.pid) == len(busy),
                f"prune {len(busy)} to wait for the prune lock",
                10,
            )
        ls = cli_debug(d, "ls", "--json")
        assert ls.returncode == 0, ls.stderr
        assert answered_by(ls.stderr) == {"working in-process"}, ls.stderr
        assert "too many connections" in ls.stderr
        assert [s["id"] for s in json.loads(ls.stdout)] == [old.id]
        # status says the daemon did not answer: pid null, exit 1.
        status = fake_home.cli("status", "--json")
        assert status.returncode == 1, status.stderr
        doc = json.loads(status.stdout)
        assert doc["pid"] is None and doc["sessions"] == 1
    finally:
        lock.release()
    # The two in the slots were never closed to make room: their prunes answer.
    for sock in busy:
        answer = read_answer(sock)
        assert answer["id"] == 5 and answer["result"]["dry_run"] is True, answer
        sock.close()
    status_in_time(d)


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


CLIENTS = 256
# Past the daemon's resident size before, with 256 clients each holding an
# unfinished line of ~1 MiB (without the total budget: ~290 MiB).
RSS_BOUND = 48 << 20


def test_unfinished_lines_are_bounded_in_total(fake_home) -> None:
    d = start_daemon(fake_home)
    proc = psutil.Process(d.proc.pid)
    for _ in range(5):
        status_in_time(d)
    before, peak_before = proc.memory_info().rss, peak_rss(d.proc.pid)
    line = b'{"jsonrpc": "2.0", "id": 1, "method": "status", "params": {"x": "'
    line += b"a" * ((1 << 20) - 64 - len(line))
    stalled: list[socket.socket] = []
    try:
        for _ in range(CLIENTS):
            sock = d.connect()
            stalled.append(sock)
            try:
                sock.sendall(line)
            except OSError:
                pass  # closed already, for one that came later
        # Everything sent was read, or its connection closed.
        seen: dict[int, Any] = {}
        wait_until(
            lambda: all(
                i in notices(stalled, seen) or unread(s) == 0 for i, s in enumerate(stalled)
            ),
            "the daemon to read every unfinished line",
            20,
        )
        grown, peak_grown = proc.memory_info().rss - before, peak_rss(d.proc.pid) - peak_before
        assert grown < RSS_BOUND, f"RSS grew {grown >> 20} MiB"
        assert peak_grown < RSS_BOUND, f"peak RSS grew {peak_grown >> 20} MiB"
        # All but the few that fit in the budget were closed, and told why.
        fit = limits.MAX_UNFINISHED // len(line)
        assert len(notices(stalled, seen)) >= CLIENTS - fit, f"{len(seen)} closed"
        told = [n for n in seen.values() if "error" in n]
        assert told and all(n["error"]["code"] == BUSY for n in told), list(seen.values())[:3]
        assert all("unfinished lines" in n["error"]["message"] for n in told)

        # Everyone else is still served: status, and a whole line of ~1 MiB.
        status_in_time(d)
        with d.connect() as sock:
            padded = b'{"jsonrpc": "2.0", "id": 9, "method": "status"' + b" " * 1_000_000 + b"}"
            answer = ask(sock, padded)
            assert answer["id"] == 9 and answer["result"]["pid"] == d.proc.pid, answer
    finally:
        for sock in stalled:
            sock.close()
    status_in_time(d)
