"""`agentkeep doctor`: what stands in the way, each problem with its fix.

Every check only reads (nothing here creates the state dir or the index),
and a check that cannot be made says so instead of raising. The daemon and
its service are checked in doctor/daemon.py, the agents' own clean-up
settings in doctor/agents.py, the rest here. `AGENTKEEP_INOTIFY_MAX`
replaces the kernel's max_user_watches in the watch-budget check.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from agentkeep import adapters, client, dependencies
from agentkeep.config import Config, ConfigError, load_config
from agentkeep.doctor.agents import check_claude, check_gemini, check_qwen
from agentkeep.doctor.check import Check
from agentkeep.doctor.daemon import check_pause, check_service, check_socket, check_watches
from agentkeep.errors import ConfigInvalid, Failed, Failure
from agentkeep.index import recorded_unreadable
from agentkeep.paths import Env


def _load(env: Env) -> tuple[Config, ConfigError | None]:
    """The user's config, or (when it is bad) the defaults with the error:
    the other checks still need to know which agents there are."""
    roots = adapters.agent_roots(env)
    try:
        config = load_config(
            env.config_path, home=env.home, state_dir=env.state_dir, agent_roots=roots
        )
    except ConfigError as exc:
        return Config(env.config_path, exists=False), exc
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
        check_watches(env, config, daemon),
        check_service(env, daemon),
        check_socket(env, daemon),
        check_pause(env),
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
