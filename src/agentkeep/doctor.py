"""`agentkeep doctor`: what stands in the way, each problem with its fix.

Every check only reads: the config, the inotify budget, the service
manager's view, the daemon's `status` answer, the state dir's pause file,
and the agents' own settings files. Nothing here creates the state dir or
the index. A check that cannot be made says so instead of raising.

`AGENTKEEP_INOTIFY_MAX` replaces the kernel's max_user_watches in the
watch-budget check (a seam for tests, and a way to ask "would N be enough?").
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep import adapters, client, dependencies, service, watchplan
from agentkeep.adapters.claude import ClaudeAdapter
from agentkeep.adapters.gemini import GeminiAdapter
from agentkeep.agents import AGENTS
from agentkeep.config import (
    DEFAULT_MAX_REMOVALS,
    DEFAULT_PRUNE_INTERVAL,
    DEFAULT_TRASH,
    Config,
    ConfigError,
    load_config,
)
from agentkeep.disk import read_regular
from agentkeep.index import recorded_unreadable
from agentkeep.paths import Env
from agentkeep.prune import read_pause

log = structlog.get_logger("agentkeep.doctor")

DAY = 86400.0
# Claude Code's sweep when settings.json does not set cleanupPeriodDays.
CLAUDE_DEFAULT_DAYS = 30
# Gemini CLI's general.sessionRetention when the settings do not say
# (settingsSchema.ts, on since 0.33), and how it reads a period.
GEMINI_DEFAULT_RETENTION: dict[str, Any] = {"enabled": True, "maxAge": "30d"}
GEMINI_AGE = re.compile(r"([0-9]+)([hdwm])")
GEMINI_UNITS = {"h": 3600.0, "d": DAY, "w": 7 * DAY, "m": 30 * DAY}
SOCKET_TIMEOUT = 5.0


@dataclass
class Check:
    """One thing looked at: `ok`, what was found, and (when not ok) the fix."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


# -- inputs --------------------------------------------------------------


def _load(env: Env) -> tuple[Config, ConfigError | None]:
    """The user's config, or (when it is bad) the defaults with the error:
    the other checks still need to know which agents there are."""
    roots = adapters.agent_roots(env)
    try:
        config = load_config(
            env.config_path, home=env.home, state_dir=env.state_dir, agent_roots=roots
        )
    except ConfigError as exc:
        defaults = Config(
            path=env.config_path,
            exists=False,
            retention=None,
            retention_text=None,
            agent_retention={},
            agent_retention_text={},
            prune_interval=DEFAULT_PRUNE_INTERVAL,
            max_removals=DEFAULT_MAX_REMOVALS,
            trash=DEFAULT_TRASH,
            enabled=AGENTS,
            stores=(),
        )
        return defaults, exc
    return config, None


def _daemon(env: Env) -> dict[str, Any] | str:
    """The daemon's own `status`, or why none could be had."""
    try:
        answer = client.call(env, "status", {}, timeout=SOCKET_TIMEOUT)
    except client.NoDaemon as exc:
        return str(exc)
    except client.RemoteError as exc:
        return f"the daemon answered with an error: {exc.message}"
    return answer if isinstance(answer, dict) else f"unexpected answer: {answer!r}"


def _settings(path: Path, *, comments: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """An agent's settings.json: (data, None), (None, None) when absent,
    (None, why) when it cannot be read as a JSON object. With `comments`,
    `//` and `/* */` comments are allowed, as Gemini CLI allows them."""
    try:
        text = read_regular(path).decode("utf-8")  # never hangs on a FIFO
        data = json.loads(_JSON_COMMENT.sub(_uncomment, text) if comments else text)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        log.warning("agent settings unreadable", path=str(path), error=str(exc))
        return None, f"{path} cannot be read: {exc}"
    if not isinstance(data, dict):
        return None, f"{path} is not a JSON object"
    return data, None


# A JSON string (kept whole, so that a `//` inside one is no comment) or a
# comment outside strings.
_JSON_COMMENT = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)


def _uncomment(match: re.Match[str]) -> str:
    return match[0] if match[0].startswith('"') else " "


def _text(seconds: float) -> str:
    if seconds % DAY == 0:
        return f"{int(seconds // DAY)}d"
    return f"{int(seconds // 3600)}h"


def _retention_text(config: Config, agent: str) -> str | None:
    text = config.agent_retention_text.get(agent, config.retention_text)
    seconds = config.retention_for(agent)
    return text if text is not None else (None if seconds is None else _text(seconds))


