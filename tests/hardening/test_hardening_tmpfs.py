"""A real full disk: the state dir on a small tmpfs, filled up.

The report is always printed with what happened, every failure is one
clear line naming what could not be written and why, `status` and `doctor`
say the disk is full, the daemon starts and serves, and once there is room
again the next prune removes what it should. Mounting a tmpfs needs root:
elsewhere these tests are skipped, saying so (the seam-based tests in
test_hardening_full_disk.py cover the same paths).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from build_claude import ClaudeSessionPaths, make_session
from fakehome import FakeHome
from test_daemon_serve import start_daemon, stop_daemons  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

ENOSPC = os.strerror(errno.ENOSPC)


@pytest.fixture
def small_disk(fake_home: FakeHome) -> Iterator[Path]:
    """XDG_STATE_HOME on a 1 MiB tmpfs of its own."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = Path(fake_home.environ["XDG_STATE_HOME"])
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here: {mounted.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    # Unbuffered: a buffer left half written when the disk filled would
    # fail again as the file closes.
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    st = os.statvfs(disk)
    assert st.f_bavail == 0, "SETUP INVALID: the disk is not full"
    return filler


def sessions(fh: FakeHome, n: int = 5) -> list[ClaudeSessionPaths]:
    fh.write_config('retention = "30d"\ntrash = "0"\n')
    return [make_session(fh, cwd=f"/home/u/p{i}", age_days=40 + i) for i in range(n)]


def exists(s: ClaudeSessionPaths) -> bool:
    return all(os.path.lexists(p) for p in s.all_paths())


def test_a_full_disk_fails_each_removal_prints_the_report_and_recovers(
    fake_home: FakeHome, small_disk: Path
) -> None:
    old = sessions(fake_home)
    assert fake_home.cli("scan").returncode == 0  # an index from before the disk filled
    filler = fill(small_disk)

    proc = fake_home.cli("prune", "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert sorted(f["id"] for f in report["failed"]) == sorted(s.id for s in old)
    assert all(ENOSPC in f["reason"] and "journal" in f["reason"] for f in report["failed"])
    assert report["removed"] == []
    assert all(exists(s) for s in old), "nothing removed without its journal entry"
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if ENOSPC in line]
    assert 1 <= len(lines) <= 3, f"one line per failure, not one per session:\n{proc.stderr}"

    text = fake_home.cli("prune")
    assert text.returncode == 1 and "5 failed" in text.stdout, text.stdout + text.stderr
    assert "Traceback" not in text.stderr

    filler.unlink()  # room again
    again = fake_home.cli("prune", "--json")
    assert again.returncode == 0, again.stderr
    assert sorted(r["id"] for r in json.loads(again.stdout)["removed"]) == sorted(s.id for s in old)


def test_status_and_doctor_say_the_disk_is_full(fake_home: FakeHome, small_disk: Path) -> None:
    sessions(fake_home, 2)
    fill(small_disk)
    status = fake_home.cli("status", "--json")
    assert status.returncode == 1  # no daemon
    paused = json.loads(status.stdout)["paused"]
    assert paused and "is full" in paused, paused
    doctor = fake_home.cli("doctor")
    assert doctor.returncode == 1
    assert "state disk" in doctor.stdout and "is full" in doctor.stdout


def test_the_daemon_starts_on_a_full_disk_and_serves(fake_home: FakeHome, small_disk: Path) -> None:
    sessions(fake_home, 3)
    fill(small_disk)
    daemon = start_daemon(fake_home)
    status = daemon.status()
    assert status["sessions"] == 3
    assert status["paused"] and "is full" in status["paused"], status
    assert "kept in memory" in daemon.stderr()
    listed = fake_home.cli("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 3


# The journal has room, the record of the last prune does not (the disk
# fills up during the run): the seam makes that one write fail.
LAST_PRUNE_FULL = """
import errno, os
import agentkeep.core.pruning as pruning

def full(state_dir, summary):
    path = state_dir / "last_prune.json"
    raise OSError(errno.ENOSPC, f"cannot write {path}: {os.strerror(errno.ENOSPC)}", str(path))

pruning.record_last_prune = full
from agentkeep.cli import main
main()
"""


@pytest.mark.parametrize("as_json", [True, False])
def test_a_record_that_cannot_be_written_never_loses_the_report(
    fake_home: FakeHome, as_json: bool
) -> None:
    old = sessions(fake_home, 3)
    args = ["prune", *(["--json"] if as_json else [])]
    proc = subprocess.run(
        [sys.executable, "-c", LAST_PRUNE_FULL, *args],
        env=fake_home.environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "last_prune.json" in proc.stderr and ENOSPC in proc.stderr
    if as_json:
        assert len(json.loads(proc.stdout)["removed"]) == 3
    else:
        assert "3 removed" in proc.stdout
    assert not any(exists(s) for s in old)
