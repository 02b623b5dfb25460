"""The user's service: the systemd user unit or launchd agent that runs `agentkeep serve`.

`install`, `uninstall` and `status` are built as plans of small actions
(write a file, run a command, remove a file, say something) so that
`--dry-run` prints exactly what a real run does, and a real run does nothing
the dry run did not print. The unit and the plist are rendered from the two
templates in this module, the one source of truth: `systemd/agentkeep.service`
and `launchd/dev.agentkeep.daemon.plist` in the source tree are those
templates rendered for an example user (a test keeps them equal).

Every plan starts by asking the service manager whether it answers at all
(`systemctl --user show-environment`, `launchctl print gui/<uid>`): where
none does (a container, WSL without systemd, an ssh login without a user
bus) `install` refuses before it writes anything, and `uninstall` removes
the files install wrote without it, and says so. A fresh install that fails
half way is undone, so a failed install never leaves a unit behind.

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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import structlog

from agentkeep import client
from agentkeep.errors import Failed, Failure, ManagerUnreachable, ServiceError
from agentkeep.model import rfc3339
from agentkeep.paths import Env, ensure_private_dir

log = structlog.get_logger("agentkeep.service")

UNIT_NAME = "agentkeep.service"
LABEL = "dev.agentkeep.daemon"
KINDS = ("systemd", "launchd")

# The unit sets RUN_BY_SERVICE for the daemon it runs. Such a daemon, finding
# another daemon of this user already holding the state dir or serving the
# socket, exits ALREADY_RUNNING_EXIT instead of 1, and the unit's
# RestartPreventExitStatus= names that status: systemd then leaves the
# service failed instead of restarting it every few seconds for as long as
# the other one runs. Started any other way, a second daemon exits 1.
RUN_BY_SERVICE = "AGENTKEEP_RUN_BY_SERVICE"
ALREADY_RUNNING_EXIT = 10

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


@dataclass(frozen=True)
class Action:
    """One step of a plan. `kind` is write, mkdir, run, remove, note or warn;
    for run, `what` is the command line (shell-quoted), for the others a path
    or the text to say; `content` is what a write writes."""

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
    return _UNIT_TEMPLATE.substitute(
        exec_start=exec_start,
        environment=environment,
        run_by_service=RUN_BY_SERVICE,
        already_running=ALREADY_RUNNING_EXIT,
    )


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
        log.info("service query failed", argv=argv, error=str(exc))
        return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def manager_problem(env: Env) -> str | None:
    """Why no user service manager answers here, or None when one does.
    `is-system-running` is not asked: where systemd is not PID 1 it says
    "offline" even when a user manager answers."""
    if platform_kind(env) == "launchd":
        argv = ["launchctl", "print", f"gui/{env.uid}"]
    else:
        argv = ["systemctl", "--user", "show-environment"]
    if _which(env, argv[0]) is None:
        return f"{argv[0]} is not installed"
    done = _query(env, argv)
    if done is None:
        return f"`{shlex.join(argv)}` could not be run"
    if done.returncode != 0:
        detail = _first_line(done.stderr) or _first_line(done.stdout)
        return f"`{shlex.join(argv)}`: {detail or f'exit status {done.returncode}'}"
    return None


def _unreachable(problem: str) -> ManagerUnreachable:
    return ManagerUnreachable(
        f"no user service manager answers here ({problem}), so nothing was installed; "
        "run `agentkeep serve` yourself instead"
    )


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


# What `service status` says the service is doing.
RUNNING = "running"
STARTING = "starting"
RESTARTING = "restarting"
STOPPING = "stopping"
STOPPED = "stopped"
FAILED = "failed"
NOT_INSTALLED = "not-installed"
UNKNOWN = "unknown"

# systemctl is-active's exit codes, which `service status` follows.
STATUS_ACTIVE, STATUS_UNKNOWN, STATUS_INACTIVE = 0, 1, 3

_SYSTEMD_STATES = {
    "active": RUNNING,
    "reloading": RUNNING,
    "deactivating": STOPPING,
    "failed": FAILED,
    "inactive": STOPPED,
}
_SYSTEMD_PROPS = (
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "MainPID",
    "ExecMainStatus",
    "ActiveEnterTimestampMonotonic",
)


@dataclass(frozen=True)
class State:
    """The service as its manager sees it. `state` is one of RUNNING ...
    UNKNOWN (UNKNOWN with `problem` when no manager answers); `restarts`
    counts restarts since the service was started by hand or at login."""

    kind: str
    unit_path: Path
    installed: bool
    state: str
    problem: str | None = None
    pid: int | None = None
    since: float | None = None
    restarts: int | None = None
    result: str | None = None
    exit_status: int | None = None
    linger: bool | None = None

    @property
    def active(self) -> bool | None:
        return None if self.state == UNKNOWN else self.state == RUNNING

    @property
    def failing(self) -> bool:
        """Failed, or not yet serving again after failing: waiting to be
        restarted, or starting once more after restarts (a restart loop
        shows either, depending on when it is looked at)."""
        if self.state in (FAILED, RESTARTING):
            return True
        return self.state == STARTING and bool(self.restarts)

    def exit_code(self) -> int:
        if self.state == RUNNING:
            return STATUS_ACTIVE
        return STATUS_UNKNOWN if self.state == UNKNOWN else STATUS_INACTIVE

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "unit_path": str(self.unit_path),
            "installed": self.installed,
            "state": self.state,
            "active": self.active,
            "pid": self.pid,
            "since": rfc3339(self.since),
            "restarts": self.restarts,
            "result": self.result,
            "exit_status": self.exit_status,
            "linger": self.linger,
            "problem": self.problem,
        }

    def words(self) -> str:
        """One line for a person: "installed, running (pid 123, since ...)"."""
        if not self.installed:
            return f"not installed ({self.unit_path} does not exist)"
        if self.state == UNKNOWN:
            return f"installed, but no user service manager answers here ({self.problem})"
        return f"installed, {self.doing()}"

    def doing(self) -> str:
        """What the installed service is doing: "running (pid 123, since ...)"."""
        said: list[str] = []
        if self.pid is not None:
            said.append(f"pid {self.pid}")
        if self.state == RUNNING and self.since is not None:
            said.append(f"since {rfc3339(self.since)}")
        if self.restarts:
            said.append(f"{self.restarts} restart{'s' * (self.restarts > 1)}")
        if self.state in (FAILED, RESTARTING, STOPPED) and self.exit_status:
            said.append(f"last exit status {self.exit_status}")
        if self.state == FAILED and self.result not in (None, "success", "exit-code"):
            said.append(f"result {self.result}")
        return self.state + (f" ({', '.join(said)})" if said else "")


def _int(text: str | None) -> int | None:
    try:
        return int(text or "")
    except ValueError:
        return None


def _systemd_properties(env: Env) -> dict[str, str] | str:
    """The unit's properties from `systemctl --user show`, or why they cannot be had."""
    problem = manager_problem(env)
    if problem is not None:
        return problem
    argv = ["systemctl", "--user", "show", UNIT_NAME, "-p", ",".join(_SYSTEMD_PROPS)]
    done = _query(env, argv)
    if done is None or done.returncode != 0:
        detail = _first_line(done.stderr) if done is not None else "could not be run"
        return f"`{shlex.join(argv)}`: {detail}"
    pairs = (line.partition("=") for line in done.stdout.splitlines())
    return {key: value for key, _, value in pairs}


