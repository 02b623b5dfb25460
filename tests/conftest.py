"""Fixtures shared by every test: a whole fake user in a tmp dir.

Every test runs with HOME, XDG_*, TMPDIR, TMP, TEMP, AGENTKEEP_SYSTEM_TMP,
CLAUDE_CONFIG_DIR and CODEX_HOME pointing into its own tmp tree, in this
process and in every subprocess it starts (fakehome.py), so no test can read
or touch the real home, the real /tmp/claude-<uid> or a real agent database.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehome import SCRUB, FakeHome, make_fake_home

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
    yield fh
    runtime = Path(fh.environ["XDG_RUNTIME_DIR"])
    subprocess.run(["rm", "-rf", str(runtime)], check=False)
