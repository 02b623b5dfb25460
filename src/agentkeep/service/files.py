"""Which service manager this user has, where the service's files are,
and what they hold: the unit and the plist, rendered for this installation
(its interpreter) and the installing shell's paths."""

from __future__ import annotations

import os
import plistlib
import re
import sys
from pathlib import Path
from string import Template

from agentkeep.errors import Failed, ServiceError
from agentkeep.paths import Env

UNIT_NAME = "agentkeep.service"
LABEL = "dev.agentkeep.daemon"


def platform_kind(env: Env | None = None) -> str:
    """ "systemd" or "launchd": AGENTKEEP_SERVICE_KIND when set, else by platform."""
    forced = env.get("AGENTKEEP_SERVICE_KIND") if env else os.environ.get("AGENTKEEP_SERVICE_KIND")
    if forced:
        if forced not in ("systemd", "launchd"):
            raise ServiceError(f"AGENTKEEP_SERVICE_KIND={forced!r}: must be systemd or launchd")
        return forced
    return "launchd" if sys.platform == "darwin" else "systemd"


def unit_path(env: Env) -> Path:
    """Where the systemd user unit is written."""
    return env.xdg("XDG_CONFIG_HOME", ".config") / "systemd" / "user" / UNIT_NAME


def plist_path(env: Env) -> Path:
    """Where the launchd agent's plist is written."""
    return env.home / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def log_dir(env: Env) -> Path:
    """Where launchd writes the daemon's stdout and stderr."""
    return env.home / "Library" / "Logs" / "agentkeep"


def service_path(env: Env) -> Path:
    """The unit or the plist, whichever this platform's manager reads."""
    return plist_path(env) if platform_kind(env) == "launchd" else unit_path(env)


def wants_link(env: Env) -> Path:
    """The link `systemctl enable` makes for WantedBy=default.target."""
    return unit_path(env).parent / "default.target.wants" / UNIT_NAME


# A daemon the unit runs (RUN_BY_SERVICE set) that finds another of this user
# running exits ALREADY_RUNNING_EXIT, which RestartPreventExitStatus= names:
# systemd leaves it failed instead of restarting it every few seconds.
RUN_BY_SERVICE = "AGENTKEEP_RUN_BY_SERVICE"
ALREADY_RUNNING_EXIT = 10

# The service manager starts the daemon with a sparse environment: the
# variables that decide where agentkeep and the agents keep their files (and
# PATH, for an agent's own command) are carried from the installing shell, so
# the daemon resolves the same view as the CLI, which compares the two.
CARRIED_VARS: tuple[str, ...] = (
    "HOME",
    "PATH",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
    "TMPDIR",
    "TMP",
    "TEMP",
    "AGENTKEEP_CONFIG",
    "AGENTKEEP_SOCKET",
    "AGENTKEEP_SYSTEM_TMP",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_TMPDIR",
    "CODEX_HOME",
    "GEMINI_CLI_HOME",
    "COPILOT_HOME",
    "QWEN_HOME",
    "QWEN_RUNTIME_DIR",
    "PI_CODING_AGENT_DIR",
    "PI_CODING_AGENT_SESSION_DIR",
)

_UNIT_TEMPLATE = Template("""\
# agentkeep: the session custodian for coding agents, as a systemd *user* unit.
# `agentkeep service install` writes this file with the installation's own
# interpreter and the installing shell's paths; re-run it (rather than
# editing here) after moving the installation or changing those paths.
[Unit]
Description=agentkeep: retention and clean-up of coding agents' sessions
# A daemon that keeps failing is given up on (the unit goes "failed", which
# `agentkeep doctor` reports) instead of being restarted every 5 s for ever.
StartLimitIntervalSec=300
StartLimitBurst=5

[Service]
# The daemon says READY=1 once it serves, and WATCHDOG=1 every WATCHDOG_USEC/2.
Type=notify
ExecStart=$exec_start
# SIGHUP makes the daemon read its config again.
ExecReload=kill -HUP $$MAINPID
Restart=on-failure
RestartSec=5s
# Another daemon of this user already runs: restarting would only fail again.
Environment=$run_by_service=1
RestartPreventExitStatus=$already_running
# The first scan of a large tree may take a while before READY=1.
TimeoutStartSec=300
WatchdogSec=60
# Everything agentkeep creates (index, journal, trash, socket) is the user's alone.
UMask=0077
# A custodian runs in the background: it yields the CPU and disk to the user's work.
Nice=10
IOSchedulingClass=best-effort
IOSchedulingPriority=7
# Only options enforced by seccomp or no_new_privs, which work in a user unit
# as they are. No ProtectHome=, PrivateTmp=, ProtectSystem= or any other
# namespace option: in a user unit each of them switches on PrivateUsers=,
# under which every file not the user's (root's /tmp among them) looks owned
# by "nobody", so the ownership checks on agents' roots would misjudge them.
# ProtectHome= would also hide the very directories agentkeep looks after, and
# PrivateTmp= would give the daemon an empty /tmp in place of the real one,
# where Claude Code keeps /tmp/claude-<uid>.
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
SystemCallArchitectures=native
$environment
[Install]
WantedBy=default.target
""")


