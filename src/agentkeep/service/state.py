"""What the service manager says: whether one answers at all, and the
service's state as it sees it (`service status`, doctor, the plans)."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep import client
from agentkeep.errors import Failure, ManagerUnreachable
from agentkeep.model import rfc3339
from agentkeep.paths import Env
from agentkeep.service.files import platform_kind

log = structlog.get_logger("agentkeep.service")


def _which(env: Env, program: str) -> str | None:
    return shutil.which(program, path=env.get("PATH") or os.defpath)


def query(env: Env, argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    """Run a read-only query; None when the program is missing or cannot run."""
    program = _which(env, argv[0])
    if program is None:
        return None
    try:
        return subprocess.run(
            [program, *argv[1:]],
            env=dict(env.environ),
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.info("service query failed", argv=argv, error=str(exc))
        return None


def first_line(text: str) -> str:
    """The first line of `text` that is not blank, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def manager_problem(env: Env) -> str | None:
    """Why no user service manager answers here, or None when one does.
    `is-system-running` is not asked: where systemd is not PID 1 it says
    "offline" even when a user manager answers."""
    if platform_kind(env) == "launchd":
        argv = ["launchctl", "print", f"gui/{env.uid}"]
    else:
        argv = ["systemctl", "--user", "show-environment"]
    if _which(env, argv[0]) is None:
        return f"{argv[0]} is not installed"
    done = query(env, argv)
    if done is None:
        return f"`{shlex.join(argv)}` could not be run"
    if done.returncode != 0:
        detail = first_line(done.stderr) or first_line(done.stdout)
        return f"`{shlex.join(argv)}`: {detail or f'exit status {done.returncode}'}"
    return None


def unreachable(problem: str) -> ManagerUnreachable:
    """The error `install` ends in where no service manager answers."""
    return ManagerUnreachable(
        f"no user service manager answers here ({problem}), so nothing was installed; "
        "run `agentkeep serve` yourself instead"
    )


def user_name(env: Env) -> str:
    """This user's login name."""
    try:
        return pwd.getpwuid(env.uid).pw_name
    except KeyError:
        return env.get("USER") or str(env.uid)


def linger(env: Env) -> bool | None:
    """Whether systemd keeps this user's services running after logout; None when unknown."""
    done = query(env, ["loginctl", "show-user", user_name(env), "-p", "Linger"])
    if done is None or done.returncode != 0:
        return None
    value = done.stdout.strip().partition("=")[2]
    return {"yes": True, "no": False}.get(value)


# What `service status` says the service is doing.
RUNNING = "running"
STARTING = "starting"
RESTARTING = "restarting"
STOPPING = "stopping"
STOPPED = "stopped"
FAILED = "failed"
NOT_INSTALLED = "not-installed"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class State:
    """The service as its manager sees it. `state` is one of RUNNING ...
    UNKNOWN (UNKNOWN with `problem` when no manager answers); `restarts`
    counts restarts since the service was started by hand or at login."""

    kind: str
    unit_path: Path
    installed: bool
    state: str
    problem: str | None = None
    pid: int | None = None
    since: float | None = None
    restarts: int | None = None
    result: str | None = None
    exit_status: int | None = None
    linger: bool | None = None

    @property
    def active(self) -> bool | None:
        """Whether it runs; None when no manager answers."""
        return None if self.state == UNKNOWN else self.state == RUNNING

    @property
    def failing(self) -> bool:
        """Failed, or in a restart loop (waiting to restart, or starting once
        more after restarts)."""
        if self.state in (FAILED, RESTARTING):
            return True
        return self.state == STARTING and bool(self.restarts)

    def exit_code(self) -> int:
        """`service status`'s exit code, as `systemctl is-active` gives it:
        0 active, 1 unknown, 3 inactive."""
        return 0 if self.state == RUNNING else 1 if self.state == UNKNOWN else 3

    def to_json(self) -> dict[str, Any]:
        """`service status --json`."""
        return {
            "kind": self.kind,
            "unit_path": str(self.unit_path),
            "installed": self.installed,
            "state": self.state,
            "active": self.active,
            "pid": self.pid,
            "since": rfc3339(self.since),
            "restarts": self.restarts,
            "result": self.result,
            "exit_status": self.exit_status,
            "linger": self.linger,
            "problem": self.problem,
        }

    def words(self) -> str:
        """One line for a person: "installed, running (pid 123, since ...)"."""
        if not self.installed:
            return f"not installed ({self.unit_path} does not exist)"
        if self.state == UNKNOWN:
            return f"installed, but no user service manager answers here ({self.problem})"
        return f"installed, {self.doing()}"

    def doing(self) -> str:
        """What the installed service is doing: "running (pid 123, since ...)"."""
        said: list[str] = []
        if self.pid is not None:
            said.append(f"pid {self.pid}")
        if self.state == RUNNING and self.since is not None:
            said.append(f"since {rfc3339(self.since)}")
        if self.restarts:
            said.append(f"{self.restarts} restart{'s' * (self.restarts > 1)}")
        if self.state in (FAILED, RESTARTING, STOPPED) and self.exit_status:
            said.append(f"last exit status {self.exit_status}")
        if self.state == FAILED and self.result not in (None, "success", "exit-code"):
            said.append(f"result {self.result}")
        return self.state + (f" ({', '.join(said)})" if said else "")


def int_or_none(text: str | None) -> int | None:
    """`text` as an int, or None."""
    try:
        return int(text or "")
    except ValueError:
        return None


def answering_daemon(env: Env) -> int | None:
    """The pid of the daemon answering on this user's socket, if any."""
    try:
        answer = client.call(env, "status", {}, timeout=5)
    except (client.NoDaemon, Failure):
        return None
    pid = answer.get("pid") if isinstance(answer, dict) else None
    return pid if isinstance(pid, int) else None
