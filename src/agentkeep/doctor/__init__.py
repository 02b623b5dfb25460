"""`agentkeep doctor`: what stands in the way, each problem with its fix.

Every check only reads (nothing here creates the state dir or the index),
and a check that cannot be made says so instead of raising. The agents' own
clean-up settings are checked in doctor/agents.py, the rest here.
`AGENTKEEP_INOTIFY_MAX` replaces the kernel's max_user_watches in the
watch-budget check.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from agentkeep import adapters, client, dependencies, service, watchplan
from agentkeep.agents import agent_roots
from agentkeep.config import Config, ConfigError, defaults, load_config
from agentkeep.doctor.agents import check_claude, check_gemini, check_qwen
from agentkeep.doctor.check import Check
from agentkeep.errors import ConfigInvalid, Failed, Failure, ServiceError
from agentkeep.index import recorded_unreadable
from agentkeep.paths import Env
from agentkeep.prune.pause import read_pause

log = structlog.get_logger("agentkeep.doctor")


def _load(env: Env) -> tuple[Config, ConfigError | None]:
    """The user's config, or (when it is bad) the defaults with the error:
    the other checks still need to know which agents there are."""
    roots = agent_roots(env)
    try:
        config = load_config(
            env.config_path, home=env.home, state_dir=env.state_dir, agent_roots=roots
        )
    except ConfigError as exc:
        return defaults(env.config_path), exc
    return config, None


def _daemon(env: Env) -> dict[str, Any] | str:
    """The daemon's own `status`, or why none could be had."""
    try:
        answer = client.call(env, "status", {}, timeout=5.0)
    except client.NoDaemon as exc:
        return str(exc)
    except Failure as exc:
        return f"the daemon answered with an error: {exc.message}"
    return answer if isinstance(answer, dict) else f"unexpected answer: {answer!r}"


def _check_config(env: Env, config: Config, error: ConfigError | None) -> Check:
    path = env.config_path
    if error is not None:
        detail = f"{error}; until it is fixed the daemon prunes nothing"
        return Check("config", False, detail, f"correct {error.key or 'the file'} in {path}")
    turn_on = f'One line in {path} turns pruning on: retention = "30d"'
    if not config.exists:
        return Check("config", True, f"no config file: nothing is ever pruned. {turn_on}")
    if not config.has_retention():
        return Check("config", True, f"{path} sets no retention: nothing is ever pruned. {turn_on}")
    per_agent = ", ".join(f"{a} {t}" for a, t in sorted(config.agent_retention_text.items()))
    detail = f"{path}: retention {config.retention_text or 'none'}"
    return Check("config", True, detail + (f" ({per_agent})" if per_agent else ""))


# Room a prune needs in the state dir: its journal, the trash's entries,
# the index's growth.
_STATE_ROOM = 1 << 20


def _check_state_disk(env: Env) -> Check:
    """Whether the disk holding the state dir has room to journal removals."""
    where = env.state_dir if env.state_dir.exists() else env.state_dir.parent
    try:
        st = os.statvfs(where)
    except OSError as exc:
        return Check("state disk", False, f"cannot tell the room left at {where}: {exc}")
    free = st.f_bavail * st.f_frsize
    if free < _STATE_ROOM:
        detail = f"the disk holding {where} is full ({free // 1024} kB free): removals cannot be"
        fix = "free some space on that disk (`agentkeep trash --empty` frees the trash)"
        return Check("state disk", False, detail + " journaled, so nothing is pruned", fix)
    return Check("state disk", True, f"{free // (1 << 20)} MB free at {where}")


def _check_dependencies() -> Check:
    wrong = dependencies.problems()
    if not wrong:
        return Check("dependencies", True, "every dependency is of a tested version")
    return Check("dependencies", False, "; ".join(wrong), "reinstall: sh deploy/install.sh")


def run_checks(env: Env) -> list[Check]:
    """Every check, in the order they are shown."""
    config, error = _load(env)
    daemon = _daemon(env)
    return [
        _check_dependencies(),
        _check_config(env, config, error),
        _check_watches(env, config, daemon),
        _check_service(env, daemon),
        _check_socket(env, daemon),
        _check_pause(env),
        _check_state_disk(env),
        check_claude(env, config),
        check_gemini(env, config),
        _check_listing(env, config),
        check_qwen(env, config),
    ]


def _check_listing(env: Env, config: Config) -> Check:
    """The agents' directories that cannot be listed now: the sessions that
    may have entries there are kept unsafe, never pruned."""
    recorded = recorded_unreadable(env.state_dir / "index.sqlite")
    found = adapters.unreadable(env, config, recorded)
    if not found:
        return Check("listing", True, "every agent directory can be listed")
    places = "; ".join(f"{a}: {p} ({why})" for a, ps in found.items() for p, why in ps.items())
    detail = f"cannot list {places}: the sessions that may have entries there are kept"
    fix = (
        "let yourself list it again (chmod u+rx, or give it back with chown);"
        " the daemon's next reconcile, or `agentkeep scan`, lists them whole"
    )
    return Check("listing", False, detail + " (unsafe), never pruned", fix)


def exit_code(checks: list[Check]) -> int:
    """A bad config first (what to fix first), then any other problem."""
    if any(c.name == "config" and not c.ok for c in checks):
        return ConfigInvalid.exit
    return 0 if all(c.ok for c in checks) else Failed.exit


def render(checks: list[Check], out: Callable[[str], None]) -> None:
    """The checks as lines for a person, and a last line saying how many failed."""
    for check in checks:
        out(f"{'ok' if check.ok else 'PROBLEM':<8} {check.name}: {check.detail}")
        if check.fix and not check.ok:
            out(f"{'':<8} fix: {check.fix}")
    problems = sum(not c.ok for c in checks)
    out("all is well" if not problems else f"{problems} problem{'s' * (problems > 1)} found")


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


def _check_watches(env: Env, config: Config, daemon: dict[str, Any] | str) -> Check:
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


def _check_service(env: Env, daemon: dict[str, Any] | str) -> Check:
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


def _check_socket(env: Env, daemon: dict[str, Any] | str) -> Check:
    """Whether a daemon answers on the socket."""
    if isinstance(daemon, str):
        fix = "start the daemon: agentkeep service install (or run `agentkeep serve`)"
        return Check("socket", False, daemon, fix)
    return Check("socket", True, f"daemon pid {daemon.get('pid')} answers on {env.socket_path}")


def _check_pause(env: Env) -> Check:
    """Whether the scheduled prune paused itself."""
    pause = read_pause(env.state_dir)
    if pause is None:
        return Check("pause", True, "the scheduled prune is not paused")
    fix = "check `agentkeep prune --dry-run`, then run `agentkeep prune` once to lift the pause"
    return Check("pause", False, f"the scheduled prune paused itself: {pause}", fix)