# -- checks --------------------------------------------------------------


def check_config(env: Env, config: Config, error: ConfigError | None) -> Check:
    path = env.config_path
    if error is not None:
        return Check(
            "config",
            False,
            f"{error}; until it is fixed the daemon prunes nothing",
            f"correct {error.key or 'the file'} in {path}",
        )
    turn_on = f'One line in {path} turns pruning on: retention = "30d"'
    if not config.exists:
        return Check("config", True, f"no config file: nothing is ever pruned. {turn_on}")
    if not config.has_retention():
        return Check("config", True, f"{path} sets no retention: nothing is ever pruned. {turn_on}")
    per_agent = ", ".join(f"{a} {t}" for a, t in sorted(config.agent_retention_text.items()))
    retention = config.retention_text or "none"
    return Check(
        "config",
        True,
        f"{path}: retention {retention}" + (f" ({per_agent})" if per_agent else ""),
    )


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
    budget = watchplan.budget_for(env.environ)
    if budget is None:
        return Check("watches", True, "no inotify here: the platform's file events are used")
    limit, used = budget
    need = len(_watch_targets(env, config))
    watching = daemon.get("watch") if isinstance(daemon, dict) else None
    mode = watching.get("mode") if isinstance(watching, dict) else None
    ended = watching.get("ended") if isinstance(watching, dict) else None
    if ended and mode != watchplan.INOTIFY:
        return Check(
            "watches",
            False,
            f"the daemon's watching ended: {ended}; every root is rescanned instead",
            "look at the daemon's log, then restart it: systemctl --user restart agentkeep",
        )
    if env.get("AGENTKEEP_INOTIFY_MAX") is None and mode is not None:
        # The running daemon's watches are already in `used`: its word counts.
        if mode == watchplan.INOTIFY:
            again = f"; its watching ended and was started again: {ended}" if ended else ""
            return Check(
                "watches", True, f"the daemon watches every directory (limit {limit}){again}"
            )
        return Check(
            "watches",
            False,
            f"the daemon could not watch everything (watch mode {mode}); "
            f"{need} directories to watch, {used} of {limit} inotify watches in use",
            _SYSCTL_FIX,
        )
    # The daemon never takes the last tenth of the budget (editors need watches too).
    free = limit - used - int(limit * watchplan.RESERVE_FRACTION)
    detail = f"{need} directories to watch; {used} of {limit} inotify watches in use"
    if need <= free:
        return Check("watches", True, f"{detail}, {free} free for agentkeep")
    return Check(
        "watches",
        False,
        f"{detail}: only {max(free, 0)} free for agentkeep, so it falls back to rescans",
        _SYSCTL_FIX,
    )


def check_service(env: Env, daemon: dict[str, Any] | str) -> Check:
    try:
        state = service.status(env)
    except service.ServiceError as exc:
        return Check("service", False, str(exc), "unset AGENTKEEP_SERVICE_KIND")
    path = state.unit_path
    if not state.installed:
        return Check(
            "service", False, f"not installed ({path} does not exist)", "agentkeep service install"
        )
    if state.state == service.UNKNOWN:
        return Check(
            "service",
            False,
            f"installed at {path}, but no user service manager answers here ({state.problem})",
            "run `agentkeep doctor` from your own login session; where there is no service "
            "manager, run `agentkeep serve` yourself and remove the unit: "
            "agentkeep service uninstall",
        )
    other = daemon.get("pid") if isinstance(daemon, dict) else None
    if isinstance(other, int) and other != state.pid and not state.active:
        return Check(
            "service",
            False,
            f"installed at {path}, but {state.doing()}: another "
            f"agentkeep daemon (pid {other}), not run by the service, holds the state dir, "
            "so the service's own cannot start",
            f"stop pid {other}, then: {_start_command(env)} "
            "(or keep that one, and remove the service: agentkeep service uninstall)",
        )
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
    return Check(
        "service",
        False,
        detail,
        f"why: journalctl --user -u {unit} -n 50; once mended: "
        f"systemctl --user reset-failed {unit} && systemctl --user start {unit}",
    )


def check_socket(env: Env, daemon: dict[str, Any] | str) -> Check:
    if isinstance(daemon, str):
        return Check(
            "socket",
            False,
            daemon,
            "start the daemon: agentkeep service install (or run `agentkeep serve`)",
        )
    return Check("socket", True, f"daemon pid {daemon.get('pid')} answers on {env.socket_path}")


