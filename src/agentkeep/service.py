"""The user's service: the systemd user unit or launchd agent that runs `agentkeep serve`.

`install`, `uninstall` and `status` are built as plans of small actions
(write a file, run a command, remove a file, say something) so that
`--dry-run` prints exactly what a real run does, and a real run does nothing
the dry run did not print. The unit and the plist are rendered from the two
templates in this module, the one source of truth: `systemd/agentkeep.service`
and `launchd/dev.agentkeep.daemon.plist` in the source tree are those
templates rendered for an example user (a test keeps them equal).

`AGENTKEEP_SERVICE_KIND=systemd|launchd` forces the service manager (tests
render and plan launchd on Linux with it); by default macOS means launchd and
everything else systemd.
"""

from __future__ import annotations

import os
import plistlib
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import structlog

from agentkeep.paths import Env, ensure_private_dir

log = structlog.get_logger("agentkeep.service")

UNIT_NAME = "agentkeep.service"
LABEL = "dev.agentkeep.daemon"
KINDS = ("systemd", "launchd")

# The service manager starts the daemon with its own sparse environment. The
# variables that decide where agentkeep and the agents keep their files are
# carried from the installing shell into the unit, so the daemon resolves the
# same config, state dir, socket and agent roots as the CLI; otherwise the
# CLI, which compares the two, would never use the daemon. PATH goes too, so
# an agent's own command (`codex`, `opencode`) is found the same way.
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
)

