"""The systemd user unit: its state as `systemctl --user show` gives it,
and the plans that install and uninstall it."""

from __future__ import annotations

import shlex
import time
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
    FAILED,
    RESTARTING,
    RUNNING,
    STARTING,
    STOPPED,
    STOPPING,
    UNKNOWN,
    State,
    first_line,
    int_or_none,
    linger,
    manager_problem,
    query,
    unreachable,
    user_name,
)
from agentkeep.service.text import daemon_command, unit_text
from agentkeep.service.where import UNIT_NAME, unit_path, wants_link

_SYSTEMD_STATES = {
    "active": RUNNING,
    "reloading": RUNNING,
    "deactivating": STOPPING,
    "failed": FAILED,
    "inactive": STOPPED,
}
_SYSTEMD_PROPS = (
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "MainPID",
    "ExecMainStatus",
    "ActiveEnterTimestampMonotonic",
)


def _properties(env: Env) -> dict[str, str] | str:
    """The unit's properties from `systemctl --user show`, or why they cannot be had."""
    problem = manager_problem(env)
    if problem is not None:
        return problem
    argv = ["systemctl", "--user", "show", UNIT_NAME, "-p", ",".join(_SYSTEMD_PROPS)]
    done = query(env, argv)
    if done is None or done.returncode != 0:
        detail = first_line(done.stderr) if done is not None else "could not be run"
        return f"`{shlex.join(argv)}`: {detail}"
    pairs = (line.partition("=") for line in done.stdout.splitlines())
    return {key: value for key, _, value in pairs}


def _since(monotonic_usec: int | None) -> float | None:
    """A CLOCK_MONOTONIC time in µs (as systemd keeps it) as a POSIX time."""
    if not monotonic_usec:
        return None
    return time.time() - (time.monotonic() - monotonic_usec / 1e6)


def state_of(env: Env, path: Path, installed: bool) -> State:
    props = _properties(env)
    if isinstance(props, str):
        return State("systemd", path, installed, UNKNOWN, problem=props)
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    if active == "activating":
        state = RESTARTING if sub == "auto-restart" else STARTING
    else:
        state = _SYSTEMD_STATES.get(active, active or UNKNOWN)
    running = state in (RUNNING, STARTING, STOPPING)
    return State(
        "systemd",
        path,
        installed,
        state,
        pid=(int_or_none(props.get("MainPID")) or None) if running else None,
        since=_since(int_or_none(props.get("ActiveEnterTimestampMonotonic"))) if running else None,
        restarts=int_or_none(props.get("NRestarts")),
        result=props.get("Result") or None,
        exit_status=int_or_none(props.get("ExecMainStatus")),
        linger=linger(env),
    )


def _linger_note(env: Env) -> list[Action]:
    lingers = linger(env)
    if lingers is True:
        return []
    user = shlex.quote(user_name(env))
    why = (
        "lingering is off for this user"
        if lingers is False
        else "could not ask loginctl whether lingering is on"
    )
    return [
        Action(
            "note",
            f"{why}: the service runs only while you are logged in. To keep it running "
            f"after you log out: loginctl enable-linger {user}",
        )
    ]


def install(env: Env) -> Plan:
    problem = manager_problem(env)
    if problem is not None:
        raise unreachable(problem)
    path = unit_path(env)
    current = state_of(env, path, path.is_file())
    other = foreign_daemon(env, current)
    actions = [
        Action("write", str(path), unit_text(env, daemon_command())),
        run_action("systemctl", "--user", "daemon-reload"),
    ]
    if other is not None:
        actions.append(run_action("systemctl", "--user", "enable", UNIT_NAME))
        if current.state in (STARTING, RESTARTING):
            actions.append(run_action("systemctl", "--user", "stop", UNIT_NAME))
        actions.append(foreign_warning(env, other, f"systemctl --user start {UNIT_NAME}"))
    else:
        actions.append(run_action("systemctl", "--user", "enable", "--now", UNIT_NAME))
        # enable --now leaves a running daemon as it is; a re-install (after an
        # upgrade, or with a changed unit) must leave this installation's code running.
        if current.state == RUNNING:
            actions.append(run_action("systemctl", "--user", "restart", UNIT_NAME))
    # A fresh install that fails is taken back whole; a re-install keeps the
    # unit that was there (it is what the user had, and doctor reports it).
    undo = None if current.installed else lambda: _removal(env)
    return Plan("install", actions + _linger_note(env), undo=undo)


def _removal(env: Env) -> list[Action]:
    """Stop and disable the unit, forget a failed state (systemd keeps a
    failed unit listed after its file is gone; only a loaded unit can be
    reset, and only a failed one stays loaded), remove the file."""
    path = unit_path(env)
    actions = [run_action("systemctl", "--user", "disable", "--now", UNIT_NAME)]
    if state_of(env, path, True).state in (FAILED, RESTARTING):
        actions.append(run_action("systemctl", "--user", "reset-failed", UNIT_NAME))
    return actions + [
        Action("remove", str(path)),
        run_action("systemctl", "--user", "daemon-reload"),
    ]


def uninstall(env: Env) -> Plan:
    path, link = unit_path(env), wants_link(env)
    written = [p for p in (path, link) if p.is_file() or p.is_symlink()]
    if not written:
        return Plan("uninstall", [Action("note", f"not installed: {path} does not exist")])
    problem = manager_problem(env)
    if problem is None:
        actions = _removal(env)
    else:
        actions = [Action("remove", str(p)) for p in written]
        actions.append(
            Action(
                "note",
                f"no user service manager answers here ({problem}): "
                "the files install wrote were removed, nothing was stopped",
            )
        )
    return Plan("uninstall", actions + trash_note(env), keep_going=True)