def _since(monotonic_usec: int | None) -> float | None:
    """A CLOCK_MONOTONIC time in µs (as systemd keeps it) as a POSIX time."""
    if not monotonic_usec:
        return None
    return time.time() - (time.monotonic() - monotonic_usec / 1e6)


def _systemd_state(env: Env, path: Path, installed: bool) -> State:
    props = _systemd_properties(env)
    if isinstance(props, str):
        return State("systemd", path, installed, UNKNOWN, problem=props)
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    if active == "activating":
        state = RESTARTING if sub == "auto-restart" else STARTING
    else:
        state = _SYSTEMD_STATES.get(active, active or UNKNOWN)
    running = state in (RUNNING, STARTING, STOPPING)
    return State(
        "systemd",
        path,
        installed,
        state,
        pid=(_int(props.get("MainPID")) or None) if running else None,
        since=_since(_int(props.get("ActiveEnterTimestampMonotonic"))) if running else None,
        restarts=_int(props.get("NRestarts")),
        result=props.get("Result") or None,
        exit_status=_int(props.get("ExecMainStatus")),
        linger=linger(env),
    )


def _launchd_target(env: Env) -> str:
    return f"gui/{env.uid}/{LABEL}"


def _launchd_state(env: Env, path: Path, installed: bool) -> State:
    problem = manager_problem(env)
    if problem is not None:
        return State("launchd", path, installed, UNKNOWN, problem=problem)
    done = _query(env, ["launchctl", "print", _launchd_target(env)])
    if done is None or done.returncode != 0:
        return State("launchd", path, installed, STOPPED)
    text = done.stdout
    running = re.search(r"^\s*state = running\s*$", text, re.M) is not None
    pid = re.search(r"^\s*pid = (\d+)\s*$", text, re.M)
    last = re.search(r"^\s*last exit code = (\d+)", text, re.M)
    return State(
        "launchd",
        path,
        installed,
        RUNNING if running else STOPPED,
        pid=int(pid.group(1)) if pid and running else None,
        exit_status=int(last.group(1)) if last else None,
    )