_UNIT_TEMPLATE = Template("""\
# agentkeep: the session custodian for coding agents, as a systemd *user* unit.
# `agentkeep service install` writes this file with the installation's own
# interpreter and the installing shell's paths; re-run it (rather than
# editing here) after moving the installation or changing those paths.
[Unit]
Description=agentkeep: retention and clean-up of coding agents' sessions

[Service]
# The daemon says READY=1 once it serves, and WATCHDOG=1 every WATCHDOG_USEC/2.
Type=notify
ExecStart=$exec_start
Restart=on-failure
RestartSec=5s
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


class ServiceError(Exception):
    """The service cannot be described for this installation (a path a unit file cannot hold)."""


@dataclass(frozen=True)
class Action:
    """One step of a plan. `kind` is write, mkdir, run, remove or note; for
    run, `what` is the command line (shell-quoted), for the others a path or
    the text to say; `content` is what a write writes."""

    kind: str
    what: str
    content: str | None = None

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.what)


def _run_action(*argv: str) -> Action:
    return Action("run", shlex.join(argv))


# -- where ---------------------------------------------------------------


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


def daemon_command() -> list[str]:
    """This installation's interpreter running the daemon. sys.executable is
    kept as it is, never resolved: a venv's python is a link to the base
    interpreter, and resolving it would run the daemon outside the venv."""
    exe = sys.executable
    if not exe or not os.path.isabs(exe):
        raise ServiceError(f"cannot tell this installation's interpreter (sys.executable={exe!r})")
    return [exe, "-m", "agentkeep", "serve"]


def carried_environment(env: Env) -> dict[str, str]:
    """The installing environment's path variables that are set (see CARRIED_VARS)."""
    carried = {name: env.get(name) for name in CARRIED_VARS}
    return {name: value for name, value in carried.items() if value is not None}


# -- rendering -----------------------------------------------------------

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
    exec_start = " ".join(_unit_word(w, expand_dollar=True) for w in exe)
    lines = [
        "Environment=" + _unit_word(f"{name}={value}", expand_dollar=False)
        for name, value in carried_environment(env).items()
    ]
    environment = "".join(line + "\n" for line in lines)
    return _UNIT_TEMPLATE.substitute(exec_start=exec_start, environment=environment)


def plist_dict(env: Env, exe: list[str]) -> dict[str, Any]:
    """The launchd agent running `exe`; plistlib does every escape."""
    for word in exe:
        _no_control(word)
    logs = log_dir(env)
    return {
        "Label": LABEL,
        "ProgramArguments": list(exe),
        "RunAtLoad": True,
        # Restarted when it fails, left alone when it stops cleanly (SIGTERM).
        "KeepAlive": {"SuccessfulExit": False},
        "ProcessType": "Background",
        # Everything agentkeep creates is the user's alone (launchd's Umask is decimal).
        "Umask": 0o077,
        "EnvironmentVariables": carried_environment(env),
        "StandardOutPath": str(logs / "agentkeep.out.log"),
        "StandardErrorPath": str(logs / "agentkeep.err.log"),
    }


def plist_bytes(env: Env, exe: list[str]) -> bytes:
    return plistlib.dumps(plist_dict(env, exe), fmt=plistlib.FMT_XML, sort_keys=True)


# -- asking the service manager (read-only) ------------------------------


def _which(env: Env, program: str) -> str | None:
    return shutil.which(program, path=env.get("PATH") or os.defpath)


def _query(env: Env, argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    """Run a read-only query; None when the program is missing or cannot run."""
    program = _which(env, argv[0])
    if program is None:
        return None
    try:
        return subprocess.run(
            [program, *argv[1:]],
            env=dict(env.environ),
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("service query failed", argv=argv, error=str(exc))
        return None


def user_name(env: Env) -> str:
    try:
        return pwd.getpwuid(env.uid).pw_name
    except KeyError:
        return env.get("USER") or str(env.uid)


def linger(env: Env) -> bool | None:
    """Whether systemd keeps this user's services running after logout; None when unknown."""
    done = _query(env, ["loginctl", "show-user", user_name(env), "-p", "Linger"])
    if done is None or done.returncode != 0:
        return None
    value = done.stdout.strip().partition("=")[2]
    return {"yes": True, "no": False}.get(value)


def _systemd_active(env: Env) -> bool | None:
    done = _query(env, ["systemctl", "--user", "is-active", UNIT_NAME])
    if done is None:
        return None
    # is-active prints the state even when it exits non-zero; a missing user
    # bus prints nothing on stdout, and then nobody can tell.
    state = done.stdout.strip()
    if not state:
        return None
    return state in ("active", "reloading", "activating")


def _launchd_target(env: Env) -> str:
    return f"gui/{env.uid}/{LABEL}"


def _launchd_state(env: Env) -> tuple[bool, bool] | None:
    """(loaded, running) from `launchctl print`; None when launchctl is missing."""
    done = _query(env, ["launchctl", "print", _launchd_target(env)])
    if done is None:
        return None
    if done.returncode != 0:
        return (False, False)
    return (True, re.search(r"^\s*state = running\s*$", done.stdout, re.M) is not None)


def status(env: Env) -> dict[str, Any]:
    """{"kind", "unit_path", "installed", "active", "linger"}: active and
    linger are None when the service manager cannot be asked (linger is
    always None for launchd, where an agent runs only while logged in)."""
    kind = platform_kind(env)
    path = service_path(env)
    if kind == "launchd":
        state = _launchd_state(env)
        active = None if state is None else state[1]
        lingers = None
    else:
        active = _systemd_active(env)
        lingers = linger(env)
    return {
        "kind": kind,
        "unit_path": str(path),
        "installed": path.is_file(),
        "active": active,
        "linger": lingers,
    }


# -- plans ---------------------------------------------------------------


def _linger_note(env: Env) -> list[Action]:
    lingers = linger(env)
    if lingers is True:
        return []
    user = shlex.quote(user_name(env))
    why = (
        "lingering is off for this user"
        if lingers is False
        else "could not ask loginctl whether lingering is on"
    )
    return [
        Action(
            "note",
            f"{why}: the service runs only while you are logged in. To keep it running "
            f"after you log out: loginctl enable-linger {user}",
        )
    ]


def _systemd_install(env: Env) -> list[Action]:
    path = unit_path(env)
    actions = [
        Action("write", str(path), unit_text(env, daemon_command())),
        _run_action("systemctl", "--user", "daemon-reload"),
        _run_action("systemctl", "--user", "enable", "--now", UNIT_NAME),
    ]
    # enable --now leaves a running daemon as it is; a re-install (after an
    # upgrade, or with a changed unit) must leave this installation's code running.
    if _systemd_active(env) is True:
        actions.append(_run_action("systemctl", "--user", "restart", UNIT_NAME))
    return actions + _linger_note(env)


def _systemd_uninstall(env: Env) -> list[Action]:
    path = unit_path(env)
    if not path.is_file():
        return [Action("note", f"not installed: {path} does not exist")]
    return [
        _run_action("systemctl", "--user", "disable", "--now", UNIT_NAME),
        Action("remove", str(path)),
        _run_action("systemctl", "--user", "daemon-reload"),
    ]


def _launchd_install(env: Env) -> list[Action]:
    path = plist_path(env)
    actions = [
        Action("mkdir", str(log_dir(env))),
        Action("write", str(path), plist_bytes(env, daemon_command()).decode()),
    ]
    # bootstrap refuses a label that is already loaded, and a re-install must
    # leave this installation's code running: a loaded agent is booted out first.
    state = _launchd_state(env)
    if state is not None and state[0]:
        actions.append(_run_action("launchctl", "bootout", _launchd_target(env)))
    return actions + [
        # A `launchctl disable` from earlier would make bootstrap fail.
        _run_action("launchctl", "enable", _launchd_target(env)),
        _run_action("launchctl", "bootstrap", f"gui/{env.uid}", str(path)),
    ]


def _launchd_uninstall(env: Env) -> list[Action]:
    path = plist_path(env)
    state = _launchd_state(env)
    actions: list[Action] = []
    if state is not None and state[0]:
        actions.append(_run_action("launchctl", "bootout", _launchd_target(env)))
    if path.is_file():
        actions.append(Action("remove", str(path)))
    if not actions:
        return [Action("note", f"not installed: {path} does not exist")]
    return actions + [Action("note", f"logs are kept in {log_dir(env)}")]


def install_plan(env: Env) -> list[Action]:
    """Write the unit (or plist) for this installation and start it now and at login."""
    if platform_kind(env) == "launchd":
        return _launchd_install(env)
    return _systemd_install(env)


def uninstall_plan(env: Env) -> list[Action]:
    """Undo install: stop and disable the service, remove its file."""
    if platform_kind(env) == "launchd":
        return _launchd_uninstall(env)
    return _systemd_uninstall(env)


# -- doing ---------------------------------------------------------------


def _write(path: Path, content: str) -> None:
    """Whole or not at all: a temporary file renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        # A unit or agent definition is read by the service manager, not secret.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _execute(argv: list[str], environ: Mapping[str, str]) -> str | None:
    """Run one command of a plan; the reason it failed, or None."""
    program = shutil.which(argv[0], path=environ.get("PATH") or os.defpath)
    if program is None:
        return f"{argv[0]} not found on PATH"
    try:
        done = subprocess.run(
            [program, *argv[1:]],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=330,  # enable --now waits for READY=1 (TimeoutStartSec=300)
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        return f"exited {done.returncode}" + (f": {detail}" if detail else "")
    return None


def _show_dry(action: Action, out: Callable[[str], None]) -> None:
    if action.kind == "write":
        out(f"would write {action.what}:")
        for line in (action.content or "").splitlines():
            out(f"    {line}" if line else "")
    elif action.kind == "mkdir":
        out(f"would create directory {action.what}")
    elif action.kind == "run":
        out(f"would run: {action.what}")
    elif action.kind == "remove":
        out(f"would remove {action.what}")
    else:
        out(f"note: {action.what}")


def _do(action: Action, environ: Mapping[str, str], out: Callable[[str], None]) -> bool:
    try:
        if action.kind == "write":
            _write(Path(action.what), action.content or "")
            out(f"wrote {action.what}")
        elif action.kind == "mkdir":
            ensure_private_dir(Path(action.what))
            out(f"created directory {action.what}")
        elif action.kind == "run":
            failure = _execute(action.argv, environ)
            if failure is not None:
                out(f"failed: {action.what}: {failure}")
                log.warning("service command failed", command=action.what, error=failure)
                return False
            out(f"ran: {action.what}")
        elif action.kind == "remove":
            Path(action.what).unlink(missing_ok=True)
            out(f"removed {action.what}")
        else:
            out(f"note: {action.what}")
    except OSError as exc:
        out(f"failed: {action.kind} {action.what}: {exc}")
        log.warning("service action failed", kind=action.kind, what=action.what, error=str(exc))
        return False
    log.info("service action", kind=action.kind, what=action.what)
    return True


def apply(
    actions: list[Action],
    *,
    dry_run: bool,
    out: Callable[[str], None],
    env: Env | None = None,
) -> int:
    """Carry out a plan in order, or with `dry_run` print each step and do
    nothing. Stops at the first failure (a later step depends on the earlier
    ones). Commands run with `env`'s variables (default: this process's).
    0 when every step was done, 1 otherwise."""
    environ: Mapping[str, str] = env.environ if env is not None else os.environ
    for action in actions:
        if dry_run:
            _show_dry(action, out)
        elif not _do(action, environ, out):
            return 1
    return 0
