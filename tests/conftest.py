"""Fixtures shared by every test: a whole fake user in a tmp dir.

Every test runs with HOME, XDG_*, TMPDIR, TMP, TEMP, AGENTKEEP_SYSTEM_TMP,
CLAUDE_CONFIG_DIR, CODEX_HOME, COPILOT_HOME, QWEN_HOME, QWEN_RUNTIME_DIR and
PI_CODING_AGENT_DIR pointing into its own tmp tree, in this process and in
every subprocess it starts (fakehome.py), so no test can read or touch the
real home, the real /tmp/claude-<uid> or a real agent database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehome import SCRUB, FakeHome, Spawn, kill_group, make_fake_home

__all__ = ["FakeHome", "make_fake_home"]


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHome]:
    """A fake user; this process's environment points at it too."""
    fh = make_fake_home(tmp_path)
    for key in SCRUB:
        monkeypatch.delenv(key, raising=False)
    for key, value in fh.environ.items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    # Python keeps the temporary directory it found first: this test's
    # temporary files go to this user's TMPDIR, found again.
    monkeypatch.setattr(tempfile, "tempdir", None)
    yield fh
    # Removed here, not by an `rm` child: a test's environment (a huge
    # PYTEST_CURRENT_TEST) can be too big to exec with.
    shutil.rmtree(fh.environ["XDG_RUNTIME_DIR"], ignore_errors=True)


@pytest.fixture
def spawn(fake_home: FakeHome) -> Iterator[Spawn]:
    """Start real processes (by default in the fake user's environment),
    each in its own process group with pipes for stdin, stdout and stderr;
    `ready` waits until the process prints a line. Every one is killed with
    its whole group in teardown."""
    started: list[subprocess.Popen[str]] = []

    def start(
        argv: list[str], env: dict[str, str] | None = None, *, ready: bool = False
    ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            argv,
            env=env or fake_home.environ,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        started.append(proc)
        if ready:
            assert proc.stdout is not None
            assert proc.stdout.readline(), "SETUP INVALID: helper process died before it was ready"
        return proc

    yield start
    for proc in started:
        kill_group(proc)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
