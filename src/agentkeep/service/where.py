"""Which service manager this user has, and where the service's files are."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agentkeep.errors import ServiceError
from agentkeep.paths import Env

UNIT_NAME = "agentkeep.service"
LABEL = "dev.agentkeep.daemon"
KINDS = ("systemd", "launchd")


def platform_kind(env: Env | None = None) -> str:
    """ "systemd" or "launchd": AGENTKEEP_SERVICE_KIND when set, else by platform."""
    forced = env.get("AGENTKEEP_SERVICE_KIND") if env else os.environ.get("AGENTKEEP_SERVICE_KIND")
    if forced:
        if forced not in KINDS:
            raise ServiceError(f"AGENTKEEP_SERVICE_KIND={forced!r}: must be systemd or launchd")
        return forced
    return "launchd" if sys.platform == "darwin" else "systemd"


def unit_path(env: Env) -> Path:
    return env.xdg("XDG_CONFIG_HOME", ".config") / "systemd" / "user" / UNIT_NAME


def plist_path(env: Env) -> Path:
    return env.home / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def log_dir(env: Env) -> Path:
    return env.home / "Library" / "Logs" / "agentkeep"


def service_path(env: Env) -> Path:
    return plist_path(env) if platform_kind(env) == "launchd" else unit_path(env)


def wants_link(env: Env) -> Path:
    """The link `systemctl enable` makes for WantedBy=default.target."""
    return unit_path(env).parent / "default.target.wants" / UNIT_NAME
