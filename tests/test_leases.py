"""Leases: real flock(2) between real processes, and within one process."""

from __future__ import annotations

import os
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentkeep.errors import Failure
from agentkeep.leases import (
    Lease,
    LeaseError,
    LeaseHeld,
    LeaseUnsafe,
    encode_id,
    hold_shared,
    is_held,
    lease_path,
    open_lock_file,
    try_exclusive,
)
from agentkeep.model import Reason
from agentkeep.prune.lock import PrunerLock
from fakehome import Spawn


def read_line(proc: subprocess.Popen[str], timeout: float = 15) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError(f"SETUP INVALID: no output from {proc.args} in {timeout}s")
    return proc.stdout.readline().strip()


def poll(condition: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def free(path: Path) -> bool:
    lease = try_exclusive(path)
    if lease is None:
        return False
    lease.release()
    return True


def flock_locks_of(pid: int) -> list[str]:
    """The flock lines of a process's descriptors (Linux fdinfo)."""
    lines = []
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        lines += [
            line for line in text.splitlines() if line.startswith("lock:") and "FLOCK" in line
        ]
    return lines


def test_lease_path_layout_and_encoding(fake_home) -> None:
    state = fake_home.state
    assert lease_path(state, "claude", "0b7c-1") == state / "leases" / "claude" / "0b7c-1.lock"
    assert lease_path(state, "store", "issue/42").name == "issue%2F42.lock"
    assert lease_path(state, "store", "a b\n").name == "a%20b%0A.lock"
    assert encode_id("..") == "%2E%2E" and encode_id(".") == "%2E"
    assert encode_id("caf\u00e9") == "caf%C3%A9"
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    names = {lease_path(state, "store", i).name for i in (long_a, long_b)}
    assert len(names) == 2 and all(len(n.encode()) <= 255 for n in names)
    # No plain encoding can take the form of a cut one.
    assert all("%%" in n for n in names) and "%%" not in encode_id("%" * 10)
    with pytest.raises(ValueError):
        lease_path(state, "../x", "id")
    with pytest.raises(ValueError):
        lease_path(state, "claude", "")
    assert not (state / "leases").exists(), "lease_path must create nothing"


def test_a_flock_from_another_process_holds_the_session(fake_home, spawn: Spawn) -> None:
    path = lease_path(fake_home.state, "claude", "sess-1")
    path.parent.mkdir(parents=True)
    holder = spawn(["flock", "-s", str(path), "sh", "-c", "echo ready; exec sleep 60"])
    assert read_line(holder) == "ready"

    assert try_exclusive(path) is None
    assert is_held(path)
    # Shared with shared is fine: two users of one session.
    with hold_shared(path, wait=False) as mine:
        assert mine.held

    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    assert poll(lambda: free(path)), "the lease stayed held after its holder died"
    assert not is_held(path)


def test_two_leases_in_one_process_conflict(fake_home) -> None:
    path = lease_path(fake_home.state, "codex", "s")
    first = try_exclusive(path)
    assert first is not None
    assert try_exclusive(path) is None, "a second description in the same process must conflict"
    assert is_held(path)
    with pytest.raises(LeaseHeld):
        hold_shared(path, wait=False)
    first.release()
    first.release()  # idempotent
    assert not is_held(path)

    with hold_shared(path) as a, hold_shared(path) as b:
        assert a.fd != b.fd
        assert try_exclusive(path) is None
    assert free(path)


def test_taking_a_lease_creates_private_dirs_and_file(fake_home) -> None:
    path = lease_path(fake_home.state, "gemini", "s")
    assert not is_held(path), "a missing lease file holds nothing"
    assert not path.exists(), "probing must not create the file"
    with try_exclusive(path) as lease:
        assert isinstance(lease, Lease) and lease.path == path
    for directory in (fake_home.state / "leases", path.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not is_held(path), "an unlocked lease file holds nothing"


def test_lock_errors_count_as_in_use(fake_home) -> None:
    state = fake_home.state
    path = lease_path(state, "claude", "s")
    path.parent.mkdir(parents=True)
    outside = fake_home.root / "elsewhere.lock"
    os.symlink(outside, path)
    # A link planted at the lease's name is never followed, nor created
    # through: it is no lease file, so it holds nothing and is never taken.
    with pytest.raises(LeaseUnsafe, match="is a link, not a lock file") as refused:
        try_exclusive(path)
    assert refused.value.reason == Reason.UNSAFE
    assert not is_held(path)
    assert not outside.exists()

    blocked = state / "leases" / "grok"
    blocked.write_text("a file where a directory should be")
    with pytest.raises(LeaseError):
        try_exclusive(lease_path(state, "grok", "s"))


def _not_a_file(path: Path, kind: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
    return path


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "directory", "socket"])
def test_anything_but_a_regular_file_is_never_a_lease(fake_home, kind: str) -> None:
    """A FIFO at a lease's name made every open of it wait for a writer for
    ever; now nothing but a regular file is opened, and the rest refused."""
    path = _not_a_file(fake_home.root / "z" / "lease.lock", kind)
    refusals: list[LeaseUnsafe] = []
    for take in (
        lambda: try_exclusive(path, create_dirs=False),
        lambda: hold_shared(path, wait=False),
        lambda: hold_shared(path),
        lambda: open_lock_file(path, writable=True),
    ):
        with pytest.raises(LeaseUnsafe) as refused:
            take()
        refusals.append(refused.value)
    assert all(str(path) in str(r) and r.reason == Reason.UNSAFE for r in refusals)
    assert not is_held(path), "it holds nothing"
    assert stat.S_IFMT(os.lstat(path).st_mode) != stat.S_IFREG, "and is left as it was"


@pytest.mark.timeout(30)
def test_a_fifo_prune_lock_is_a_failure_naming_it(fake_home) -> None:
    path = _not_a_file(fake_home.state / "prune.lock", "fifo")
    for wait in (False, True):
        with pytest.raises(Failure, match="cannot take the prune lock") as failed:
            PrunerLock(fake_home.state).acquire(wait=wait)
        assert failed.value.exit == 1 and str(path) in failed.value.message


def test_create_dirs_false_never_recreates_a_vanished_directory(fake_home) -> None:
    session_dir = fake_home.data / "zero" / "sessions" / "gone"
    with pytest.raises(LeaseError):
        try_exclusive(session_dir / "lease.lock", create_dirs=False)
    assert not session_dir.exists()


HOLD = (
    "import sys; from pathlib import Path; from agentkeep.leases import hold_and_exec; "
    "hold_and_exec(Path(sys.argv[1]), sys.argv[2:])"
)
COMMAND = "import sys; print('ready', flush=True); sys.stdin.readline(); sys.exit(7)"


def test_hold_and_exec_holds_for_exactly_the_commands_life(fake_home, spawn: Spawn) -> None:
    path = lease_path(fake_home.state, "claude", "held-one")
    proc = spawn([sys.executable, "-c", HOLD, str(path), sys.executable, "-c", COMMAND])
    assert read_line(proc) == "ready"

    assert is_held(path)
    assert try_exclusive(path) is None
    # The exec'd command itself (same pid) holds the shared flock.
    assert any("READ" in line for line in flock_locks_of(proc.pid))

    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(timeout=15) == 7, "the command's exit status must pass through"
    assert free(path), "the lease outlived its command"


def test_hold_and_exec_of_a_missing_command_exits_127(fake_home, spawn: Spawn) -> None:
    path = lease_path(fake_home.state, "claude", "s")
    missing = str(fake_home.root / "no-such-command")
    proc = spawn([sys.executable, "-c", HOLD, str(path), missing, "--flag"])
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 127
    assert f"agentkeep: cannot run {missing}:" in err
    assert free(path)


PRUNER = (
    "import sys, time; from pathlib import Path; from agentkeep.prune.lock import PrunerLock; "
    "lock = PrunerLock(Path(sys.argv[1])); assert lock.acquire(wait=False); "
    "print('ready', flush=True); time.sleep(60)"
)


def test_one_prune_at_a_time(fake_home, spawn: Spawn) -> None:
    state = fake_home.state
    other = spawn([sys.executable, "-c", PRUNER, str(state)])
    assert read_line(other) == "ready"

    mine = PrunerLock(state)
    assert mine.acquire(wait=False) is False
    assert not mine.held

    waited: list[bool] = []
    waiter = PrunerLock(state)
    thread = threading.Thread(target=lambda: waited.append(waiter.acquire(wait=True)), daemon=True)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive() and not waited, "acquire(wait=True) returned while another held it"

    os.killpg(other.pid, signal.SIGKILL)
    other.wait(timeout=10)
    thread.join(15)
    assert waited == [True]
    # Two pruner locks in one process (the daemon's threads) conflict too.
    assert PrunerLock(state).acquire(wait=False) is False
    waiter.release()
    lock = PrunerLock(state)
    assert lock.acquire(wait=True) and lock.held
    lock.release()
    assert mine.acquire(wait=False) is True
    mine.release()
