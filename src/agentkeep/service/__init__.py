"""The user's service: the systemd user unit or launchd agent that runs `agentkeep serve`.

`install` and `uninstall` are plans of small actions (service/apply.py), so
that `--dry-run` prints exactly what a real run does. Where no service
manager answers, `install` refuses before it writes anything and `uninstall`
removes the files alone; a fresh install that fails half way is undone.
`AGENTKEEP_SERVICE_KIND=systemd|launchd` forces the manager (default:
launchd on macOS, else systemd); `systemd/` and `launchd/` in the source
tree hold service/files.py's templates rendered for an example user.
"""

from __future__ import annotations

from typing import Any

from agentkeep.errors import ManagerUnreachable, ServiceError
from agentkeep.paths import Env
from agentkeep.service import managers
from agentkeep.service.apply import Plan, Step, apply, describe, exit_code
from agentkeep.service.files import (
    ALREADY_RUNNING_EXIT,
    LABEL,
    RUN_BY_SERVICE,
    UNIT_NAME,
    daemon_command,
    log_dir,
    platform_kind,
    plist_bytes,
    plist_path,
    second_daemon_exit,
    service_path,
    unit_path,
    unit_text,
    wants_link,
)
from agentkeep.service.state import (
    NOT_INSTALLED,
    RUNNING,
    STARTING,
    UNKNOWN,
    State,
    user_name,
)

# The names imported above are the package's: its callers use them from here.


def status(env: Env) -> State:
    """The service of this user as its manager sees it (asks nothing when
    the unit or plist is not installed)."""
    path = service_path(env)
    kind = platform_kind(env)
    if not path.is_file():
        return State(kind, path, False, NOT_INSTALLED)
    return managers.state_of(env, kind, path)


def install_plan(env: Env) -> Plan:
    """Write the unit (or plist) for this installation and start it now and
    at login. Raises ManagerUnreachable, before anything is done, where no
    user service manager answers."""
    return managers.install(env, platform_kind(env))


def uninstall_plan(env: Env) -> Plan:
    """Undo install: stop and disable the service, remove its files (the
    files alone where no service manager answers)."""
    return managers.uninstall(env, platform_kind(env))


def plan_json(
    verb: str, env: Env, steps: list[Step], *, dry_run: bool, error: str | None = None
) -> dict[str, Any]:
    """`service install|uninstall --json`: the steps, and whether all were done."""
    return {
        "action": verb,
        "kind": platform_kind(env),
        "unit_path": str(service_path(env)),
        "dry_run": dry_run,
        "ok": error is None and exit_code(steps) == 0,
        "error": error,
        "steps": [s.to_json() for s in steps],
    }
