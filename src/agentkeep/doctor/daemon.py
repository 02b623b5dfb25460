"""The daemon and its service: the inotify budget it watches with, the
service manager's view, the socket, and the scheduled prune's pause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from agentkeep import adapters, service, watchplan
from agentkeep.config import Config
from agentkeep.doctor.check import Check
from agentkeep.errors import ServiceError
from agentkeep.paths import Env
from agentkeep.prune.pause import read_pause

log = structlog.get_logger("agentkeep.doctor")


def _watch_targets(env: Env, config: Config) -> set[Path]:
    """The directories the daemon would watch, counted as it counts them."""
    targets: set[Path] = set()
    for agent, adapter in adapters.build(env, config).items():
        try:
            for group in watchplan.group_by_root(agent, adapter):
                targets |= group.targets
        except Exception as exc:
            log.warning("watch dirs unavailable", agent=agent, error=str(exc))
    return targets


_SYSCTL_FIX = (
    "raise the limit: echo fs.inotify.max_user_watches=524288 | "
    "sudo tee /etc/sysctl.d/90-agentkeep.conf && sudo sysctl --system "
    "(then restart the daemon). Without it agentkeep still works, by periodic rescans."
)


def check_watches(env: Env, config: Config, daemon: dict[str, Any] | str) -> Check:
    """Whether the inotify budget covers every directory the daemon watches."""
    budget = watchplan.budget_for(env.environ)
    if budget is None:
        return Check("watches", True, "no inotify here: the platform's file events are used")
    limit, used = budget
    need = len(_watch_targets(env, config))
    watching = daemon.get("watch") if isinstance(daemon, dict) else None
    mode = watching.get("mode") if isinstance(watching, dict) else None
    ended = watching.get("ended") if isinstance(watching, dict) else None
    if ended and mode != watchplan.INOTIFY:
        detail = f"the daemon's watching ended: {ended}; every root is rescanned instead"
        fix = "look at the daemon's log, then restart it: systemctl --user restart agentkeep"
        return Check("watches", False, detail, fix)
    if env.get("AGENTKEEP_INOTIFY_MAX") is None and mode is not None:
        # The running daemon's watches are already in `used`: its word counts.
        if mode == watchplan.INOTIFY:
            again = f"; its watching ended and was started again: {ended}" if ended else ""
            detail = f"the daemon watches every directory (limit {limit}){again}"
            return Check("watches", True, detail)
        detail = (
            f"the daemon could not watch everything (watch mode {mode}); "
            f"{need} directories to watch, {used} of {limit} inotify watches in use"
        )
        return Check("watches", False, detail, _SYSCTL_FIX)
    # The daemon never takes the last tenth of the budget (editors need watches too).
    free = limit - used - int(limit * watchplan.RESERVE_FRACTION)
    detail = f"{need} directories to watch; {used} of {limit} inotify watches in use"
    if need <= free:
        return Check("watches", True, f"{detail}, {free} free for agentkeep")
    detail += f": only {max(free, 0)} free for agentkeep, so it falls back to rescans"
    return Check("watches", False, detail, _SYSCTL_FIX)


def check_service(env: Env, daemon: dict[str, Any] | str) -> Check:
    """Whether the service is installed and runs, and no other daemon stands in its way."""
    try:
        state = service.status(env)
    except ServiceError as exc:
        return Check("service", False, str(exc), "unset AGENTKEEP_SERVICE_KIND")
    path = state.unit_path
    if not state.installed:
        detail = f"not installed ({path} does not exist)"
        return Check("service", False, detail, "agentkeep service install")
    if state.state == service.UNKNOWN:
        detail = f"installed at {path}, but no user service manager answers here ({state.problem})"
        fix = (
            "run `agentkeep doctor` from your own login session; where there is no service "
            "manager, run `agentkeep serve` yourself and remove the unit: "
            "agentkeep service uninstall"
        )
        return Check("service", False, detail, fix)
    other = daemon.get("pid") if isinstance(daemon, dict) else None
    if isinstance(other, int) and other != state.pid and not state.active:
        detail = (
            f"installed at {path}, but {state.doing()}: another agentkeep daemon (pid {other}),"
            " not run by the service, holds the state dir, so the service's own cannot start"
        )
        fix = (
            f"stop pid {other}, then: {_start_command(env)} "
            "(or keep that one, and remove the service: agentkeep service uninstall)"
        )
        return Check("service", False, detail, fix)
    if state.failing:
        return _service_failing(env, state)
    if not state.active and state.state != service.STARTING:
        return Check("service", False, f"installed at {path}, but {state.doing()}", _start_fix(env))
    detail = f"installed at {path}: {state.doing()}"
    if state.linger is False:
        user = service.user_name(env)
        detail += (
            f"; it stops when you log out (lingering is off: "
            f"`loginctl enable-linger {user}` keeps it running)"
        )
    return Check("service", True, detail)


def _start_command(env: Env) -> str:
    if service.platform_kind(env) == "launchd":
        return f"launchctl kickstart gui/{env.uid}/{service.LABEL}"
    return f"systemctl --user start {service.UNIT_NAME}"


def _start_fix(env: Env) -> str:
    if service.platform_kind(env) == "launchd":
        return f"{_start_command(env)}; its logs: {service.log_dir(env)}"
    return f"{_start_command(env)}; why it stopped: journalctl --user -u {service.UNIT_NAME}"


def _service_failing(env: Env, state: service.State) -> Check:
    """A service that failed, or keeps failing to start (a restart loop)."""
    unit = service.UNIT_NAME
    detail = f"installed at {state.unit_path}, but {state.doing()}"
    if state.restarts:
        detail += ": the daemon keeps failing to start"
    if state.kind == "launchd":
        return Check("service", False, detail, _start_fix(env))
    fix = (
        f"why: journalctl --user -u {unit} -n 50; once mended: "
        f"systemctl --user reset-failed {unit} && systemctl --user start {unit}"
    )
    return Check("service", False, detail, fix)


def check_socket(env: Env, daemon: dict[str, Any] | str) -> Check:
    """Whether a daemon answers on the socket."""
    if isinstance(daemon, str):
        fix = "start the daemon: agentkeep service install (or run `agentkeep serve`)"
        return Check("socket", False, daemon, fix)
    return Check("socket", True, f"daemon pid {daemon.get('pid')} answers on {env.socket_path}")


def check_pause(env: Env) -> Check:
    """Whether the scheduled prune paused itself."""
    pause = read_pause(env.state_dir)
    if pause is None:
        return Check("pause", True, "the scheduled prune is not paused")
    fix = "check `agentkeep prune --dry-run`, then run `agentkeep prune` once to lift the pause"
    return Check("pause", False, f"the scheduled prune paused itself: {pause}", fix)
