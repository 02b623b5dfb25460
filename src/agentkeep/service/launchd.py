"""The launchd user agent: its state as `launchctl print` gives it, and the
plans that install and uninstall it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from agentkeep.paths import Env
from agentkeep.service.plan import (
    Action,
    Plan,
    foreign_daemon,
    foreign_warning,
    run_action,
    trash_note,
)
from agentkeep.service.state import (
    RUNNING,
    STOPPED,
    UNKNOWN,
    State,
    manager_problem,
    query,
    unreachable,
)
from agentkeep.service.text import daemon_command, plist_bytes
from agentkeep.service.where import LABEL, log_dir, plist_path


def target(env: Env) -> str:
    return f"gui/{env.uid}/{LABEL}"


def state_of(env: Env, path: Path, installed: bool) -> State:
    problem = manager_problem(env)
    if problem is not None:
        return State("launchd", path, installed, UNKNOWN, problem=problem)
    done = query(env, ["launchctl", "print", target(env)])
    if done is None or done.returncode != 0:
        return State("launchd", path, installed, STOPPED)
    text = done.stdout
    running = re.search(r"^\s*state = running\s*$", text, re.M) is not None
    pid = re.search(r"^\s*pid = (\d+)\s*$", text, re.M)
    last = re.search(r"^\s*last exit code = (\d+)", text, re.M)
    return State(
        "launchd",
        path,
        installed,
        RUNNING if running else STOPPED,
        pid=int(pid.group(1)) if pid and running else None,
        exit_status=int(last.group(1)) if last else None,
    )


def install(env: Env) -> Plan:
    problem = manager_problem(env)
    if problem is not None:
        raise unreachable(problem)
    path = plist_path(env)
    current = state_of(env, path, path.is_file())
    actions = [
        Action("mkdir", str(log_dir(env))),
        Action("write", str(path), plist_bytes(env, daemon_command()).decode()),
    ]
    # bootstrap refuses a label that is already loaded, and a re-install must
    # leave this installation's code running: a loaded agent is booted out first.
    loaded = _loaded(env)
    if loaded:
        actions.append(run_action("launchctl", "bootout", target(env)))
    other = foreign_daemon(env, current)
    if other is not None:
        bootstrap = f"launchctl bootstrap gui/{env.uid} {shlex.quote(str(path))}"
        return Plan("install", actions + [foreign_warning(env, other, bootstrap)])
    actions += [
        # A `launchctl disable` from earlier would make bootstrap fail.
        run_action("launchctl", "enable", target(env)),
        run_action("launchctl", "bootstrap", f"gui/{env.uid}", str(path)),
    ]
    undo = None if current.installed else lambda: [Action("remove", str(path))]
    return Plan("install", actions, undo=undo)


def _loaded(env: Env) -> bool:
    done = query(env, ["launchctl", "print", target(env)])
    return done is not None and done.returncode == 0


def uninstall(env: Env) -> Plan:
    path = plist_path(env)
    problem = manager_problem(env)
    actions: list[Action] = []
    if problem is None and _loaded(env):
        actions.append(run_action("launchctl", "bootout", target(env)))
    if path.is_file():
        actions.append(Action("remove", str(path)))
    if not actions:
        return Plan("uninstall", [Action("note", f"not installed: {path} does not exist")])
    if problem is not None:
        actions.append(
            Action("note", f"no service manager answers here ({problem}): nothing was stopped")
        )
    actions.append(Action("note", f"logs are kept in {log_dir(env)}"))
    return Plan("uninstall", actions + trash_note(env), keep_going=True)