def status(env: Env) -> State:
    """The service of this user as its manager sees it (asks nothing when
    the unit or plist is not installed)."""
    path = service_path(env)
    kind = platform_kind(env)
    if not path.is_file():
        return State(kind, path, False, NOT_INSTALLED)
    if kind == "launchd":
        return _launchd_state(env, path, True)
    return _systemd_state(env, path, True)


def answering_daemon(env: Env) -> int | None:
    """The pid of the daemon answering on this user's socket, if any."""
    try:
        answer = client.call(env, "status", {}, timeout=5)
    except (client.NoDaemon, Failure):
        return None
    pid = answer.get("pid") if isinstance(answer, dict) else None
    return pid if isinstance(pid, int) else None


# -- plans ---------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What `install` or `uninstall` does, in order. An install stops at the
    first failure and then carries out the actions `undo` gives (what a
    fresh install did, taken back; asked for only then, so they fit the
    state the failure left); an uninstall (`keep_going`) tries every step,
    so one that fails does not leave the files behind."""

    verb: str
    actions: list[Action]
    keep_going: bool = False
    undo: Callable[[], list[Action]] | None = None


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


def _foreign_daemon(env: Env, state: State) -> int | None:
    """The pid of a daemon that answers on the socket but is not the service's."""
    pid = answering_daemon(env)
    return pid if pid is not None and pid != state.pid else None


def _foreign_warning(env: Env, pid: int, start: str) -> Action:
    return Action(
        "warn",
        f"a daemon not run by the service (pid {pid}) already answers on {env.socket_path}, "
        f"and the service's own cannot start while it runs: the service is installed but not "
        f"started. Stop pid {pid}, then: {start}",
    )


def _systemd_install(env: Env) -> Plan:
    problem = manager_problem(env)
    if problem is not None:
        raise _unreachable(problem)
    path = unit_path(env)
    current = _systemd_state(env, path, path.is_file())
    other = _foreign_daemon(env, current)
    actions = [
        Action("write", str(path), unit_text(env, daemon_command())),
        _run_action("systemctl", "--user", "daemon-reload"),
    ]
    if other is not None:
        actions.append(_run_action("systemctl", "--user", "enable", UNIT_NAME))
        if current.state in (STARTING, RESTARTING):
            actions.append(_run_action("systemctl", "--user", "stop", UNIT_NAME))
        actions.append(_foreign_warning(env, other, f"systemctl --user start {UNIT_NAME}"))
    else:
        actions.append(_run_action("systemctl", "--user", "enable", "--now", UNIT_NAME))
        # enable --now leaves a running daemon as it is; a re-install (after an
        # upgrade, or with a changed unit) must leave this installation's code running.
        if current.state == RUNNING:
            actions.append(_run_action("systemctl", "--user", "restart", UNIT_NAME))
    # A fresh install that fails is taken back whole; a re-install keeps the
    # unit that was there (it is what the user had, and doctor reports it).
    undo = None if current.installed else lambda: _systemd_removal(env)
    return Plan("install", actions + _linger_note(env), undo=undo)