def daemon_command() -> list[str]:
    """This installation's interpreter running the daemon. sys.executable is
    kept as it is, never resolved: a venv's python is a link to the base
    interpreter, and resolving it would run the daemon outside the venv."""
    exe = sys.executable
    if not exe or not os.path.isabs(exe):
        raise ServiceError(f"cannot tell this installation's interpreter (sys.executable={exe!r})")
    return [exe, "-m", "agentkeep", "serve"]


def _carried(env: Env) -> dict[str, str]:
    """The installing environment's CARRIED_VARS that are set."""
    return {name: value for name in CARRIED_VARS if (value := env.get(name)) is not None}


# Characters a unit-file word may hold without quotes.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def _no_control(value: str) -> str:
    if any(ord(c) < 0x20 or c == "\x7f" for c in value):
        raise ServiceError(f"{value!r}: a control character cannot be written into a unit file")
    return value


def _unit_word(word: str, *, expand_dollar: bool) -> str:
    """One word for a unit file: `%` specifiers escaped (and `$` where the
    line expands variables), then double-quoted when it holds anything else
    than plain characters, with C escapes for quotes and backslashes."""
    word = _no_control(word).replace("%", "%%")
    if expand_dollar:
        word = word.replace("$", "$$")
    if _PLAIN_WORD.fullmatch(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_text(env: Env, exe: list[str]) -> str:
    """The systemd user unit running `exe`, carrying the environment's paths."""
    if not exe or not os.path.isabs(exe[0]):
        raise ServiceError(f"ExecStart needs an absolute program path, not {exe[:1]!r}")
    environment = "".join(
        f"Environment={_unit_word(f'{name}={value}', expand_dollar=False)}\n"
        for name, value in _carried(env).items()
    )
    return _UNIT_TEMPLATE.substitute(
        exec_start=" ".join(_unit_word(w, expand_dollar=True) for w in exe),
        environment=environment,
        run_by_service=RUN_BY_SERVICE,
        already_running=ALREADY_RUNNING_EXIT,
    )


def plist_bytes(env: Env, exe: list[str]) -> bytes:
    """The launchd agent running `exe`, as XML; plistlib does every escape."""
    for word in exe:
        _no_control(word)
    logs = log_dir(env)
    plist = {
        "Label": LABEL,
        "ProgramArguments": list(exe),
        "RunAtLoad": True,
        # Restarted when it fails, left alone when it stops cleanly (SIGTERM).
        "KeepAlive": {"SuccessfulExit": False},
        "ProcessType": "Background",
        # Everything agentkeep creates is the user's alone (launchd's Umask is decimal).
        "Umask": 0o077,
        "EnvironmentVariables": _carried(env),
        "StandardOutPath": str(logs / "agentkeep.out.log"),
        "StandardErrorPath": str(logs / "agentkeep.err.log"),
    }
    return plistlib.dumps(plist, fmt=plistlib.FMT_XML, sort_keys=True)


def second_daemon_exit(env: Env) -> int:
    """What a daemon exits with when another of this user already runs (see
    RUN_BY_SERVICE): ALREADY_RUNNING_EXIT under the service, else 1 (Failed)."""
    return ALREADY_RUNNING_EXIT if env.get(RUN_BY_SERVICE) == "1" else Failed.exit
