"""The two service managers: the systemd user unit (its state as
`systemctl --user show` gives it) and the launchd user agent (as
`launchctl print` gives it), and the plans that install and uninstall each."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

from agentkeep.paths import Env
from agentkeep.service import files
from agentkeep.service import state as st
from agentkeep.service.apply import Action, Plan, run_action

_SYSTEMD_STATES = {
    "active": st.RUNNING,
    "reloading": st.RUNNING,
    "deactivating": st.STOPPING,
    "failed": st.FAILED,
    "inactive": st.STOPPED,
}
_SYSTEMD_PROPS = (
    "ActiveState,SubState,Result,NRestarts,MainPID,ExecMainStatus,ActiveEnterTimestampMonotonic"
)


def _foreign_warning(env: Env, current: st.State, start: str) -> list[Action]:
    """Said when a daemon not run by the service answers on the socket."""
    pid = st.answering_daemon(env)
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


def state_of(env: Env, kind: str, path: Path) -> st.State:
    """The installed service as its manager sees it."""
    return (_launchd_state if kind == "launchd" else _systemd_state)(env, path, True)


def install(env: Env, kind: str) -> Plan:
    """The plan that installs the service; ManagerUnreachable where no
    manager answers."""
    problem = st.manager_problem(env)
    if problem is not None:
        raise st.unreachable(problem)
    return _launchd_install(env) if kind == "launchd" else _systemd_install(env)


def uninstall(env: Env, kind: str) -> Plan:
    """The plan that uninstalls the service."""
    return _launchd_uninstall(env) if kind == "launchd" else _systemd_uninstall(env)


# -- launchd ------------------------------------------------------------------
def _target(env: Env) -> str:
    return f"gui/{env.uid}/{files.LABEL}"


def _launchd_state(env: Env, path: Path, installed: bool) -> st.State:
    problem = st.manager_problem(env)
    if problem is not None:
        return st.State("launchd", path, installed, st.UNKNOWN, problem=problem)
    done = st.query(env, ["launchctl", "print", _target(env)])
    if done is None or done.returncode != 0:
        return st.State("launchd", path, installed, st.STOPPED)
    text = done.stdout
    running = re.search(r"^\s*state = running\s*$", text, re.M) is not None
    pid = re.search(r"^\s*pid = (\d+)\s*$", text, re.M)
    last = re.search(r"^\s*last exit code = (\d+)", text, re.M)
    return st.State(
        "launchd",
        path,
        installed,
        st.RUNNING if running else st.STOPPED,
        pid=int(pid.group(1)) if pid and running else None,
        exit_status=int(last.group(1)) if last else None,
    )


def _launchd_install(env: Env) -> Plan:
    path = files.plist_path(env)
    current = _launchd_state(env, path, path.is_file())
    actions = [
        Action("mkdir", str(files.log_dir(env))),
        Action("write", str(path), files.plist_bytes(env, files.daemon_command()).decode()),
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
    done = st.query(env, ["launchctl", "print", _target(env)])
    return done is not None and done.returncode == 0


def _launchd_uninstall(env: Env) -> Plan:
    path = files.plist_path(env)
    problem = st.manager_problem(env)
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
    actions.append(Action("note", f"logs are kept in {files.log_dir(env)}"))
    return Plan(actions + _trash_note(env), keep_going=True)


# -- systemd ------------------------------------------------------------------
def _properties(env: Env) -> dict[str, str] | str:
    """The unit's properties from `systemctl --user show`, or why they cannot be had."""
    problem = st.manager_problem(env)
    if problem is not None:
        return problem
    argv = ["systemctl", "--user", "show", files.UNIT_NAME, "-p", _SYSTEMD_PROPS]
    done = st.query(env, argv)
    if done is None or done.returncode != 0:
        detail = st.first_line(done.stderr) if done is not None else "could not be run"
        return f"`{shlex.join(argv)}`: {detail}"
    pairs = (line.partition("=") for line in done.stdout.splitlines())
    return {key: value for key, _, value in pairs}


def _since(text: str | None) -> float | None:
    """A CLOCK_MONOTONIC time in µs (as systemd gives it) as a POSIX time."""
    monotonic_usec = st.int_or_none(text)
    if not monotonic_usec:
        return None
    return time.time() - (time.monotonic() - monotonic_usec / 1e6)


def _systemd_state(env: Env, path: Path, installed: bool) -> st.State:
    props = _properties(env)
    if isinstance(props, str):
        return st.State("systemd", path, installed, st.UNKNOWN, problem=props)
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    if active == "activating":
        doing = st.RESTARTING if sub == "auto-restart" else st.STARTING
    else:
        doing = _SYSTEMD_STATES.get(active, active or st.UNKNOWN)
    running = doing in (st.RUNNING, st.STARTING, st.STOPPING)
    return st.State(
        "systemd",
        path,
        installed,
        doing,
        pid=(st.int_or_none(props.get("MainPID")) or None) if running else None,
        since=_since(props.get("ActiveEnterTimestampMonotonic")) if running else None,
        restarts=st.int_or_none(props.get("NRestarts")),
        result=props.get("Result") or None,
        exit_status=st.int_or_none(props.get("ExecMainStatus")),
        linger=st.linger(env),
    )


def _linger_note(env: Env) -> list[Action]:
    lingers = st.linger(env)
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
            f"after you log out: loginctl enable-linger {shlex.quote(st.user_name(env))}",
        )
    ]


def _systemd_install(env: Env) -> Plan:
    path = files.unit_path(env)
    current = _systemd_state(env, path, path.is_file())
    warning = _foreign_warning(env, current, f"systemctl --user start {files.UNIT_NAME}")
    actions = [
        Action("write", str(path), files.unit_text(env, files.daemon_command())),
        run_action("systemctl", "--user", "daemon-reload"),
    ]
    if warning:
        actions.append(run_action("systemctl", "--user", "enable", files.UNIT_NAME))
        if current.state in (st.STARTING, st.RESTARTING):
            actions.append(run_action("systemctl", "--user", "stop", files.UNIT_NAME))
        actions += warning
    else:
        actions.append(run_action("systemctl", "--user", "enable", "--now", files.UNIT_NAME))
        # enable --now leaves a running daemon as it is; a re-install (after an
        # upgrade, or with a changed unit) must leave this installation's code running.
        if current.state == st.RUNNING:
            actions.append(run_action("systemctl", "--user", "restart", files.UNIT_NAME))
    # A fresh install that fails is taken back whole; a re-install keeps the
    # unit that was there (it is what the user had, and doctor reports it).
    undo = None if current.installed else lambda: _removal(env)
    return Plan(actions + _linger_note(env), undo=undo)


def _removal(env: Env) -> list[Action]:
    """Stop and disable the unit, forget a failed state (systemd keeps a
    failed unit listed after its file is gone; only a loaded unit can be
    reset, and only a failed one stays loaded), remove the file."""
    path = files.unit_path(env)
    actions = [run_action("systemctl", "--user", "disable", "--now", files.UNIT_NAME)]
    if _systemd_state(env, path, True).state in (st.FAILED, st.RESTARTING):
        actions.append(run_action("systemctl", "--user", "reset-failed", files.UNIT_NAME))
    actions.append(Action("remove", str(path)))
    return actions + [run_action("systemctl", "--user", "daemon-reload")]


def _systemd_uninstall(env: Env) -> Plan:
    path = files.unit_path(env)
    written = [p for p in (path, files.wants_link(env)) if p.is_file() or p.is_symlink()]
    if not written:
        return _not_installed(path)
    problem = st.manager_problem(env)
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