def _systemd_removal(env: Env) -> list[Action]:
    """Stop and disable the unit, forget a failed state (systemd keeps a
    failed unit listed after its file is gone; only a loaded unit can be
    reset, and only a failed one stays loaded), remove the file."""
    path = unit_path(env)
    actions = [_run_action("systemctl", "--user", "disable", "--now", UNIT_NAME)]
    if _systemd_state(env, path, True).state in (FAILED, RESTARTING):
        actions.append(_run_action("systemctl", "--user", "reset-failed", UNIT_NAME))
    return actions + [
        Action("remove", str(path)),
        _run_action("systemctl", "--user", "daemon-reload"),
    ]


def wants_link(env: Env) -> Path:
    """The link `systemctl enable` makes for WantedBy=default.target."""
    return unit_path(env).parent / "default.target.wants" / UNIT_NAME


def _systemd_uninstall(env: Env) -> Plan:
    path, link = unit_path(env), wants_link(env)
    written = [p for p in (path, link) if p.is_file() or p.is_symlink()]
    if not written:
        return Plan("uninstall", [Action("note", f"not installed: {path} does not exist")])
    problem = manager_problem(env)
    if problem is None:
        actions = _systemd_removal(env)
    else:
        actions = [Action("remove", str(p)) for p in written]
        actions.append(
            Action(
                "note",
                f"no user service manager answers here ({problem}): "
                "the files install wrote were removed, nothing was stopped",
            )
        )
    return Plan("uninstall", actions + _trash_note(env), keep_going=True)


def _trash_note(env: Env) -> list[Action]:
    """Without the daemon nothing expires the trash: say what is left in it."""
    from agentkeep import render, trash

    entries = trash.list_entries(env.state_dir)
    if not entries:
        return []
    total = sum(e.bytes for e in entries)
    count = f"{len(entries)} pruned session{'s' * (len(entries) > 1)}"
    return [
        Action(
            "note",
            f"the trash ({trash.trash_dir(env.state_dir)}) still holds {count} "
            f"({render.size(total)}), which nothing expires without the daemon: "
            "`agentkeep restore AGENT ID` puts one back; "
            "`deploy/install.sh --uninstall --purge` removes them with agentkeep's state",
        )
    ]


def _launchd_install(env: Env) -> Plan:
    problem = manager_problem(env)
    if problem is not None:
        raise _unreachable(problem)
    path = plist_path(env)
    current = _launchd_state(env, path, path.is_file())
    actions = [
        Action("mkdir", str(log_dir(env))),
        Action("write", str(path), plist_bytes(env, daemon_command()).decode()),
    ]
    # bootstrap refuses a label that is already loaded, and a re-install must
    # leave this installation's code running: a loaded agent is booted out first.
    loaded = _loaded(env)
    if loaded:
        actions.append(_run_action("launchctl", "bootout", _launchd_target(env)))
    other = _foreign_daemon(env, current)
    if other is not None:
        bootstrap = f"launchctl bootstrap gui/{env.uid} {shlex.quote(str(path))}"
        return Plan("install", actions + [_foreign_warning(env, other, bootstrap)])
    actions += [
        # A `launchctl disable` from earlier would make bootstrap fail.
        _run_action("launchctl", "enable", _launchd_target(env)),
        _run_action("launchctl", "bootstrap", f"gui/{env.uid}", str(path)),
    ]
    undo = None if current.installed else lambda: [Action("remove", str(path))]
    return Plan("install", actions, undo=undo)


def _loaded(env: Env) -> bool:
    done = _query(env, ["launchctl", "print", _launchd_target(env)])
    return done is not None and done.returncode == 0


def _launchd_uninstall(env: Env) -> Plan:
    path = plist_path(env)
    problem = manager_problem(env)
    actions: list[Action] = []
    if problem is None and _loaded(env):
        actions.append(_run_action("launchctl", "bootout", _launchd_target(env)))
    if path.is_file():
        actions.append(Action("remove", str(path)))
    if not actions:
        return Plan("uninstall", [Action("note", f"not installed: {path} does not exist")])
    if problem is not None:
        actions.append(
            Action("note", f"no service manager answers here ({problem}): nothing was stopped")
        )
    actions.append(Action("note", f"logs are kept in {log_dir(env)}"))
    return Plan("uninstall", actions + _trash_note(env), keep_going=True)


