"""The user's service: the systemd user unit or launchd agent that runs `agentkeep serve`.

`install`, `uninstall` and `status` are built as plans of small actions
(write a file, run a command, remove a file, say something) so that
`--dry-run` prints exactly what a real run does, and a real run does nothing
the dry run did not print. The unit and the plist are rendered from the two
templates in service/text.py, the one source of truth:
`systemd/agentkeep.service` and `launchd/dev.agentkeep.daemon.plist` in the
source tree are those templates rendered for an example user (a test keeps
them equal).

Every plan starts by asking the service manager whether it answers at all
(`systemctl --user show-environment`, `launchctl print gui/<uid>`): where
none does (a container, WSL without systemd, an ssh login without a user
bus) `install` refuses before it writes anything, and `uninstall` removes
the files install wrote without it, and says so. A fresh install that fails
half way is undone, so a failed install never leaves a unit behind.

`AGENTKEEP_SERVICE_KIND=systemd|launchd` forces the service manager (tests
render and plan launchd on Linux with it); by default macOS means launchd and
everything else systemd.

The modules, from the bottom: where (which manager, which files), text (the
unit and the plist), state (what the manager says), plan (the actions),
apply (carrying them out); systemd and launchd each build on those alone,
and this module picks one.
"""

from __future__ import annotations

from typing import Any

from agentkeep.errors import ManagerUnreachable, ServiceError
from agentkeep.paths import Env
from agentkeep.service import launchd, systemd
from agentkeep.service.apply import Step, apply, describe, exit_code
from agentkeep.service.plan import Plan
from agentkeep.service.state import (
    NOT_INSTALLED,
    RUNNING,
    STARTING,
    UNKNOWN,
    State,
    answering_daemon,
    user_name,
)
from agentkeep.service.text import (
    ALREADY_RUNNING_EXIT,
    RUN_BY_SERVICE,
    daemon_command,
    plist_bytes,
    second_daemon_exit,
    unit_text,
)
from agentkeep.service.where import (
    LABEL,
    UNIT_NAME,
    log_dir,
    platform_kind,
    plist_path,
    service_path,
    unit_path,
    wants_link,
)

# The names imported above are the package's: its callers use them from here.


def status(env: Env) -> State:
    """The service of this user as its manager sees it (asks nothing when
    the unit or plist is not installed)."""
    path = service_path(env)
    kind = platform_kind(env)
    if not path.is_file():
        return State(kind, path, False, NOT_INSTALLED)
    manager = launchd if kind == "launchd" else systemd
    return manager.state_of(env, path, True)


def install_plan(env: Env) -> Plan:
    """Write the unit (or plist) for this installation and start it now and
    at login. Raises ManagerUnreachable, before anything is done, where no
    user service manager answers."""
    return (launchd if platform_kind(env) == "launchd" else systemd).install(env)


def uninstall_plan(env: Env) -> Plan:
    """Undo install: stop and disable the service, remove its files (the
    files alone where no service manager answers)."""
    return (launchd if platform_kind(env) == "launchd" else systemd).uninstall(env)


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
