"""Two pruners at once (issue #7): a second daemon is refused while the first
prunes; a CLI prune started beside the daemon's scheduled prune (through the
socket, or in-process against the same state dir) waits for it; a scheduled
prune that finds a CLI prune running waits for it, and runs after it. Nothing
is removed twice, nothing fails, nothing crashes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
from hardening_util import (
    cli_argv,
    events_named,
    removed_ids,
    wait_until,
)

from build_claude import ClaudeSessionPaths, make_session
from fakehome import FakeHome
from test_daemon_serve import Daemon, start_daemon, stop_daemons

pytestmark = pytest.mark.slow

__all__ = ["stop_daemons"]

OLD = 20
# The daemon's prune stops at its fifth removed file until the test opens
# the gate, so the other pruner surely starts while it is removing, however
# slowly a loaded machine starts it.
SLOW_PRUNE = """
import os, pathlib, time
import agentkeep.rmtree as rmtree
gate = pathlib.Path(os.environ["GATE"])
leaves = []

def at_leaf(path):
    leaves.append(path)
    if len(leaves) == 5:
        (gate / "waiting").write_text("")
        deadline = time.monotonic() + 60
        while not (gate / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)

rmtree._before_leaf = at_leaf
"""
# The CLI's prune stops after its plan until the test opens the barrier.
BARRIER = """
import os, pathlib, time
import agentkeep.prune.run as prune

def wait_at_barrier():
    barrier = pathlib.Path(os.environ["BARRIER"])
    (barrier / "planned").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not (barrier / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)

prune._after_plan = wait_at_barrier
"""


def world(fh: FakeHome) -> tuple[list[ClaudeSessionPaths], ClaudeSessionPaths]:
    fh.write_config('retention = "30d"\nmax_removals = 1000\n', seen=True)
    old = [
        make_session(fh, cwd=f"/home/user/p{i % 5}", age_days=40 + i, full=False)
        for i in range(OLD)
    ]
    return old, make_session(fh, age_days=3, full=False)


def daemon_removed(d: Daemon) -> list[str]:
    return [e["id"] for e in events_named(d.log, "removed")]


def gated_daemon(fh: FakeHome, gate: Path) -> Daemon:
    """A daemon whose scheduled prune removes, then waits at `gate` (SLOW_PRUNE)."""
    gate.mkdir()
    extra = {"AGENTKEEP_FIRST_PRUNE_DELAY": "0.5", "GATE": str(gate)}
    d = start_daemon(fh, everywhere=SLOW_PRUNE, extra=extra)
    wait_until((gate / "waiting").exists, "the daemon's scheduled prune removing")
    return d


def blocked_on_a_flock(pid: int) -> bool:
    """/proc/locks lists a process waiting for a flock with "->"."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "->" and fields[2] == "FLOCK" and fields[5] == str(pid):
            return True
    return False


