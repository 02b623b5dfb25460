"""The tests' fake user: agentkeep.demo.home's, with its socket dir in /tmp.

Each fake user's XDG_RUNTIME_DIR is a fresh short /tmp/akrt-* (unix socket
paths are limited to ~104 bytes, and a test's tmp_path can be longer); every
one made is removed when the test run ends, whichever fixture made it.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentkeep.core.context import Context
from agentkeep.core.pruning import prune
from agentkeep.demo import home
from agentkeep.demo.home import SCRUB
from agentkeep.paths import Env
from agentkeep.prune.report import PruneReport

__all__ = [
    "SCRUB",
    "FakeHome",
    "Spawn",
    "cli_json",
    "kill_group",
    "make_fake_home",
    "prune_here",
]

# The `spawn` fixture's starter (conftest.py): argv, env=None, *, ready=False.
Spawn = Callable[..., subprocess.Popen[str]]

_RUNTIME_DIRS: list[Path] = []


@atexit.register
def _remove_runtime_dirs() -> None:
    for runtime in _RUNTIME_DIRS:
        shutil.rmtree(runtime, ignore_errors=True)


class FakeHome(home.FakeHome):
    """agentkeep.demo.home's fake user, with what the tests ask of it."""

    @property
    def system_tmp(self) -> Path:
        return Path(self.environ["AGENTKEEP_SYSTEM_TMP"])

    @property
    def socket(self) -> Path:
        return Path(self.environ["XDG_RUNTIME_DIR"]) / "agentkeep" / "agentkeep.sock"

    def write_config(self, text: str, *, seen: bool = False) -> Path:
        """Write the user's config. `seen`: as if a person had pruned with
        its retentions already, so the daemon's scheduled prune removes at
        once instead of first showing what it would (agentkeep.preview)."""
        path = super().write_config(text)
        if seen:
            from agentkeep import preview, view
            from agentkeep.agents import AGENTS

            config, error = view.load(Env.from_environ(self.environ), self.state)
            assert error is None, error
            self.state.mkdir(parents=True, exist_ok=True, mode=0o700)
            preview.confirmed(self.state, preview.retentions(config, AGENTS))
        return path

    def cli(
        self,
        *args: str,
        check: bool = False,
        timeout: float = 60,
        env: dict[str, str] | None = None,
        **kw: Any,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real CLI as a subprocess in this fake user's environment
        (`env`: that environment with some variables changed)."""
        proc = subprocess.run(
            [sys.executable, "-m", "agentkeep", *args],
            env=self.environ if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kw,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"agentkeep {' '.join(args)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc


def make_fake_home(root: Path) -> FakeHome:
    runtime = Path(tempfile.mkdtemp(prefix="akrt-", dir="/tmp"))
    _RUNTIME_DIRS.append(runtime)
    made = home.make_fake_home(root, runtime)
    return FakeHome(made.root, made.home, made.environ)


def kill_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """End a process a test started in its own group (start_new_session),
    with everything it started, and reap it. Its descendants are found first
    and killed too: an agent may start a command in a session of its own
    (Claude's Bash tool does), which the group's signal does not reach."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in descendants:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=10)


def cli_json(fh: FakeHome, *args: str) -> tuple[int, Any, str]:
    """The real CLI with --json: (exit status, the decoded document, stderr)."""
    proc = fh.cli(*args, "--json")
    try:
        doc = json.loads(proc.stdout) if proc.stdout.strip() else None
    except ValueError:
        pytest.fail(f"agentkeep {' '.join(args)} printed no JSON:\n{proc.stdout}\n{proc.stderr}")
    return proc.returncode, doc, proc.stderr


def prune_here(fh: FakeHome, **options: Any) -> PruneReport | None:
    """prune in this process, on the fake user's own context."""
    ctx = Context.open(Env.from_environ(fh.environ))
    try:
        return prune(ctx, **options)
    finally:
        ctx.index.close()
