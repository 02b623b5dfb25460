"""What the real daemon holds does not grow with what it watches or serves:
a handful of threads however many directories are watched (and an append
in any of them still reaches the index), and no SQLite connection left
behind per answered request."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import uuid
import weakref
from pathlib import Path

import pytest

from agentkeep import watchplan
from agentkeep.adapters.claude.listings import Listings
from agentkeep.core.context import Context
from agentkeep.core.indexing import scan
from agentkeep.daemon import main
from agentkeep.paths import Env
from build_agents import gemini_root, make_gemini_session, make_zero_session, zero_root
from build_claude import make_session
from test_daemon_serve import Daemon, start_daemon, stop_daemons
from waiting import wait_until

pytestmark = pytest.mark.slow

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


# The daemon's Python heap (what its objects take, tracemalloc, after a
# full collection), appended to a file on SIGUSR2. Without single blocks of
# 256 KiB or more: the tables of CPython's own caches (the interned
# strings, which pathlib adds each part of each path it parses to) double
# as distinct names pass and never shrink, a step where the names alive at
# once cross a power of two, wherever the last one was interned. State kept
# per session is its objects, each far smaller, and still counted.
_HEAP_SEAM = """
import gc, os, signal, threading, tracemalloc
tracemalloc.start()
def _heap(*_):
    def write():
        gc.collect()
        traces = tracemalloc.take_snapshot().traces
        size = sum(t.size for t in traces if t.size < 256 * 1024)
        with open(os.environ["HEAP_REPORT"], "a") as f:
            f.write(f"{size}\\n")
    threading.Thread(target=write).start()
signal.signal(signal.SIGUSR2, _heap)
"""
SESSIONS = 500
# A dict, a listing entry or an object kept per session costs some 300
# bytes or more; per-session state belongs in the index, on disk. What the
# heap holds besides moves by some 40 KB (the machine's processes no more:
# see the test after).
PER_SESSION = 200


def _make_sessions(fake_home, start: int, count: int) -> list:
    """Sessions of three agents; the Claude ones made are returned."""
    gemini, zero = gemini_root(fake_home.home), zero_root(fake_home.data)
    claude = []
    for n in range(start, start + count):
        if n % 5 == 0:
            make_gemini_session(gemini, str(uuid.uuid4()), project=f"p{n % 7}", days=40)
        elif n % 5 == 1:
            make_zero_session(zero, str(uuid.uuid4()), days=40)
        else:
            claude.append(make_session(fake_home, cwd=f"/home/user/p{n % 13}", full=False))
    return claude


def _written_to(daemon: Daemon, s) -> None:
    """Append to a transcript and wait for the watcher's refresh to index it."""
    before = daemon.call("show", {"agent": "claude", "id": s.id})["last_activity"]
    with s.transcript.open("a") as f:
        f.write(json.dumps({"type": "user", "sessionId": s.id, "cwd": "/home/user/p"}) + "\n")
    daemon.wait(
        lambda: daemon.call("show", {"agent": "claude", "id": s.id})["last_activity"] != before,
        10,
        "the append to reach the index",
    )


def _heap_after_answers(daemon: Daemon, report: Path, sessions: int, written) -> int:
    daemon.call("scan", timeout=120)
    assert daemon.status()["sessions"] == sessions, "SETUP INVALID: not every session indexed"
    assert len(daemon.call("ls", timeout=120)) == sessions
    daemon.call("du", {"by": "workspace"}, timeout=120)
    daemon.call("prune", {"dry_run": True, "older_than": "30d"}, timeout=120)
    # An event's refresh lists a few sessions again (kept listings of the
    # shared directories would hold every session's names).
    _written_to(daemon, written)
    written = len(report.read_text().splitlines()) if report.exists() else 0
    os.kill(daemon.proc.pid, signal.SIGUSR2)
    wait_until(
        lambda: report.exists() and len(report.read_text().splitlines()) > written,
        "the heap report",
        30,
        setup=False,
    )
    return int(report.read_text().splitlines()[-1])


