"""Running a real agent as a user would, with nothing but loopback.

Every agent command runs in a network namespace of its own (`unshare -n`),
with the mock model server started inside it (netns_run.py): the agent can
reach 127.0.0.1 and nothing else, whatever it tries (telemetry, updates,
model lists). Where a network namespace cannot be made, the suite is
skipped with the reason: it never runs an agent that could reach out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mockmodel

HERE = Path(__file__).resolve().parent


def unshare_prefix() -> list[str]:
    """`unshare -n` as root; `unshare -rn` (root in a user namespace of our
    own) otherwise."""
    return ["unshare", "-n", "--"] if os.geteuid() == 0 else ["unshare", "-rn", "--"]


def isolation_problem() -> str | None:
    """Why agents cannot be run isolated here, or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare(1) and ip(8) are needed to give each agent a network of its own"
    probe = subprocess.run(
        [*unshare_prefix(), "ip", "link", "set", "lo", "up"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"a network namespace cannot be made here: {probe.stderr.strip()[:200]}"
    return None


@dataclass
class Run:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    requests: list[dict[str, Any]]

    def check(self) -> Run:
        if self.returncode != 0:
            raise AssertionError(
                f"{' '.join(self.argv)} exited {self.returncode}\n"
                f"stdout:\n{self.stdout[-4000:]}\nstderr:\n{self.stderr[-4000:]}"
            )
        return self


def run(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    protocol: str,
    rules: list[dict[str, Any]],
    workdir: Path,
    timeout: float = 180,
    stdin: str | None = None,
) -> Run:
    """Run `argv` (an agent command) in `cwd` with `env`, isolated, against
    the mock model speaking `protocol` and answering by `rules`."""
    workdir.mkdir(parents=True, exist_ok=True)
    n = len(list(workdir.glob("run-*.log")))
    script = workdir / f"run-{n}.rules.json"
    log = workdir / f"run-{n}.log"
    script.write_text(json.dumps(rules))
    log.touch()
    wrapper = [
        *unshare_prefix(),
        sys.executable,
        str(HERE / "netns_run.py"),
        protocol,
        str(script),
        str(log),
        "--",
        *argv,
    ]
    child_env = dict(env)
    child_env["PYTHONPATH"] = str(HERE)
    proc = subprocess.run(
        wrapper,
        env=child_env,
        cwd=cwd,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(argv, proc.returncode, proc.stdout, proc.stderr, mockmodel.requests(log))
