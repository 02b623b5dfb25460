"""FIFOs where agentkeep's files belong (issue #14).

`mkfifo <zero session>/lease.lock` (or at `<state>/leases/<agent>/<id>.lock`)
made the CLI's prune and ls wait for ever for a writer, and the daemon's
scheduled prune never finished and held the prune lock, so every later prune
and ls over the socket waited too. Every file agentkeep opens is opened only
when it is a regular file: the session behind a FIFO lease is kept `unsafe`
naming it, the rest go on; a FIFO at a state file is a clear error or is
skipped, never a hang. Every command here runs as a real process with a
deadline, so a hang fails the test instead of stopping the run.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hardening_util import (
    cli_argv,
    events_named,
    kept_reasons,
    removed_ids,
    report_of,
    run_cli,
)

from agentkeep.leases import encode_id, is_held, lease_path
from build_agents import age, make_zero_session, zero_root
from build_claude import make_session
from fakehome import FakeHome, kill_group
from test_daemon_serve import start_daemon, stop_daemons
from waiting import wait_until

__all__ = ["stop_daemons"]

AGE = 40.0
# A command that hangs is killed after this long, and the test fails.
DEADLINE = 60.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def cli(fh: FakeHome, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return run_cli(fh, *args, timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"agentkeep {' '.join(args)} hung (killed after {DEADLINE:g} s)")


def is_fifo(path: Path) -> bool:
    return stat.S_ISFIFO(os.lstat(path).st_mode)


def fifo_at(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.mkfifo(path, 0o600)
    return path


def old_zero(fh: FakeHome, sid: str) -> Path:
    return make_zero_session(zero_root(fh.data), sid, days=AGE).dir


def fifo_lease(fh: FakeHome, where: str) -> tuple[str, str, Path, str]:
    """An old session whose lease path is a FIFO, and another old one of the
    same agent: (agent, FIFO session id, the FIFO, the other session's id)."""
    if where == "zero":
        sid, other = "z-fifo", "z-plain"
        directory = old_zero(fh, sid)
        old_zero(fh, other)
        os.unlink(directory / "lease.lock")
        fifo = fifo_at(directory / "lease.lock")
        age(directory, AGE)
        return "zero", sid, fifo, other
    s, other_s = make_session(fh, age_days=AGE), make_session(fh, age_days=AGE)
    return "claude", s.id, fifo_at(lease_path(fh.state, "claude", s.id)), other_s.id


@pytest.mark.parametrize("where", ["zero", "state"])
def test_a_fifo_lease_keeps_its_session_unsafe_and_the_rest_go_on(
    fake_home: FakeHome, where: str
) -> None:
    agent, sid, fifo, other = fifo_lease(fake_home, where)

    listed = cli(fake_home, "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {sid, other} <= {s["id"] for s in json.loads(listed.stdout)}
    dry = report_of(cli(fake_home, "prune", "--older-than", "30d", "--dry-run", "--json"))
    proc = cli(fake_home, "prune", "--older-than", "30d", "--json")
    doc = report_of(proc)

    for run in (dry, doc):
        assert removed_ids(run) == [other] and run["failed"] == []
        [kept] = [k for k in run["kept"] if k["id"] == sid]
        assert kept["reason"] == "unsafe" and str(fifo) in kept["detail"], kept
    assert proc.returncode == 0, proc.stderr
    assert is_fifo(fifo), "the FIFO is left as it was"
    if agent == "zero":
        assert (fifo.parent / "metadata.json").exists(), "the session stays whole"


def test_the_daemon_prunes_past_a_fifo_lease_and_keeps_answering(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "30d"\n')
    _, sid, fifo, other = fifo_lease(fake_home, "zero")
    # A recent session, or the scheduled prune pauses (everything idle: a clock gone wrong?).
    make_zero_session(zero_root(fake_home.data), "z-recent", days=2)
    daemon = start_daemon(fake_home, extra={"AGENTKEEP_FIRST_PRUNE_DELAY": "0.2"})

    # The scheduled prune ends (a new retention's first one is a preview)...
    done = daemon.wait(
        lambda: events_named(daemon.log, "scheduled prune done"), DEADLINE, "the scheduled prune"
    )
    assert done[0]["kept"] == 1 and done[0]["failed"] == 0, daemon.stderr()
    # ...and neither ls nor a prune over the socket is stuck behind it.
    listed = daemon.call("ls", {}, timeout=DEADLINE)
    assert sid in {s["id"] for s in listed}
    doc = daemon.call("prune", {"older_than": "30d"}, timeout=DEADLINE)
    assert kept_reasons(doc) == {sid: "unsafe"} and removed_ids(doc) == [other]
    listed = daemon.call("ls", {}, timeout=DEADLINE)
    assert [s["id"] for s in listed] == [sid, "z-recent"]
    assert is_fifo(fifo)
    assert daemon.stop() == 0, daemon.stderr()


def test_a_fifo_lease_refuses_hold(fake_home: FakeHome) -> None:
    _, sid, fifo, _ = fifo_lease(fake_home, "state")
    proc = cli(fake_home, "hold", "claude", sid, "--", "true")
    assert proc.returncode == 1
    assert str(fifo) in proc.stderr and "FIFO" in proc.stderr and "Traceback" not in proc.stderr


# -- state files -------------------------------------------------------------------

# (the file made a FIFO, relative to the state dir; the command; its exit;
# what its stderr names)
STATE_FIFOS = [
    pytest.param("pins.json", ("ls", "--json"), 1, "pins.json", id="pins-ls"),
    pytest.param("pins.json", ("prune", "--older-than", "30d"), 1, "pins.json", id="pins-prune"),
    pytest.param("prune.lock", ("prune", "--older-than", "30d"), 1, "prune.lock", id="prune-lock"),
    pytest.param(
        "restored.json", ("prune", "--older-than", "30d"), 1, "restored.json", id="restored"
    ),
    # The index is a cache: one that cannot be opened is kept in memory.
    pytest.param("index.sqlite", ("ls", "--json"), 0, "index.sqlite", id="index"),
]


@pytest.mark.parametrize(("name", "args", "exit", "named"), STATE_FIFOS)
def test_a_fifo_state_file_is_a_clear_error_and_removes_nothing(
    fake_home: FakeHome, name: str, args: tuple[str, ...], exit: int, named: str
) -> None:
    s = make_session(fake_home, age_days=AGE)
    fifo = fifo_at(fake_home.state / name)

    proc = cli(fake_home, *args)

    assert proc.returncode == exit, (proc.stdout, proc.stderr)
    assert named in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert s.transcript.exists(), "nothing is removed"
    assert is_fifo(fifo)


def test_a_fifo_in_the_journal_or_the_trash_is_skipped(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=AGE)
    fifos = [
        fifo_at(fake_home.state / "journal" / "batch-1-1.json"),
        fifo_at(fake_home.state / "journal" / "claude" / f"{encode_id(s.id)}.json"),
        fifo_at(fake_home.state / "trash" / "claude" / "elsewhere" / "entry.json"),
    ]
    listed = cli(fake_home, "trash", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["entries"] == []

    proc = cli(fake_home, "prune", "--older-than", "30d", "--json")

    assert report_of(proc)["failed"] == [] and removed_ids(report_of(proc)) == [s.id]
    assert all(is_fifo(path) for path in fifos)


def test_a_fifo_config_is_a_config_error(fake_home: FakeHome) -> None:
    fifo_at(fake_home.config_path)
    proc = cli(fake_home, "prune", "--dry-run")
    assert proc.returncode == 2 and "FIFO" in proc.stderr and "config.toml" in proc.stderr


def test_doctor_reads_past_a_fifo_settings_file(fake_home: FakeHome) -> None:
    fifo_at(fake_home.claude / "settings.json")
    proc = cli(fake_home, "doctor")
    assert "settings.json" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_a_fifo_daemon_lock_stops_the_daemon_with_one_line(fake_home: FakeHome) -> None:
    fifo = fifo_at(fake_home.state / "daemon.lock")
    daemon = start_daemon(fake_home, ready=False)
    try:
        code = daemon.proc.wait(DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail("the daemon hung on a FIFO daemon.lock")
    assert code == 1
    [line] = [e for e in events_named(daemon.log, "cannot take the daemon lock")]
    assert "FIFO" in line["error"] and line["lock"] == str(fifo)
    assert "Traceback" not in daemon.stderr()


# -- a prune that waits ----------------------------------------------------------------


def test_a_cli_prune_waits_for_a_running_prune_and_an_interrupt_ends_the_wait(
    fake_home: FakeHome, tmp_path: Path
) -> None:
    s = make_session(fake_home, age_days=AGE)
    lock = fake_home.state / "prune.lock"
    lock.parent.mkdir(parents=True, mode=0o700)
    holder = subprocess.Popen(
        ["flock", "-x", str(lock), "sleep", "600"], start_new_session=True, env=fake_home.environ
    )
    err_path = tmp_path / "prune.stderr"
    try:
        wait_until(lambda: is_held(lock), "another prune holding the prune lock")
        with err_path.open("w") as err:
            env: dict[str, Any] = {
                **fake_home.environ,
                "AGENTKEEP_SOCKET": str(tmp_path / "none.sock"),
            }
            proc = subprocess.Popen(
                cli_argv("", "prune", "--older-than", "30d", "--json"),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        try:
            wait_until(lambda: "waiting for it to finish" in err_path.read_text(), "the wait")
            assert proc.poll() is None, "the prune did not wait"
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(20)
            except subprocess.TimeoutExpired:
                pytest.fail("an interrupt did not end the prune's wait")
        finally:
            kill_group(proc)
    finally:
        kill_group(holder)
    assert code != 0
    assert s.transcript.exists(), "nothing is removed by a prune that never ran"