def test_python_heap_holds_no_per_session_state(fake_home) -> None:
    """What the daemon's objects take after a scan, an ls, a du, a prune's
    plan and an event does not grow with the sessions indexed: with twice
    the sessions, the same heap within PER_SESSION bytes a session."""
    report = fake_home.root / "heap.txt"
    written = _make_sessions(fake_home, 0, SESSIONS)[0]
    daemon = start_daemon(fake_home, seams=_HEAP_SEAM, extra={"HEAP_REPORT": str(report)})
    # Every cache and code path warmed once.
    _heap_after_answers(daemon, report, SESSIONS, written)
    at_n = _heap_after_answers(daemon, report, SESSIONS, written)
    _make_sessions(fake_home, SESSIONS, SESSIONS)
    at_2n = _heap_after_answers(daemon, report, 2 * SESSIONS, written)
    grew = at_2n - at_n
    print(f"heap {at_n} -> {at_2n}: {grew} bytes for {SESSIONS} sessions")
    assert grew < SESSIONS * PER_SESSION, f"the heap grew {grew} bytes for {SESSIONS} sessions"


# Processes started between two looks at the heap: a process kept with what
# was read of it (its command line, ids, times) takes some 1.8 KB.
OTHERS = 300


def test_python_heap_holds_nothing_per_process_of_the_machine(fake_home) -> None:
    """The same answers, with OTHERS more processes running on the machine
    (each read by the answers' process table), leave the same heap: what
    the table read goes with it."""
    report = fake_home.root / "heap.txt"
    written = _make_sessions(fake_home, 0, 50)[0]
    daemon = start_daemon(fake_home, seams=_HEAP_SEAM, extra={"HEAP_REPORT": str(report)})
    _heap_after_answers(daemon, report, 50, written)
    before = _heap_after_answers(daemon, report, 50, written)
    others = [subprocess.Popen(["sleep", "600"]) for _ in range(OTHERS)]
    try:
        after = _heap_after_answers(daemon, report, 50, written)
        assert all(p.poll() is None for p in others), "SETUP INVALID: the processes ended"
    finally:
        for p in others:
            p.kill()
            p.wait()
    grew = after - before
    print(f"heap {before} -> {after}: {grew} bytes with {OTHERS} more processes")
    assert grew < OTHERS * 300, f"the heap grew {grew} bytes with {OTHERS} more processes"


def test_an_events_refresh_keeps_no_listing(fake_home, monkeypatch: pytest.MonkeyPatch) -> None:
    """More than a few sessions listed again after their shared directories
    changed (claude.finding.PROBE_AT_MOST) read those directories' listings:
    the daemon's refresh does not keep them."""
    sessions = [make_session(fake_home, age_days=1, full=False) for _ in range(12)]
    env = Env.from_environ(fake_home.environ)
    daemon = main.Daemon(env)
    daemon.work.ctx = ctx = Context.open(env)
    made: list[weakref.ref[Listings]] = []
    init = Listings.__init__

    def noted(self: Listings) -> None:
        made.append(weakref.ref(self))
        init(self)

    monkeypatch.setattr(Listings, "__init__", noted)
    try:
        scan(ctx)
        made.clear()
        todos = fake_home.claude / "todos"
        todos.mkdir(exist_ok=True)
        for s in sessions:
            (todos / f"{s.id}-agent-{s.id}.json").write_text("[]")
        daemon.work.refresh("claude", [s.id for s in sessions], set())
        assert {s.id for s in ctx.index.sessions("claude")} == {s.id for s in sessions}
        assert made, "SETUP INVALID: the refresh read no listing"
        gc.collect()
        assert [ref() for ref in made] == [None] * len(made), "listings kept after the refresh"
    finally:
        ctx.index.close()