def check_pause(env: Env) -> Check:
    pause = read_pause(env.state_dir)
    if pause is None:
        return Check("pause", True, "the scheduled prune is not paused")
    return Check(
        "pause",
        False,
        f"the scheduled prune paused itself: {pause}",
        "check `agentkeep prune --dry-run`, then run `agentkeep prune` once to lift the pause",
    )


def _claude_settings(env: Env) -> Path:
    config_dir = next(r.path for r in ClaudeAdapter(env).roots() if r.kind == "config")
    return config_dir / "settings.json"


def _claude_days(data: dict[str, Any] | None) -> tuple[float | None, str]:
    """Claude's sweep period and the setting in words; None when Claude
    skips its sweep (2.1.x rejects a value under 1 and then does not sweep)."""
    if "cleanupPeriodDays" not in (data or {}):
        return CLAUDE_DEFAULT_DAYS, f"cleanupPeriodDays is not set (default {CLAUDE_DEFAULT_DAYS})"
    value = (data or {})["cleanupPeriodDays"]
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
        return float(value), f"cleanupPeriodDays is {value:g}"
    return None, f"cleanupPeriodDays is {json.dumps(value)}"


def check_claude(env: Env, config: Config) -> Check:
    path = _claude_settings(env)
    data, unreadable = _settings(path)
    days, setting = _claude_days(data)
    if unreadable:
        days = CLAUDE_DEFAULT_DAYS
        setting = f"{unreadable}; assuming the default {CLAUDE_DEFAULT_DAYS}"
    if days is None:
        return Check(
            "claude",
            False,
            f"{setting}: Claude Code 2.1 rejects it and skips its own clean-up, and older"
            " versions stop writing transcripts at all",
            f'set "cleanupPeriodDays": 99999 in {path} to leave the clean-up to agentkeep',
        )
    sweep = f"Claude Code deletes sessions idle over {days:g} days when it starts ({setting})"
    if "claude" not in config.enabled:
        return Check("claude", True, f"{sweep}; agentkeep does not manage Claude (not in enabled)")
    retention = config.retention_for("claude")
    if retention is None:
        return Check(
            "claude",
            True,
            f"{sweep}; it is the only clean-up of Claude sessions (agentkeep has no retention)",
        )
    text = _retention_text(config, "claude")
    if days * DAY < retention:
        needed = math.ceil(retention / DAY)
        return Check(
            "claude",
            False,
            f"{sweep}: Claude deletes first, before agentkeep's {text} retention, "
            "live and resumable sessions included",
            f'set "cleanupPeriodDays": {needed} (or more) in {path}, so agentkeep decides',
        )
    return Check("claude", True, f"{sweep}, after agentkeep's {text} retention")


def _gemini_policy(data: dict[str, Any] | None) -> dict[str, Any]:
    """general.sessionRetention as the user's settings set it."""
    general = (data or {}).get("general")
    policy = general.get("sessionRetention") if isinstance(general, dict) else None
    return policy if isinstance(policy, dict) else {}


def _gemini_off(policy: dict[str, Any]) -> str | None:
    """Why Gemini's own clean-up does not run under `policy`, or None. It
    runs when `enabled` is truthy (as JavaScript has it) and the policy
    validates: maxAge a positive <n>h|d|w|m, no shorter than minRetention,
    or a maxCount of 1 or more."""
    enabled = policy.get("enabled")
    if enabled in (False, None, 0, ""):
        return "general.sessionRetention.enabled is false"
    age, count = _gemini_age(policy.get("maxAge")), policy.get("maxCount")
    if policy.get("maxAge") and age is None:
        return f"its maxAge {policy.get('maxAge')!r} is not valid, so it does not run"
    floor = _gemini_age(policy.get("minRetention")) or DAY
    if age is not None and age < floor:
        return "its maxAge is below its minRetention, so it does not run"
    if count is not None and not (isinstance(count, int | float) and count >= 1):
        return "its maxCount is below 1, so it does not run"
    if age is None and count is None:
        return "it has neither maxAge nor maxCount, so it does not run"
    return None


def _gemini_age(value: object) -> float | None:
    match = GEMINI_AGE.fullmatch(value) if isinstance(value, str) else None
    if match is None or int(match[1]) == 0:
        return None
    return int(match[1]) * GEMINI_UNITS[match[2]]