def install_plan(env: Env) -> Plan:
    """Write the unit (or plist) for this installation and start it now and
    at login. Raises ManagerUnreachable, before anything is done, where no
    user service manager answers."""
    if platform_kind(env) == "launchd":
        return _launchd_install(env)
    return _systemd_install(env)


def uninstall_plan(env: Env) -> Plan:
    """Undo install: stop and disable the service, remove its files (the
    files alone where no service manager answers)."""
    if platform_kind(env) == "launchd":
        return _launchd_uninstall(env)
    return _systemd_uninstall(env)


# -- doing ---------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One action carried out (or, in a dry run, shown): `error` says why it
    failed; `undo` marks the steps that take back a failed install."""

    action: Action
    error: str | None = None
    undo: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.action.kind,
            "what": self.action.what,
            "ok": self.error is None,
            "error": self.error,
            "undo": self.undo,
        }


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


def _do(action: Action, environ: Mapping[str, str]) -> str | None:
    """Carry out one action; why it failed, or None. The caller reports a
    failure, once: nothing is logged here beyond the step done."""
    try:
        if action.kind == "write":
            _write(Path(action.what), action.content or "")
        elif action.kind == "mkdir":
            ensure_private_dir(Path(action.what))
        elif action.kind == "run":
            failure = _execute(action.argv, environ)
            if failure is not None:
                return failure
        elif action.kind == "remove":
            Path(action.what).unlink(missing_ok=True)
    except OSError as exc:
        return str(exc)
    log.info("service action", kind=action.kind, what=action.what)
    return None


def apply(
    plan: Plan,
    *,
    dry_run: bool,
    env: Env | None = None,
    report: Callable[[Step], None] | None = None,
) -> list[Step]:
    """Carry out a plan in order (see Plan for what a failure does), or with
    `dry_run` show each step and do nothing. Commands run with `env`'s
    variables (default: this process's). Each step goes to `report` as it
    is done; all of them are returned."""
    environ: Mapping[str, str] = env.environ if env is not None else os.environ
    steps: list[Step] = []

    def record(step: Step) -> None:
        steps.append(step)
        if report is not None:
            report(step)

    if dry_run:
        for action in plan.actions:
            record(Step(action))
        return steps
    failed = False
    for action in plan.actions:
        error = _do(action, environ)
        record(Step(action, error))
        failed = failed or error is not None
        if failed and not plan.keep_going:
            break
    if failed and plan.undo is not None:
        for action in plan.undo():
            record(Step(action, _do(action, environ), undo=True))
    return steps


def exit_code(steps: list[Step]) -> int:
    """0 when every step of the plan was done, 1 (Failed) otherwise."""
    return Failed.exit if any(s.error is not None for s in steps) else 0


_DONE = {"write": "wrote", "mkdir": "created directory", "remove": "removed", "run": "ran:"}
_WOULD = {"write": "would write", "mkdir": "would create directory", "remove": "would remove"}


def describe(step: Step, *, dry_run: bool) -> list[str]:
    """The step as lines for a person (a dry run's write shows the content)."""
    action = step.action
    if action.kind in ("note", "warn"):
        return [f"{'note' if action.kind == 'note' else 'warning'}: {action.what}"]
    prefix = "undoing the install: " if step.undo else ""
    if step.error is not None:
        return [f"{prefix}failed: {action.what}: {step.error}"]
    if not dry_run:
        return [f"{prefix}{_DONE[action.kind]} {action.what}"]
    if action.kind == "run":
        return [f"would run: {action.what}"]
    lines = [f"{_WOULD[action.kind]} {action.what}" + (":" if action.kind == "write" else "")]
    if action.kind == "write":
        lines += [f"    {line}" if line else "" for line in (action.content or "").splitlines()]
    return lines


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


def second_daemon_exit(env: Env) -> int:
    """What a daemon exits with when another of this user already runs (see
    RUN_BY_SERVICE): ALREADY_RUNNING_EXIT under the service, else 1 (Failed)."""
    return ALREADY_RUNNING_EXIT if env.get(RUN_BY_SERVICE) == "1" else Failed.exit
