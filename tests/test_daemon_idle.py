"""An idle daemon sleeps: no thread of it wakes while nothing changes (its
only timers are the schedule's and the service watchdog's), and what it
tells the service manager still follows each change as it happens."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from build_claude import make_session
from test_daemon_serve import start_daemon, stop_daemons
from waiting import wait_until

pytestmark = pytest.mark.slow

# Imported for its effect: every daemon a test here starts is killed after it.
__all__ = ["stop_daemons"]

QUIET = 2.5  # seconds without a single wake-up of any thread


def wakeups(pid: int) -> dict[str, int]:
    """Context switches of each thread of `pid` so far: a thread that wakes
    from a wait (a timeout, a timer) adds at least one."""
    counts = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                lines = f.read().splitlines()
        except OSError:
            continue  # ended since listed
        counts[tid] = sum(int(line.split()[1]) for line in lines if "ctxt_switches" in line)
    return counts


def test_an_idle_daemon_wakes_no_thread(fake_home) -> None:
    make_session(fake_home, full=False)
    daemon = start_daemon(fake_home)
    pid = daemon.proc.pid
    # Start-up's own work (the first reconcile, the watches, the status
    # answered above) ends; then nothing may wake for QUIET seconds. A loop
    # that wakes every second, or a status line written every few, never
    # leaves such a window.
    wait_until(
        lambda: _still(pid, QUIET),
        f"{QUIET:g} s without a wake-up of the idle daemon",
        40,
        setup=False,
    )


def _still(pid: int, seconds: float) -> bool:
    """Whether no thread of `pid` switched during `seconds` (looked at in
    small steps, so a busy window is given up on early)."""
    before = wakeups(pid)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.1)
        if wakeups(pid) != before:
            return False
    return True


def test_the_status_line_follows_a_new_session_at_once(fake_home) -> None:
    path = Path(fake_home.environ["XDG_RUNTIME_DIR"]) / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(30)
        make_session(fake_home, full=False)
        start_daemon(fake_home, extra={"NOTIFY_SOCKET": str(path)})
        sent: list[str] = []

        def said(text: str) -> bool:
            return any(text in line for line in sent)

        def receive_until(text: str) -> bool:
            sent.extend(sock.recv(4096).decode().split("\n"))
            return said(text)

        wait_until(lambda: receive_until("READY=1"), "READY=1", 30, setup=False)
        assert said("STATUS=1 sessions"), sent
        make_session(fake_home, full=False)
        wait_until(lambda: receive_until("STATUS=2 sessions"), "the new count", 30, setup=False)
