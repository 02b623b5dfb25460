"""The two service managers: the systemd user unit (its state as
`systemctl --user show` gives it) and the launchd user agent (as
`launchctl print` gives it), and the plans that install and uninstall each."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

from agentkeep.paths import Env
from agentkeep.service.apply import Action, Plan, run_action
from agentkeep.service.files import (
    LABEL,
    UNIT_NAME,
    daemon_command,
    log_dir,
    plist_bytes,
    plist_path,
    unit_path,
    unit_text,
    wants_link,
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
    answering_daemon,
    first_line,
    int_or_none,
    linger,
    manager_problem,
    query,
    unreachable,
    user_name,
)

_SYSTEMD_STATES = {
    "active": RUNNING,
    "reloading": RUNNING,
    "deactivating": STOPPING,
    "failed": FAILED,
    "inactive": STOPPED,
}
_SYSTEMD_PROPS = (
    "ActiveState,SubState,Result,NRestarts,MainPID,ExecMainStatus,ActiveEnterTimestampMonotonic"
)


def _foreign_warning(env: Env, current: State, start: str) -> list[Action]:
    """Said when a daemon not run by the service answers on the socket."""
    pid = answering_daemon(env)
    if pid is None or pid == current.pid:
        return []
    return [
        Action(
            "warn",
            f"a daemon not run by the service (pid {pid}) already answers on {env.socket_path},"
            " and the service's own cannot start while it runs: the service is installed but"
            f" not started. Stop pid {pid}, then: {start}",
        )
    ]


def _trash_note(env: Env) -> list[Action]:
    """Without the daemon nothing expires the trash: say what is left in it."""
    from agentkeep import render
    from agentkeep.trash.entries import list_entries, trash_dir

    entries = list_entries(env.state_dir)
    if not entries:
        return []
    total = sum(e.bytes for e in entries)
    count = f"{len(entries)} pruned session{'s' * (len(entries) > 1)}"
    return [
        Action(
            "note",
            f"the trash ({trash_dir(env.state_dir)}) still holds {count} "
            f"({render.size(total)}), which nothing expires without the daemon: "
            "`agentkeep restore AGENT ID` puts one back; "
            "`deploy/install.sh --uninstall --purge` removes them with agentkeep's state",
        )
    ]


def _not_installed(path: Path) -> Plan:
    return Plan([Action("note", f"not installed: {path} does not exist")])


def state_of(env: Env, kind: str, path: Path) -> State:
    """The installed service as its manager sees it."""
    return (_launchd_state if kind == "launchd" else _systemd_state)(env, path, True)


def install(env: Env, kind: str) -> Plan:
    """The plan that installs the service; ManagerUnreachable where no
    manager answers."""
    problem = manager_problem(env)
    if problem is not None:
        raise unreachable(problem)
    return _launchd_install(env) if kind == "launchd" else _systemd_install(env)


def uninstall(env: Env, kind: str) -> Plan:
    """The plan that uninstalls the service."""
    return _launchd_uninstall(env) if kind == "launchd" else _systemd_uninstall(env)


# -- launchd ------------------------------------------------------------------
def _target(env: Env) -> str:
    return f"gui/{env.uid}/{LABEL}"


def _launchd_state(env: Env, path: Path, installed: bool) -> State:
    problem = manager_problem(env)
    if problem is not None:
        return State("launchd", path, installed, UNKNOWN, problem=problem)
    done = query(env, ["launchctl", "print", _target(env)])
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


def _launchd_install(env: Env) -> Plan:
    path = plist_path(env)
    current = _launchd_state(env, path, path.is_file())
    actions = [
        Action("mkdir", str(log_dir(env))),
        Action("write", str(path), plist_bytes(env, daemon_command()).decode()),
    ]
    # bootstrap refuses a label that is already loaded, and a re-install must
    # leave this installation's code running: a loaded agent is booted out first.
    if _loaded(env):
        actions.append(run_action("launchctl", "bootout", _target(env)))
    bootstrap = f"launchctl bootstrap gui/{env.uid} {shlex.quote(str(path))}"
    warning = _foreign_warning(env, current, bootstrap)
    if warning:
        return Plan(actions + warning)
    actions += [
        # A `launchctl disable` from earlier would make bootstrap fail.
        run_action("launchctl", "enable", _target(env)),
        run_action("launchctl", "bootstrap", f"gui/{env.uid}", str(path)),
    ]
    undo = None if current.installed else lambda: [Action("remove", str(path))]
    return Plan(actions, undo=undo)


def _loaded(env: Env) -> bool:
    done = query(env, ["launchctl", "print", _target(env)])
    return done is not None and done.returncode == 0


def _launchd_uninstall(env: Env) -> Plan:
    path = plist_path(env)
    problem = manager_problem(env)
    actions: list[Action] = []
    if problem is None and _loaded(env):
        actions.append(run_action("launchctl", "bootout", _target(env)))
    if path.is_file():
        actions.append(Action("remove", str(path)))
    if not actions:
        return _not_installed(path)
    if problem is not None:
        actions.append(
            Action("note", f"no service manager answers here ({problem}): nothing was stopped")
        )
    actions.append(Action("note", f"logs are kept in {log_dir(env)}"))
    return Plan(actions + _trash_note(env), keep_going=True)


# -- systemd ------------------------------------------------------------------
def _properties(env: Env) -> dict[str, str] | str:
    """The unit's properties from `systemctl --user show`, or why they cannot be had."""
    problem = manager_problem(env)
    if problem is not None:
        return problem
    argv = ["systemctl", "--user", "show", UNIT_NAME, "-p", _SYSTEMD_PROPS]
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


