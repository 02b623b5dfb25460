"""What the real daemon holds does not grow with what it watches or serves:
a handful of threads however many directories are watched (and an append
in any of them still reaches the index), and no SQLite connection left
behind per answered request."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentkeep import watchplan
from build_claude import make_session
from test_daemon_serve import start_daemon, stop_daemons

# Imported for its effect: every daemon a test here starts is killed after it.
__all__ = ["stop_daemons"]

MANY = 220
# main, the watch reader and worker, the server, the scheduler, a request.
FEW_THREADS = 12


def threads_of(pid: int) -> list[str]:
    return os.listdir(f"/proc/{pid}/task")


def index_fds(pid: int, index: Path) -> int:
    """Descriptors the process has open on the index database itself."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(index):
                count += 1
        except OSError:
            continue  # closed since listed
    return count


def test_many_watched_dirs_take_few_threads_and_still_reach_the_index(fake_home) -> None:
    if watchplan.inotify_budget() is None:
        pytest.skip("no inotify here")
    made = [make_session(fake_home, cwd=f"/home/user/p{n}", full=False) for n in range(MANY)]
    daemon = start_daemon(fake_home)
    roots = daemon.status()["watch"]["roots"]
    assert sum(r["watches"] for r in roots) > MANY, "SETUP INVALID: too few watches"
    # watchdog's observer ran a thread per watched directory.
    assert len(threads_of(daemon.proc.pid)) <= FEW_THREADS, threads_of(daemon.proc.pid)
    s = made[MANY // 3]
    before = daemon.call("show", {"agent": "claude", "id": s.id})["last_activity"]
    with s.transcript.open("a") as f:
        f.write(json.dumps({"type": "user", "sessionId": s.id, "cwd": "/home/user/p"}) + "\n")
    daemon.wait(
        lambda: daemon.call("show", {"agent": "claude", "id": s.id})["last_activity"] > before,
        5,
        "the append to reach the index",
    )


def test_answered_requests_leave_no_index_connections(fake_home) -> None:
    s = make_session(fake_home, full=False)
    daemon = start_daemon(fake_home)
    index = daemon.env.state_dir / "index.sqlite"
    assert index_fds(daemon.proc.pid, index) >= 1, "SETUP INVALID: not the index's path"
    held = index_fds(daemon.proc.pid, index)
    # Each request comes on a connection of its own, so a thread of its own.
    for _ in range(60):
        daemon.call("show", {"agent": "claude", "id": s.id})
        daemon.call("status")
    # The long-lived threads' connections, and nothing per request.
    assert index_fds(daemon.proc.pid, index) <= held + 2
