"""An agent's own command, run for its adapter: found on the caller's PATH
and run in the caller's environment, never waiting on a prompt or forever.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from agentkeep.paths import Env


@dataclass(frozen=True)
class AgentRun:
    """What an agent's own command printed; `failure` is None when it exited 0."""

    stdout: str
    failure: str | None


def binary(env: Env, name: str) -> str | None:
    """The agent's own command on the caller's PATH (the Env's, not ours)."""
    return shutil.which(name, path=env.get("PATH") or os.defpath)


def run(env: Env, argv: list[str], timeout: float) -> AgentRun:
    """Run an agent's own command in the caller's environment. stdin is
    /dev/null so a confirmation prompt cannot wait forever, and the command
    is killed after `timeout` seconds."""
    try:
        proc = subprocess.run(
            argv,
            env=dict(env.environ),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return AgentRun("", f"timed out after {timeout:g} s")
    except OSError as exc:
        return AgentRun("", str(exc))
    if proc.returncode != 0:
        return AgentRun(proc.stdout, f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return AgentRun(proc.stdout, None)