def _systemd_state(env: Env, path: Path, installed: bool) -> State:
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
    why = (
        "lingering is off for this user"
        if lingers is False
        else "could not ask loginctl whether lingering is on"
    )
    return [
        Action(
            "note",
            f"{why}: the service runs only while you are logged in. To keep it running "
            f"after you log out: loginctl enable-linger {shlex.quote(user_name(env))}",
        )
    ]


def _systemd_install(env: Env) -> Plan:
    path = unit_path(env)
    current = _systemd_state(env, path, path.is_file())
    warning = _foreign_warning(env, current, f"systemctl --user start {UNIT_NAME}")
    actions = [
        Action("write", str(path), unit_text(env, daemon_command())),
        run_action("systemctl", "--user", "daemon-reload"),
    ]
    if warning:
        actions.append(run_action("systemctl", "--user", "enable", UNIT_NAME))
        if current.state in (STARTING, RESTARTING):
            actions.append(run_action("systemctl", "--user", "stop", UNIT_NAME))
        actions += warning
    else:
        actions.append(run_action("systemctl", "--user", "enable", "--now", UNIT_NAME))
        # enable --now leaves a running daemon as it is; a re-install (after an
        # upgrade, or with a changed unit) must leave this installation's code running.
        if current.state == RUNNING:
            actions.append(run_action("systemctl", "--user", "restart", UNIT_NAME))
    # A fresh install that fails is taken back whole; a re-install keeps the
    # unit that was there (it is what the user had, and doctor reports it).
    undo = None if current.installed else lambda: _removal(env)
    return Plan(actions + _linger_note(env), undo=undo)


def _removal(env: Env) -> list[Action]:
    """Stop and disable the unit, forget a failed state (systemd keeps a
    failed unit listed after its file is gone; only a loaded unit can be
    reset, and only a failed one stays loaded), remove the file."""
    path = unit_path(env)
    actions = [run_action("systemctl", "--user", "disable", "--now", UNIT_NAME)]
    if _systemd_state(env, path, True).state in (FAILED, RESTARTING):
        actions.append(run_action("systemctl", "--user", "reset-failed", UNIT_NAME))
    actions.append(Action("remove", str(path)))
    return actions + [run_action("systemctl", "--user", "daemon-reload")]


def _systemd_uninstall(env: Env) -> Plan:
    path = unit_path(env)
    written = [p for p in (path, wants_link(env)) if p.is_file() or p.is_symlink()]
    if not written:
        return _not_installed(path)
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
    return Plan(actions + _trash_note(env), keep_going=True)