def check_gemini(env: Env, config: Config) -> Check:
    path = GeminiAdapter(env).root / "settings.json"
    data, unreadable = _settings(path, comments=True)
    if unreadable:
        return Check(
            "gemini",
            True,
            f"{unreadable}; Gemini CLI refuses to start with it, so its own clean-up cannot run",
        )
    stated = _gemini_policy(data)
    # As Gemini CLI reads it: its defaults (on, 30 days, since 0.33) under
    # what the settings say.
    policy = {**GEMINI_DEFAULT_RETENTION, **stated}
    off = _gemini_off(policy)
    if off is not None:
        return Check("gemini", True, f"Gemini CLI's own session clean-up is off ({off})")
    age, count = policy.get("maxAge"), policy.get("maxCount")
    rule = " and ".join(
        [*([f"idle over {age}"] if age else []), *([f"past the newest {count:g}"] if count else [])]
    )
    setting = "general.sessionRetention" + ("" if "enabled" in stated else ", on by default")
    sweep = (
        f"Gemini CLI deletes the sessions of the project it starts in {rule} ({setting}), "
        "and, at any age, each chat it cannot resume with every chat of the same 8-character "
        "id: a resume in a later minute leaves such a chat, so the resumed session goes too"
    )
    if "gemini" not in config.enabled:
        return Check("gemini", True, f"{sweep}; agentkeep does not manage Gemini")
    fix = f"set general.sessionRetention.enabled to false in {path}, so agentkeep decides"
    if config.retention_for("gemini") is None:
        fix += f' (and give agentkeep a retention: retention = "30d" in {env.config_path})'
    return Check(
        "gemini",
        False,
        f"{sweep}: it has deleted resumed sessions, and knows nothing of agentkeep's leases",
        fix,
    )


# Room a prune needs in the state dir: its journal, the trash's entries,
# the index's growth.
STATE_ROOM = 1 << 20


def check_state_disk(env: Env) -> Check:
    """Whether the disk holding the state dir has room to journal removals."""
    where = env.state_dir if env.state_dir.exists() else env.state_dir.parent
    try:
        st = os.statvfs(where)
    except OSError as exc:
        return Check("state disk", False, f"cannot tell the room left at {where}: {exc}")
    free = st.f_bavail * st.f_frsize
    if free < STATE_ROOM:
        return Check(
            "state disk",
            False,
            f"the disk holding {where} is full ({free // 1024} kB free): removals cannot be"
            " journaled, so nothing is pruned",
            "free some space on that disk (`agentkeep trash --empty` frees the trash)",
        )
    return Check("state disk", True, f"{free // (1 << 20)} MB free at {where}")


def check_dependencies() -> Check:
    wrong = dependencies.problems()
    if not wrong:
        return Check("dependencies", True, "every dependency is of a tested version")
    return Check("dependencies", False, "; ".join(wrong), "reinstall: sh deploy/install.sh")


def check_listing(env: Env, config: Config) -> Check:
    """The agents' directories that cannot be listed now: the sessions that
    may have entries there are kept unsafe, never pruned."""
    recorded = recorded_unreadable(env.state_dir / "index.sqlite")
    found = adapters.unreadable(env, config, recorded)
    if not found:
        return Check("listing", True, "every agent directory can be listed")
    places = "; ".join(f"{a}: {p} ({why})" for a, ps in found.items() for p, why in ps.items())
    return Check(
        "listing",
        False,
        f"cannot list {places}: the sessions that may have entries there are kept"
        " (unsafe), never pruned",
        "let yourself list it again (chmod u+rx, or give it back with chown);"
        " the daemon's next reconcile, or `agentkeep scan`, lists them whole",
    )


def run_checks(env: Env) -> list[Check]:
    config, error = _load(env)
    daemon = _daemon(env)
    return [
        check_dependencies(),
        check_config(env, config, error),
        check_watches(env, config, daemon),
        check_service(env, daemon),
        check_socket(env, daemon),
        check_pause(env),
        check_state_disk(env),
        check_claude(env, config),
        check_gemini(env, config),
        check_listing(env, config),
    ]


def exit_code(checks: list[Check]) -> int:
    return 0 if all(c.ok for c in checks) else 1


def render(checks: list[Check], out: Callable[[str], None]) -> None:
    for check in checks:
        out(f"{'ok' if check.ok else 'PROBLEM':<8} {check.name}: {check.detail}")
        if check.fix and not check.ok:
            out(f"{'':<8} fix: {check.fix}")
    problems = sum(not c.ok for c in checks)
    out("all is well" if not problems else f"{problems} problem{'s' * (problems > 1)} found")
