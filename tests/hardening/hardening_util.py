"""Shared by the hardening tests (issue #7): fast fake homes, real holders,
the real CLI with seams, tree fingerprints and the daemon's log.

Not a test module: the test files import what they need from here (and the
daemon harness from tests/test_daemon_serve.py), so every helper exists once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep import leases
from agentkeep.journal import Journal
from build_claude import ClaudeSessionPaths
from fakehome import FakeHome, kill_group, make_fake_home
from waiting import wait_until

DAY = 86400.0
SLEEPER = "import time; time.sleep(600)"
# Holds a shared flock on $LEASE for as long as it lives, the way
# `flock -s <file> claude --resume <id>` does, without the id on any command
# line (a command line naming the id would make the session live, not held).
FLOCK_HOLDER = 'exec 9<>"$LEASE" && flock -s 9 && exec sleep 600'
# /dev/shm is a tmpfs: fsync there costs nothing. The kill tests kill a
# process, they do not cut the power, so what fsync guards is not under test,
# and on a disk the trash's per-move fsyncs make a 200-session prune take ~30 s.
FAST_BASE = Path("/dev/shm")


# -- fake homes --------------------------------------------------------------------


def fast_root(fallback: Path) -> Path:
    """A fresh directory on a tmpfs when there is one, else below `fallback`."""
    if FAST_BASE.is_dir() and os.access(FAST_BASE, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="ak-hard-", dir=FAST_BASE))
    fallback.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="ak-hard-", dir=fallback))


def discard_home(fh: FakeHome) -> None:
    for path in (fh.root, Path(fh.environ["XDG_RUNTIME_DIR"])):
        shutil.rmtree(path, ignore_errors=True)


def clone_home(template: FakeHome, root: Path) -> FakeHome:
    """A new fake user holding a copy of `template`'s files: links copied as
    links, every mtime kept (shutil.copytree copies file times, then each
    directory's once its entries are in)."""
    fh = make_fake_home(root)
    for name in ("home", "tmp", "systmp"):
        shutil.copytree(template.root / name, fh.root / name, symlinks=True, dirs_exist_ok=True)
        shutil.copystat(template.root / name, fh.root / name)
    return fh


def moved(path: Path, src: FakeHome, dst: FakeHome) -> Path:
    return dst.root / path.relative_to(src.root)


# -- real processes ------------------------------------------------------------------


class Processes:
    """Real processes in a fake user's environment, each killed with its whole
    process group when the test ends."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], environ: dict[str, str], **kw: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            **kw,
        )
        self.started.append(proc)
        return proc

    def live(self, environ: dict[str, str], session_id: str) -> subprocess.Popen[bytes]:
        """A stand-in agent whose command line names the session."""
        return self.start([sys.executable, "-c", SLEEPER, "--resume", session_id], environ)

    def hold(self, environ: dict[str, str], lease: Path) -> subprocess.Popen[bytes]:
        """A real `flock -s` on the lease file, held until killed."""
        lease.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        proc = self.start(["sh", "-c", FLOCK_HOLDER], {**environ, "LEASE": str(lease)})
        wait_until(lambda: leases.is_held(lease), f"the flock on {lease}")
        return proc

    def kill_all(self) -> None:
        for proc in self.started:
            kill_group(proc)
        self.started.clear()


@pytest.fixture
def processes() -> Iterator[Processes]:
    procs = Processes()
    yield procs
    procs.kill_all()


# -- the real CLI ----------------------------------------------------------------------


def cli_argv(seams: str, *args: str) -> list[str]:
    """The real CLI, after `seams` (Python run first in the same process)."""
    if not seams:
        return [sys.executable, "-m", "agentkeep", *args]
    return [sys.executable, "-c", seams + "\nfrom agentkeep.cli import main\nmain()\n", *args]


def run_cli(
    fh: FakeHome,
    *args: str,
    seams: str = "",
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv(seams, *args),
        env={**fh.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def report_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    assert isinstance(doc, dict)
    return doc


def removed_ids(doc: dict[str, Any]) -> list[str]:
    return [r["id"] for r in doc["removed"]]


def kept_reasons(doc: dict[str, Any]) -> dict[str, str]:
    return {k["id"]: k["reason"] for k in doc["kept"]}


# -- what is on disk ---------------------------------------------------------------------


def whole(s: ClaudeSessionPaths) -> bool:
    """Every path the builder made for the session is there."""
    return all(os.path.lexists(p) for p in s.all_paths())


def gone(s: ClaudeSessionPaths) -> bool:
    """No path the builder made for the session is left."""
    return not any(os.path.lexists(p) for p in s.all_paths())


def pending_journal(fh: FakeHome) -> set[str]:
    """Ids of the Claude sessions with a journal entry."""
    return {e.id for e in Journal(fh.state).pending() if e.agent == "claude"}


# -- the daemon's log ------------------------------------------------------------------


def log_events(path: Path) -> list[dict[str, Any]]:
    """The daemon's JSON log lines (anything else on stderr is skipped)."""
    events = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def events_named(path: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in log_events(path) if e.get("event") == name]