def cli_prune(
    fh: FakeHome, *, seams: str = "", env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cli_argv(seams, "prune", "--json"),
        env={**fh.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    try:
        return proc.returncode, json.loads(out), err
    except ValueError:
        pytest.fail(f"the CLI printed no report (exit {proc.returncode}):\n{out}\n{err}")


def assert_once_each(old: list[ClaudeSessionPaths], *removed: list[str]) -> None:
    everything = [sid for ids in removed for sid in ids]
    assert len(everything) == len(set(everything)), "a session was removed twice"
    assert sorted(everything) == sorted(s.id for s in old)
    assert not any(s.transcript.exists() for s in old)


@pytest.mark.parametrize("route", ["socket", "in-process"])
def test_a_cli_prune_beside_the_daemons_waits_and_removes_nothing_twice(
    fake_home: FakeHome, tmp_path: Path, route: str
) -> None:
    old, recent = world(fake_home)
    gate = tmp_path / "gate"
    daemon = gated_daemon(fake_home, gate)
    # In-process: the CLI does not find the daemon, and prunes the same state dir itself.
    env = {"AGENTKEEP_SOCKET": str(tmp_path / "elsewhere.sock")} if route == "in-process" else {}

    proc = cli_prune(fake_home, env=env)

    # The second prune waits for the first: on the prune lock, in the CLI's
    # own process or in the daemon's process for the prune it answers.
    def waiters() -> list[int]:
        if route == "in-process":
            return [proc.pid]
        return [c.pid for c in psutil.Process(daemon.proc.pid).children()]

    wait_until(
        lambda: any(map(blocked_on_a_flock, waiters())), "the CLI's prune waiting for the daemon's"
    )
    if events_named(daemon.log, "scheduled prune done"):
        pytest.fail("SETUP INVALID: the daemon's prune ended before the CLI's started")
    (gate / "go").touch()
    code, doc, err = finish(proc)

    assert code == 0, err
    assert doc["failed"] == []
    done = wait_until(lambda: events_named(daemon.log, "scheduled prune done"), "the daemon")
    assert done[0]["failed"] == 0
    if route == "socket":
        # The daemon did both prunes: its log has every removal of both.
        assert set(removed_ids(doc)) <= set(daemon_removed(daemon))
        assert_once_each(old, daemon_removed(daemon))
    else:
        assert_once_each(old, daemon_removed(daemon), removed_ids(doc))
    assert recent.transcript.exists()
    assert daemon.status()["pid"] == daemon.proc.pid
    assert daemon.stop() == 0, daemon.stderr()


def test_the_daemons_turn_waits_for_a_cli_prune_and_runs_after_it(
    fake_home: FakeHome, tmp_path: Path
) -> None:
    old, recent = world(fake_home)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    proc = cli_prune(
        fake_home,
        seams=BARRIER,
        env={"BARRIER": str(barrier), "AGENTKEEP_SOCKET": str(tmp_path / "elsewhere.sock")},
    )
    try:
        wait_until((barrier / "planned").exists, "the CLI's prune reaching its plan")
        daemon = start_daemon(fake_home, extra={"AGENTKEEP_FIRST_PRUNE_DELAY": "0.3"})
        wait_until(
            lambda: events_named(
                daemon.log, "another prune holds the prune lock: the scheduled prune waits for it"
            ),
            "the daemon's turn",
        )
    finally:
        (barrier / "go").write_text("")
    code, doc, err = finish(proc)

    assert code == 0, err
    assert doc["failed"] == []
    done = wait_until(lambda: events_named(daemon.log, "scheduled prune done"), "the daemon's turn")
    assert done[0]["removed"] == done[0]["failed"] == 0
    assert daemon_removed(daemon) == []
    assert_once_each(old, removed_ids(doc))
    assert recent.transcript.exists()
    assert daemon.status()["pid"] == daemon.proc.pid
    assert daemon.stop() == 0, daemon.stderr()


def test_a_second_daemon_is_refused_while_the_first_prunes(
    fake_home: FakeHome, tmp_path: Path
) -> None:
    old, recent = world(fake_home)
    gate = tmp_path / "gate"
    first = gated_daemon(fake_home, gate)

    second = start_daemon(
        fake_home, extra={"AGENTKEEP_FIRST_PRUNE_DELAY": "0"}, ready=False, name="second"
    )
    assert second.proc.wait(20) == 1
    assert "already running" in second.stderr() and str(first.proc.pid) in second.stderr()
    if events_named(first.log, "scheduled prune done"):
        pytest.fail("SETUP INVALID: the first daemon's prune ended before the second started")
    (gate / "go").touch()

    done = wait_until(lambda: events_named(first.log, "scheduled prune done"), "the first prune")
    assert done[0]["failed"] == 0
    assert events_named(second.log, "removed") == []
    assert_once_each(old, daemon_removed(first))
    assert recent.transcript.exists()
    assert first.status()["pid"] == first.proc.pid
    assert first.stop() == 0, first.stderr()
