"""sd_notify over a real AF_UNIX datagram socket, by path and in the abstract namespace."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from agentkeep.daemon.notify import Notifier


def _receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(5)
    return sock


def test_ready_and_status_reach_a_path_socket(fake_home, tmp_path: Path) -> None:
    path = Path(fake_home.environ["XDG_RUNTIME_DIR"]) / "notify.sock"
    with _receiver(str(path)) as sock:
        notifier = Notifier({"NOTIFY_SOCKET": str(path)})
        notifier.ready("3 sessions")
        assert sock.recv(4096).decode().split("\n") == ["READY=1", "STATUS=3 sessions"]
        notifier.status("3 sessions")  # unchanged: not sent again
        notifier.status("4 sessions")
        assert sock.recv(4096) == b"STATUS=4 sessions"


def test_abstract_namespace_name(fake_home) -> None:
    name = f"agentkeep-test-{uuid.uuid4().hex}"
    with _receiver("\0" + name) as sock:
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "2000000"})
        assert notifier.watchdog_interval() == pytest.approx(1.0)
        notifier.ping()
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_watchdog_only_when_asked_and_for_this_process(fake_home) -> None:
    path = str(Path(fake_home.environ["XDG_RUNTIME_DIR"]) / "n.sock")
    assert Notifier({"NOTIFY_SOCKET": path}).watchdog_interval() is None
    other = {
        "NOTIFY_SOCKET": path,
        "WATCHDOG_USEC": "1000000",
        "WATCHDOG_PID": str(os.getpid() + 1),
    }
    assert Notifier(other).watchdog_interval() is None
    mine = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier(mine).watchdog_interval() == pytest.approx(0.5)


@pytest.mark.parametrize("usec", ["\u00b2", "2e6", "0", "-5", ""])
def test_a_watchdog_usec_that_is_no_positive_number_asks_for_none(fake_home, usec: str) -> None:
    """What the daemon starts with: a value int() refuses (a superscript
    digit) or one not above 0 means no watchdog, never a failed start."""
    path = str(Path(fake_home.environ["XDG_RUNTIME_DIR"]) / "n.sock")
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": usec})
    assert notifier.watchdog_interval() is None


def test_without_notify_socket_nothing_is_sent_and_nothing_fails(fake_home) -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert notifier.send("READY=1") is False
    notifier.ready("x")
    notifier.ping()


def test_a_vanished_socket_is_logged_not_raised(fake_home) -> None:
    path = Path(fake_home.environ["XDG_RUNTIME_DIR"]) / "gone.sock"
    assert Notifier({"NOTIFY_SOCKET": str(path)}).send("READY=1") is False
