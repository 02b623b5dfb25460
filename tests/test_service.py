"""The service files, `agentkeep service install|uninstall|status`, and deploy/install.sh.

No test here touches the machine's service manager. Where the machine
allows it, the service is installed into a real `systemd --user` of the
fake user's own, fenced off from the machine (tests/user_systemd.py); the
rest of the tests, and every launchd one, use a fake `systemctl`,
`launchctl` and `loginctl` on the fake user's PATH that records its argv
and answers as told. Every file lands in the fake home.
"""

from __future__ import annotations

import json
import os
import plistlib
import re
import select
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep import service
from agentkeep.model import parse_rfc3339
from agentkeep.paths import Env
from agentkeep.service import ALREADY_RUNNING_EXIT, Plan, ServiceError
from build_claude import make_session
from fakehome import FakeHome
from test_daemon_serve import start_daemon, stop_daemons  # noqa: F401 (fixture)
from user_systemd import UserManager, user_manager, why_not
from waiting import wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
INSTALL_SH = REPO / "deploy" / "install.sh"

# The example user the files in systemd/ and launchd/ are rendered for.
_EXAMPLES = {
    "systemd/agentkeep.service": ("systemd", "/home/you", "/usr/local/bin:/usr/bin:/bin"),
    "launchd/dev.agentkeep.daemon.plist": (
        "launchd",
        "/Users/you",
        "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
    ),
}
_REGENERATE = (
    "regenerate with: python -c 'import tests.test_service as t; t.write_examples()' "
    "(then review the diff)"
)


def _example(name: str) -> bytes:
    kind, home, path = _EXAMPLES[name]
    env = Env(environ={"HOME": home, "PATH": f"{home}/.local/bin:{path}"}, home=Path(home), uid=501)
    exe = [f"{home}/.local/share/agentkeep/venv/bin/python", "-m", "agentkeep", "serve"]
    if kind == "launchd":
        return service.plist_bytes(env, exe)
    return service.unit_text(env, exe).encode()


def write_examples() -> None:
    for name in _EXAMPLES:
        (REPO / name).write_bytes(_example(name))


# -- fakes ---------------------------------------------------------------

_FAKE = r"""#!/bin/sh
# A stand-in service manager: records its argv, answers from FAKE_* variables.
call="${0##*/} $*"
printf '%s\n' "$call" >> "$FAKE_LOG"
if [ -n "${FAKE_NO_MANAGER:-}" ]; then
  case $call in
    "systemctl "*) echo "Failed to connect to bus: No medium found" >&2; exit 1 ;;
    "launchctl "*) echo "Bad request." >&2; exit 5 ;;
  esac
fi
if [ "$call" = "${FAKE_FAIL:-}" ]; then
  echo "Job for agentkeep.service failed because the control process exited with error code." >&2
  exit 1
fi
case $call in
  "systemctl --user show agentkeep.service -p "*)
    printf 'ActiveState=%s\nSubState=%s\nResult=%s\nNRestarts=%s\nMainPID=%s\n' \
      "${FAKE_ACTIVE:-inactive}" "${FAKE_SUB:-dead}" "${FAKE_RESULT:-success}" \
      "${FAKE_RESTARTS:-0}" "${FAKE_MAINPID:-0}"
    printf 'ExecMainStatus=%s\nActiveEnterTimestampMonotonic=%s\n' \
      "${FAKE_EXIT:-0}" "${FAKE_SINCE:-0}" ;;
  "loginctl show-user "*)
    echo "Linger=${FAKE_LINGER:-no}" ;;
  "launchctl print gui/"*/*)
    [ -n "${FAKE_LOADED:-}" ] || { echo "Could not find service" >&2; exit 113; }
    printf '%s = {\n\tstate = %s\n\tpid = 4242\n}\n' "$2" "${FAKE_LOADED}" ;;
esac
exit 0
"""


def fake_service_manager(fh: FakeHome, *programs: str, **answers: str) -> tuple[Env, Path]:
    """An Env whose PATH holds only fake `programs` (and sh's own directory
    is not needed: the scripts name /bin/sh). Returns it and the argv log."""
    bin_dir = fh.root / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    for program in programs:
        script = bin_dir / program
        script.write_text(_FAKE)
        script.chmod(0o755)
    log = fh.root / "calls.log"
    log.touch()
    environ = dict(fh.environ, PATH=str(bin_dir), FAKE_LOG=str(log), **answers)
    return Env.from_environ(environ), log


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines()


_READ_ONLY = re.compile(
    r"^(systemctl --user (show-environment|show agentkeep\.service )|loginctl show-user "
    r"|launchctl print )"
)


def _mutations(log: Path) -> list[str]:
    return [c for c in _calls(log) if not _READ_ONLY.match(c)]


def _collect(plan: Plan, env: Env, *, dry_run: bool) -> tuple[int, list[str]]:
    steps = service.apply(plan, dry_run=dry_run, env=env)
    lines = [line for step in steps for line in service.describe(step, dry_run=dry_run)]
    return service.exit_code(steps), lines


def _cli(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in `env` (the fake user with a fake service manager), with
    Python's own directory on PATH after the fakes."""
    return subprocess.run(
        [sys.executable, "-m", "agentkeep", *args],
        env=dict(env.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- the unit file -------------------------------------------------------


def _parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd.syntax(7): sections, `Key=value` lines (a key may repeat),
    comments starting with # or ;. No continuation lines are written."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", ";")):
            continue
        header = re.fullmatch(r"\[([A-Za-z]+)\]", line)
        if header:
            current = sections.setdefault(header.group(1), {})
            continue
        assert current is not None, f"key outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z]+", key), f"not Key=value: {line!r}"
        current.setdefault(key, []).append(value)
    return sections


def _unquote_word(word: str) -> str:
    """The inverse of a unit-file word: one double-quoted C-escaped string or
    a plain word, then %% -> % (specifiers)."""
    if word.startswith('"'):
        assert word.endswith('"') and len(word) >= 2, word
        word = re.sub(r"\\(.)", r"\1", word[1:-1])
    return word.replace("%%", "%")


def _words(value: str) -> list[str]:
    return [_unquote_word(w) for w in re.findall(r'"(?:[^"\\]|\\.)*"|[^\s"]+', value)]


def _verify(unit: Path, fh: FakeHome) -> subprocess.CompletedProcess[str] | None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return None
    return subprocess.run(
        [tool, "--user", "verify", str(unit)],
        env=fh.environ,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_unit_passes_systemd_analyze_verify(fake_home: FakeHome) -> None:
    env = Env.from_environ(fake_home.environ)
    unit = fake_home.root / "units" / "agentkeep.service"
    unit.parent.mkdir()
    unit.write_text(service.unit_text(env, service.daemon_command()))
    done = _verify(unit, fake_home)
    if done is None:
        pytest.skip("systemd-analyze is not installed (the unit is parsed by the next test)")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    # The same check must see a broken unit, or passing means nothing.
    unit.write_text(unit.read_text().replace("Type=notify", "Type=notifyy"))
    broken = _verify(unit, fake_home)
    assert broken is not None and "notifyy" in broken.stderr, "SETUP INVALID: verify saw nothing"


def test_unit_has_every_required_key_and_nothing_that_hides_home(fake_home: FakeHome) -> None:
    env = Env.from_environ(fake_home.environ)
    unit = _parse_unit(service.unit_text(env, service.daemon_command()))
    svc = unit["Service"]
    assert svc["Type"] == ["notify"]
    assert svc["Restart"] == ["on-failure"]
    assert svc["WatchdogSec"] == ["60"]
    assert svc["UMask"] == ["0077"]
    # The daemon the service runs knows it, and a second one exits with the
    # status systemd will not restart on (a restart would only fail again).
    assert svc["RestartPreventExitStatus"] == [str(ALREADY_RUNNING_EXIT)]
    assert f"{service.RUN_BY_SERVICE}=1" in svc["Environment"]
    assert svc["ExecReload"] == ["kill -HUP $MAINPID"]
    assert unit["Unit"]["StartLimitBurst"] == ["5"]
    assert unit["Unit"]["StartLimitIntervalSec"] == ["300"]
    assert _words(svc["ExecStart"][0]) == [sys.executable, "-m", "agentkeep", "serve"]
    assert unit["Install"]["WantedBy"] == ["default.target"]
    # Each of these hides the home or /tmp, or turns on PrivateUsers= in a user unit.
    hiding = {"ProtectHome", "PrivateTmp", "PrivateUsers", "ProtectSystem", "PrivateDevices"}
    hiding |= {"ReadOnlyPaths", "InaccessiblePaths", "TemporaryFileSystem", "ProtectKernelTunables"}
    assert hiding.isdisjoint(svc), hiding & set(svc)
    carried = dict(_words(v)[0].split("=", 1) for v in svc["Environment"])
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "CLAUDE_CONFIG_DIR", "TMPDIR"):
        assert carried[name] == fake_home.environ[name]


def test_unit_quotes_odd_paths_and_refuses_control_characters(fake_home: FakeHome) -> None:
    odd = str(fake_home.root / 'tmp dir %h "q" \\ $HOME')
    env = Env.from_environ(dict(fake_home.environ, TMPDIR=odd))
    exe = [sys.executable, "-m", "agentkeep", "serve", odd]
    text = service.unit_text(env, exe)
    svc = _parse_unit(text)["Service"]
    # $ in ExecStart would be expanded by systemd: it must come out as $$.
    assert "$$HOME" in svc["ExecStart"][0]
    assert [w.replace("$$", "$") for w in _words(svc["ExecStart"][0])] == exe
    carried = dict(_words(v)[0].split("=", 1) for v in svc["Environment"])
    assert carried["TMPDIR"] == odd
    unit = fake_home.root / "agentkeep.service"
    unit.write_text(text)
    done = _verify(unit, fake_home)
    assert done is None or (done.returncode, done.stderr) == (0, ""), done and done.stderr
    with pytest.raises(ServiceError, match="control character"):
        service.unit_text(Env.from_environ(dict(fake_home.environ, TMPDIR="/a\nb")), exe)
    with pytest.raises(ServiceError, match="absolute"):
        service.unit_text(env, ["python3", "-m", "agentkeep", "serve"])


def test_daemon_command_is_this_interpreter_unresolved() -> None:
    # A venv's python is a link: resolving it would leave the venv.
    assert service.daemon_command() == [sys.executable, "-m", "agentkeep", "serve"]


# -- the plist -----------------------------------------------------------


def test_plist_round_trips_with_every_required_key(fake_home: FakeHome) -> None:
    env = Env.from_environ(fake_home.environ)
    data = plistlib.loads(service.plist_bytes(env, service.daemon_command()))
    assert data["Label"] == "dev.agentkeep.daemon"
    assert data["ProgramArguments"] == [sys.executable, "-m", "agentkeep", "serve"]
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] == {"SuccessfulExit": False}
    assert data["Umask"] == 0o077
    logs = fake_home.home / "Library" / "Logs" / "agentkeep"
    for key in ("StandardOutPath", "StandardErrorPath"):
        assert Path(data[key]).parent == logs
    assert (
        data["EnvironmentVariables"]["CLAUDE_CONFIG_DIR"] == fake_home.environ["CLAUDE_CONFIG_DIR"]
    )


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
def test_repo_service_files_are_the_templates_rendered(name: str) -> None:
    assert (REPO / name).read_bytes() == _example(name), _REGENERATE


# -- platform ------------------------------------------------------------


def test_platform_kind_follows_the_override(fake_home: FakeHome) -> None:
    plain = Env.from_environ(fake_home.environ)
    assert service.platform_kind(plain) == ("launchd" if sys.platform == "darwin" else "systemd")
    for kind in ("systemd", "launchd"):
        env = Env.from_environ(dict(fake_home.environ, AGENTKEEP_SERVICE_KIND=kind))
        assert service.platform_kind(env) == kind
    with pytest.raises(ServiceError, match="AGENTKEEP_SERVICE_KIND"):
        service.platform_kind(Env.from_environ(dict(fake_home.environ, AGENTKEEP_SERVICE_KIND="x")))


# -- systemd install / uninstall, with the fake --------------------------


def _systemd(fh: FakeHome, **answers: str) -> tuple[Env, Path]:
    return fake_service_manager(
        fh, "systemctl", "loginctl", AGENTKEEP_SERVICE_KIND="systemd", **answers
    )


def _with_python(env: Env) -> Env:
    """`env` with this interpreter's directory after the fakes on PATH (so a
    subprocess can run `python -m agentkeep` by name if it needs to)."""
    return Env.from_environ(dict(env.environ, PATH=f"{env.environ['PATH']}:/usr/bin:/bin"))


def _unit_files(env: Env) -> list[Path]:
    return [p for p in (service.unit_path(env), service.wants_link(env)) if os.path.lexists(p)]


def _write_installed_unit(env: Env) -> None:
    """What a finished install leaves: the unit and enable's link."""
    unit = service.unit_path(env)
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(service.unit_text(env, service.daemon_command()))
    link = service.wants_link(env)
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(unit)


def test_systemd_install_dry_run_prints_the_exact_commands(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home)
    unit = fake_home.home / ".config" / "systemd" / "user" / "agentkeep.service"
    code, lines = _collect(service.install_plan(env), env, dry_run=True)
    assert code == 0
    user = service.user_name(env)
    assert lines[0] == f"would write {unit}:"
    runs = [line for line in lines if line.startswith("would run: ")]
    assert runs == [
        "would run: systemctl --user daemon-reload",
        "would run: systemctl --user enable --now agentkeep.service",
    ]
    assert any(f"loginctl enable-linger {user}" in line for line in lines)
    assert "    Type=notify" in lines
    assert not unit.exists()
    assert _mutations(log) == []
    assert _calls(log)[0] == "systemctl --user show-environment", "the manager is asked first"


def test_systemd_install_then_uninstall_runs_them(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home, FAKE_LINGER="yes")
    unit = service.unit_path(env)
    code, lines = _collect(service.install_plan(env), env, dry_run=False)
    assert code == 0, lines
    assert unit.read_text() == service.unit_text(env, service.daemon_command())
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    assert _mutations(log) == [
        "systemctl --user daemon-reload",
        "systemctl --user enable --now agentkeep.service",
    ]
    assert not any("linger" in line for line in lines), "lingering is on: no note"

    log.write_text("")
    code, lines = _collect(service.uninstall_plan(env), env, dry_run=False)
    assert code == 0, lines
    assert not unit.exists()
    assert _mutations(log) == [
        "systemctl --user disable --now agentkeep.service",
        "systemctl --user daemon-reload",
    ]
    # Uninstalling what is not there is a no-op that says so.
    log.write_text("")
    code, lines = _collect(service.uninstall_plan(env), env, dry_run=False)
    assert code == 0 and "not installed" in lines[0]
    assert _calls(log) == []


def test_uninstall_of_a_failed_unit_resets_it(fake_home: FakeHome) -> None:
    """systemd keeps listing a failed unit after its file is gone, until reset."""
    env, log = _systemd(fake_home, FAKE_ACTIVE="failed", FAKE_EXIT=str(ALREADY_RUNNING_EXIT))
    _write_installed_unit(env)
    code, lines = _collect(service.uninstall_plan(env), env, dry_run=False)
    assert code == 0, lines
    assert _mutations(log) == [
        "systemctl --user disable --now agentkeep.service",
        "systemctl --user reset-failed agentkeep.service",
        "systemctl --user daemon-reload",
    ]


def test_systemd_uninstall_dry_run_prints_the_exact_commands(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home)
    unit = service.unit_path(env)
    unit.parent.mkdir(parents=True)
    unit.write_text("[Unit]\n")
    code, lines = _collect(service.uninstall_plan(env), env, dry_run=True)
    assert (code, lines) == (
        0,
        [
            "would run: systemctl --user disable --now agentkeep.service",
            f"would remove {unit}",
            "would run: systemctl --user daemon-reload",
        ],
    )
    assert unit.exists() and _mutations(log) == []


def test_reinstall_over_a_running_service_restarts_it(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home, FAKE_ACTIVE="active", FAKE_LINGER="yes")
    _write_installed_unit(env)
    code, lines = _collect(service.install_plan(env), env, dry_run=False)
    assert code == 0, lines
    assert _mutations(log)[-1] == "systemctl --user restart agentkeep.service"


def test_install_without_a_manager_refuses_and_writes_nothing(fake_home: FakeHome) -> None:
    """A container, WSL, an ssh login without a user bus: one sentence, exit 1,
    nothing written, nothing run (a dry run says the same)."""
    env, log = _systemd(fake_home, FAKE_NO_MANAGER="1")
    for dry in ([], ["--dry-run"]):
        done = _cli(_with_python(env), "service", "install", *dry)
        assert done.returncode == 1, done
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("agentkeep: no user service manager answers here (")
        assert "Failed to connect to bus: No medium found" in lines[0]
        assert "nothing was installed" in lines[0] and "agentkeep serve" in lines[0]
    assert not (fake_home.home / ".config" / "systemd").exists()
    assert _mutations(log) == []
    as_json = _cli(_with_python(env), "service", "install", "--json")
    assert as_json.returncode == 1
    doc = json.loads(as_json.stdout)
    assert (doc["action"], doc["ok"], doc["steps"]) == ("install", False, [])
    assert doc["error"] == lines[0].removeprefix("agentkeep: ")
    assert _mutations(log) == []


def test_install_without_systemctl_refuses(fake_home: FakeHome) -> None:
    env, log = fake_service_manager(fake_home, "loginctl", AGENTKEEP_SERVICE_KIND="systemd")
    with pytest.raises(service.ManagerUnreachable, match=r"\(systemctl is not installed\)"):
        service.install_plan(env)
    assert not service.unit_path(env).parent.exists()


def test_uninstall_without_a_manager_removes_the_files_and_says_so(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home, FAKE_NO_MANAGER="1")
    _write_installed_unit(env)
    done = _cli(_with_python(env), "service", "uninstall")
    assert done.returncode == 0, done
    assert _unit_files(env) == []
    assert "nothing was stopped" in done.stdout and "Failed to connect to bus" in done.stdout
    assert done.stderr == ""
    assert _mutations(log) == []


def test_uninstall_goes_on_past_a_failing_command_and_says_it_once(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home, FAKE_FAIL="systemctl --user disable --now agentkeep.service")
    _write_installed_unit(env)
    done = _cli(_with_python(env), "service", "uninstall")
    assert done.returncode == 1
    assert not service.unit_path(env).exists(), "a failed disable left the unit behind"
    failure = [line for line in done.stderr.splitlines() if line]
    assert failure == [
        "agentkeep: failed: systemctl --user disable --now agentkeep.service: exited 1: "
        "Job for agentkeep.service failed because the control process exited with error code."
    ], "every failure is said once, with no log line beside it"
    assert _mutations(log)[-1] == "systemctl --user daemon-reload"


def test_a_fresh_install_that_fails_is_undone(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home, FAKE_FAIL="systemctl --user enable --now agentkeep.service")
    done = _cli(_with_python(env), "service", "install", "--json")
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert doc["ok"] is False and doc["error"] is None
    failed = [s for s in doc["steps"] if not s["ok"]]
    assert [s["what"] for s in failed] == ["systemctl --user enable --now agentkeep.service"]
    assert [s["what"] for s in doc["steps"] if s["undo"]] == [
        "systemctl --user disable --now agentkeep.service",
        str(service.unit_path(env)),
        "systemctl --user daemon-reload",
    ]
    assert _unit_files(env) == [], "a failed install left a unit behind"
    assert done.stderr == "", "--json says the failure in the document"


def test_a_reinstall_that_fails_keeps_the_unit_there_was(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home, FAKE_FAIL="systemctl --user enable --now agentkeep.service")
    _write_installed_unit(env)
    done = _cli(_with_python(env), "service", "install")
    assert done.returncode == 1
    assert service.unit_path(env).is_file()
    assert "disable" not in " ".join(_mutations(log))
    assert done.stderr.count("enable --now") == 1, done.stderr


def test_install_and_uninstall_json(fake_home: FakeHome) -> None:
    env, _ = _systemd(fake_home, FAKE_LINGER="yes")
    done = _cli(_with_python(env), "service", "install", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["action"], doc["kind"], doc["ok"], doc["dry_run"]) == (
        "install",
        "systemd",
        True,
        False,
    )
    assert doc["unit_path"] == str(service.unit_path(env))
    assert [s["kind"] for s in doc["steps"]] == ["write", "run", "run"]
    done = _cli(_with_python(env), "service", "uninstall", "--json", "--dry-run")
    doc = json.loads(done.stdout)
    assert (doc["action"], doc["dry_run"], doc["ok"]) == ("uninstall", True, True)
    assert service.unit_path(env).exists(), "a dry run removed the unit"


def test_install_warns_about_a_daemon_not_run_by_the_service(fake_home: FakeHome) -> None:
    first = start_daemon(fake_home)
    env, log = _systemd(fake_home, FAKE_LINGER="yes")
    done = _cli(_with_python(env), "service", "install")
    assert done.returncode == 0, done.stderr
    warning = done.stderr.strip()
    assert warning.startswith("agentkeep: warning: a daemon not run by the service")
    assert f"pid {first.proc.pid}" in warning and "systemctl --user start" in warning
    # Enabled for the next login, not started into a certain failure.
    assert "systemctl --user enable agentkeep.service" in _mutations(log)
    assert "systemctl --user enable --now agentkeep.service" not in _mutations(log)


# -- status --------------------------------------------------------------


def test_status_speaks_words_and_exits_as_is_active_does(fake_home: FakeHome) -> None:
    # Started 90 s ago, as systemd keeps it: CLOCK_MONOTONIC in µs.
    wall, started = time.time() - 90, int(time.monotonic() * 1e6) - 90_000_000
    env, _ = _systemd(fake_home, FAKE_LINGER="yes")
    missing = _cli(_with_python(env), "service", "status")
    assert (missing.returncode, missing.stdout.strip()) == (
        3,
        f"not installed ({service.unit_path(env)} does not exist)",
    )
    _write_installed_unit(env)
    cases = [
        ({"FAKE_ACTIVE": "active", "FAKE_SUB": "running", "FAKE_MAINPID": "123"}, 0, "running"),
        ({"FAKE_ACTIVE": "inactive"}, 3, "installed, stopped"),
        (
            {"FAKE_ACTIVE": "failed", "FAKE_EXIT": "10"},
            3,
            "installed, failed (last exit status 10)",
        ),
        (
            {"FAKE_ACTIVE": "activating", "FAKE_SUB": "auto-restart", "FAKE_RESTARTS": "7"},
            3,
            "installed, restarting (7 restarts)",
        ),
        ({"FAKE_NO_MANAGER": "1"}, 1, "installed, but no user service manager answers here"),
    ]
    for answers, code, words in cases:
        env, _ = _systemd(fake_home, FAKE_LINGER="yes", FAKE_SINCE=str(started), **answers)
        done = _cli(_with_python(env), "service", "status")
        assert done.returncode == code, (answers, done)
        assert done.stdout.startswith(words) or words in done.stdout, (answers, done.stdout)
        assert "None" not in done.stdout and "True" not in done.stdout
    env, _ = _systemd(fake_home, FAKE_ACTIVE="active", FAKE_MAINPID="123", FAKE_SINCE=str(started))
    text = _cli(_with_python(env), "service", "status").stdout
    since = re.search(r"since (\S+)\)", text)
    assert text.startswith("installed, running (pid 123, since ") and since, text
    assert abs(parse_rfc3339(since.group(1)) - wall) < 2
    assert "lingering is off" in text
    doc = json.loads(_cli(_with_python(env), "service", "status", "--json").stdout)
    assert (doc["installed"], doc["state"], doc["active"], doc["pid"]) == (
        True,
        "running",
        True,
        123,
    )
    assert (doc["linger"], doc["restarts"], doc["problem"]) == (False, 0, None)


def test_status_without_a_service_manager_says_unknown(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home, FAKE_NO_MANAGER="1")
    _write_installed_unit(env)
    got = service.status(env)
    assert (got.installed, got.state, got.active) == (True, service.UNKNOWN, None)
    assert got.problem is not None and "No medium found" in got.problem
    assert _mutations(log) == []


# -- launchd -------------------------------------------------------------


def _launchd(fh: FakeHome, **answers: str) -> tuple[Env, Path]:
    return fake_service_manager(fh, "launchctl", AGENTKEEP_SERVICE_KIND="launchd", **answers)


def test_launchd_install_dry_run_prints_the_exact_commands(fake_home: FakeHome) -> None:
    env, log = _launchd(fake_home)
    plist = fake_home.home / "Library" / "LaunchAgents" / "dev.agentkeep.daemon.plist"
    uid = os.getuid()
    code, lines = _collect(service.install_plan(env), env, dry_run=True)
    assert code == 0
    runs = [line for line in lines if line.startswith("would run: ")]
    assert runs == [
        f"would run: launchctl enable gui/{uid}/dev.agentkeep.daemon",
        f"would run: launchctl bootstrap gui/{uid} {plist}",
    ]
    assert f"would write {plist}:" in lines
    assert not plist.exists() and _mutations(log) == []
    assert _calls(log)[0] == f"launchctl print gui/{uid}", "the manager is asked first"


def test_launchd_install_then_uninstall_runs_them(fake_home: FakeHome) -> None:
    env, log = _launchd(fake_home)
    uid = os.getuid()
    plist = service.plist_path(env)
    code, lines = _collect(service.install_plan(env), env, dry_run=False)
    assert code == 0, lines
    assert plistlib.loads(plist.read_bytes())["Label"] == "dev.agentkeep.daemon"
    logs = fake_home.home / "Library" / "Logs" / "agentkeep"
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    assert _mutations(log) == [
        f"launchctl enable gui/{uid}/dev.agentkeep.daemon",
        f"launchctl bootstrap gui/{uid} {plist}",
    ]
    # Loaded now: a re-install boots the old one out first.
    env, log = _launchd(fake_home, FAKE_LOADED="running")
    log.write_text("")
    assert _collect(service.install_plan(env), env, dry_run=False)[0] == 0
    assert _mutations(log)[0] == f"launchctl bootout gui/{uid}/dev.agentkeep.daemon"
    got = service.status(env)
    assert (got.state, got.pid, got.active) == (service.RUNNING, 4242, True)

    log.write_text("")
    code, lines = _collect(service.uninstall_plan(env), env, dry_run=False)
    assert code == 0, lines
    assert _mutations(log) == [f"launchctl bootout gui/{uid}/dev.agentkeep.daemon"]
    assert not plist.exists() and logs.is_dir()


def test_launchd_without_a_manager(fake_home: FakeHome) -> None:
    env, log = _launchd(fake_home, FAKE_NO_MANAGER="1")
    with pytest.raises(service.ManagerUnreachable, match="Bad request"):
        service.install_plan(env)
    assert not service.plist_path(env).exists() and _mutations(log) == []
    plist = service.plist_path(env)
    plist.parent.mkdir(parents=True)
    plist.write_text("<plist/>\n")
    code, lines = _collect(service.uninstall_plan(env), env, dry_run=False)
    assert code == 0 and not plist.exists()
    assert any("nothing was stopped" in line for line in lines)
    assert _mutations(log) == []


# -- the daemon the service runs -----------------------------------------


def test_a_second_daemon_run_by_the_service_exits_with_its_own_status(
    fake_home: FakeHome,
) -> None:
    """The unit's RestartPreventExitStatus= works only if the daemon the
    service runs exits with exactly that status; started by hand, 1."""
    first = start_daemon(fake_home)
    marked = {service.RUN_BY_SERVICE: "1"}
    second = start_daemon(fake_home, ready=False, name="second", extra=marked)
    assert second.proc.wait(20) == ALREADY_RUNNING_EXIT
    assert str(first.proc.pid) in second.stderr()
    # Another state dir, the same socket: refused by the socket, the same status.
    other = {**marked, "XDG_STATE_HOME": str(fake_home.root / "other-state")}
    third = start_daemon(fake_home, ready=False, name="third", extra=other)
    assert third.proc.wait(20) == ALREADY_RUNNING_EXIT
    assert "already serving" in third.stderr()
    by_hand = start_daemon(fake_home, ready=False, name="by-hand")
    assert by_hand.proc.wait(20) == 1
    assert first.status()["pid"] == first.proc.pid


# -- a real systemd --user -----------------------------------------------
#
# Each test below runs the real CLI against a real user manager of the fake
# user's own (tests/user_systemd.py), and is skipped, with the reason, on a
# machine where one cannot be started.

_PROPS = ("LoadState", "ActiveState", "SubState", "Result", "NRestarts", "MainPID")
_PROPS += ("ExecMainStatus",)


@pytest.fixture
def manager(fake_home: FakeHome) -> Iterator[UserManager]:
    with user_manager(fake_home) as m:
        yield m


def _unit(m: UserManager) -> dict[str, str]:
    return m.show(service.UNIT_NAME, *_PROPS)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _daemon_status(fh: FakeHome) -> dict[str, Any]:
    done = fh.cli("status", "--json")
    return json.loads(done.stdout) if done.stdout else {}


def test_real_install_status_reload_and_uninstall(
    fake_home: FakeHome, manager: UserManager
) -> None:
    env = Env.from_environ(fake_home.environ)
    done = fake_home.cli("service", "install")
    assert done.returncode == 0, done
    assert done.stderr == ""
    unit = _unit(manager)
    assert (unit["ActiveState"], unit["SubState"]) == ("active", "running"), unit
    pid = int(unit["MainPID"])
    assert _daemon_status(fake_home)["pid"] == pid, "the socket's daemon is not the service's"

    status = fake_home.cli("service", "status")
    assert status.returncode == 0, status
    assert status.stdout.startswith(f"installed, running (pid {pid}, since "), status.stdout
    checks = {c["name"]: c for c in json.loads(fake_home.cli("doctor", "--json").stdout)}
    assert checks["service"]["ok"], checks["service"]

    # ExecReload= sends SIGHUP: the daemon reads the config again.
    assert _daemon_status(fake_home)["config"]["retention"] is None
    fake_home.write_config('retention = "30d"\n')
    reload = manager.systemctl("reload", service.UNIT_NAME)
    assert reload.returncode == 0, reload.stderr
    wait_until(
        lambda: _daemon_status(fake_home)["config"]["retention"] == "30d",
        "the daemon to read the config again after systemctl reload",
        setup=False,
    )
    assert int(_unit(manager)["MainPID"]) == pid, "reload restarted the daemon"

    done = fake_home.cli("service", "uninstall")
    assert done.returncode == 0, done
    assert _unit_files(env) == []
    unit = _unit(manager)
    assert (unit["LoadState"], unit["ActiveState"]) == ("not-found", "inactive"), unit
    wait_until(lambda: not _alive(pid), "the service's daemon to stop", setup=False)
    status = fake_home.cli("service", "status")
    assert status.returncode == 3 and status.stdout.startswith("not installed"), status


def test_real_second_daemon_fails_the_service_once_instead_of_looping(
    fake_home: FakeHome, manager: UserManager
) -> None:
    """Another `agentkeep serve` holds the state dir: install warns and does not
    start; a start fails once with ALREADY_RUNNING_EXIT, and systemd leaves the
    unit failed (not waiting to restart); doctor names the other daemon."""
    first = start_daemon(fake_home)
    done = fake_home.cli("service", "install")
    assert done.returncode == 0, done
    assert f"not run by the service (pid {first.proc.pid})" in done.stderr
    assert _unit(manager)["ActiveState"] == "inactive", "install started a certain failure"

    start = manager.systemctl("start", service.UNIT_NAME)
    assert start.returncode != 0, "SETUP INVALID: the service started beside another daemon"
    unit = _unit(manager)
    assert unit["ExecMainStatus"] == str(ALREADY_RUNNING_EXIT), unit
    # "failed", not "activating"/"auto-restart": no restart is pending.
    assert (unit["ActiveState"], unit["SubState"], unit["NRestarts"]) == ("failed", "failed", "0")
    status = fake_home.cli("service", "status")
    assert status.returncode == 3
    assert status.stdout.startswith(f"installed, failed (last exit status {ALREADY_RUNNING_EXIT}")
    doctor = fake_home.cli("doctor")
    problem = next(line for line in doctor.stdout.splitlines() if "service:" in line)
    assert problem.startswith("PROBLEM") and f"pid {first.proc.pid}" in problem, doctor.stdout
    assert f"stop pid {first.proc.pid}, then: systemctl --user start" in doctor.stdout

    assert first.stop() == 0
    assert manager.systemctl("restart", service.UNIT_NAME).returncode == 0
    assert _unit(manager)["ActiveState"] == "active"


def _drop_in(fh: FakeHome, text: str) -> None:
    """The user's own override of the installed unit (a test seam: a faster loop)."""
    folder = Path(fh.environ["XDG_CONFIG_HOME"]) / "systemd" / "user" / "agentkeep.service.d"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.conf").write_text(text)


def test_real_restart_loop_is_reported_by_doctor_and_given_up(
    fake_home: FakeHome, manager: UserManager
) -> None:
    """A daemon that dies at every start (its state dir cannot be made) loops
    until the unit's start limit stops it; doctor reports it all along."""
    assert fake_home.cli("service", "install").returncode == 0
    blocker = fake_home.root / "not-a-dir"
    blocker.write_text("")
    _drop_in(
        fake_home,
        f"[Service]\nRestartSec=200ms\nEnvironment=XDG_STATE_HOME={blocker}/state\n",
    )
    assert manager.systemctl("daemon-reload").returncode == 0
    manager.systemctl("restart", "--no-block", service.UNIT_NAME)
    wait_until(
        lambda: int(_unit(manager)["NRestarts"] or 0) > 0,
        "the service to restart its failing daemon",
    )
    doctor = fake_home.cli("doctor")
    line = next(line for line in doctor.stdout.splitlines() if "service:" in line)
    assert line.startswith("PROBLEM"), doctor.stdout
    assert "journalctl --user -u agentkeep.service" in doctor.stdout
    assert "all is well" not in doctor.stdout
    # StartLimitBurst=5 in StartLimitIntervalSec=300: then systemd gives up.
    unit = wait_until(
        lambda: (u := _unit(manager))["ActiveState"] == "failed" and u,
        "the start limit to stop the loop",
        timeout=30,
        setup=False,
    )
    # "failed", not "activating": no restart is pending any more.
    assert unit["SubState"] == "failed" and int(unit["NRestarts"]) >= 4, unit
    status = fake_home.cli("service", "status")
    assert status.returncode == 3 and "failed" in status.stdout
    assert "keeps failing to start" in fake_home.cli("doctor").stdout


def test_real_fresh_install_that_cannot_start_is_undone(
    fake_home: FakeHome, manager: UserManager
) -> None:
    blocker = fake_home.root / "not-a-dir"
    blocker.write_text("")
    environ = dict(fake_home.environ, XDG_STATE_HOME=str(blocker / "state"))
    done = fake_home.cli("service", "install", env=environ, timeout=120)
    assert done.returncode == 1, done
    assert done.stderr.count("failed: systemctl --user enable --now") == 1, done.stderr
    assert "undoing the install" in done.stdout
    env = Env.from_environ(fake_home.environ)
    assert _unit_files(env) == [], "a failed install left its unit behind"
    unit = _unit(manager)
    assert (unit["LoadState"], unit["ActiveState"]) == ("not-found", "inactive"), unit
    failed = manager.systemctl("list-units", "--failed", "--no-legend", "--plain").stdout
    assert "agentkeep" not in failed


def test_real_manager_gone_install_refuses_uninstall_removes(fake_home: FakeHome) -> None:
    """The real systemctl, with no user manager for this user at all."""
    if shutil.which("systemctl") is None:
        pytest.skip("systemctl is not installed (the fake covers this)")
    done = fake_home.cli("service", "install")
    assert done.returncode == 1, done
    assert done.stderr.startswith("agentkeep: no user service manager answers here")
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    env = Env.from_environ(fake_home.environ)
    assert not service.unit_path(env).parent.exists()
    _write_installed_unit(env)
    done = fake_home.cli("service", "uninstall")
    assert done.returncode == 0, done
    assert _unit_files(env) == [] and "nothing was stopped" in done.stdout


# -- deploy/install.sh ---------------------------------------------------


def _install_sh(
    fh: FakeHome, *args: str, environ: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = dict(environ or fh.environ, PYTHON=sys.executable, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(
        ["sh", str(INSTALL_SH), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_install_sh_parses_as_posix_sh() -> None:
    for shell in ("sh", "dash", "bash"):
        if shutil.which(shell):
            done = subprocess.run([shell, "-n", str(INSTALL_SH)], capture_output=True, text=True)
            assert done.returncode == 0, (shell, done.stderr)


def test_install_sh_dry_run_does_nothing(fake_home: FakeHome) -> None:
    done = _install_sh(fake_home, "--dry-run")
    assert done.returncode == 0, done.stderr
    venv = fake_home.home / ".local" / "share" / "agentkeep" / "venv"
    assert f"would run: {sys.executable} -m venv --clear {venv}" in done.stdout
    assert f"would run: {venv}/bin/agentkeep service install" in done.stdout
    assert not venv.exists() and not (fake_home.home / ".local" / "bin").exists()


def test_install_sh_refuses_to_replace_a_file_that_is_not_a_link(fake_home: FakeHome) -> None:
    bin_dir = fake_home.home / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "agentkeep").write_text("someone else's\n")
    done = _install_sh(fake_home, "--no-service")
    assert done.returncode == 1
    assert "is not a link" in done.stderr
    assert (bin_dir / "agentkeep").read_text() == "someone else's\n"
    assert not (fake_home.home / ".local" / "share" / "agentkeep").exists()


def test_install_sh_installs_and_is_safe_to_rerun(fake_home: FakeHome) -> None:
    """A real install from this tree into a venv in the fake home (pip
    fetches the dependencies: needs PyPI, ~10 s)."""
    venv = fake_home.home / ".local" / "share" / "agentkeep" / "venv"
    link = fake_home.home / ".local" / "bin" / "agentkeep"
    first = _install_sh(fake_home, "--no-service")
    assert first.returncode == 0, first.stderr
    assert os.readlink(link) == f"{venv}/bin/agentkeep"
    cfg = (venv / "pyvenv.cfg").stat()
    # The README's first command: with no agent home, --run shows a demo home.
    second = _install_sh(fake_home, "--no-service", "--run")
    assert second.returncode == 0, second.stderr
    assert f"reusing {venv}" in second.stdout
    demo = fake_home.home / ".local" / "share" / "agentkeep" / "demo"
    assert "showing a demo home" in second.stdout
    assert "would move to the trash" in second.stdout and "ancestor" in second.stdout, second.stdout
    assert (demo / "home" / ".claude" / "projects").is_dir()
    assert (venv / "pyvenv.cfg").stat().st_ino == cfg.st_ino, "the venv was rebuilt"
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import agentkeep.service, sys; print(sys.prefix)"],
        env=fake_home.environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == str(venv)
    assert not (fake_home.home / ".config" / "systemd").exists(), "--no-service installed one"


def _install_sh_on_a_terminal(
    fh: FakeHome, answer: str, *args: str, environ: dict[str, str]
) -> tuple[int, str]:
    """install.sh with a terminal for stdin and stdout (a pty), answering its
    question with `answer`; (exit status, what it printed)."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        ["sh", str(INSTALL_SH), *args],
        env=environ,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    out = b""
    answered = False
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the script is done and the pty closed
                break
            if not chunk:
                break
            out += chunk
            if not answered and b"[y/N]" in out:
                os.write(master, answer.encode() + b"\n")
                answered = True
        return proc.wait(timeout=30), out.decode(errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _uninstall_flow(fh: FakeHome, environ: dict[str, str], is_running: Any) -> None:
    """Install with the service, leave something in agentkeep's state and the
    trash, then uninstall: the venv, link and service go; the state dir and
    the config stay until a "y" on a terminal (or --purge)."""
    venv = fh.home / ".local" / "share" / "agentkeep" / "venv"
    link = fh.home / ".local" / "bin" / "agentkeep"
    env = Env.from_environ(environ)
    installed = subprocess.run(
        ["sh", str(INSTALL_SH)], env=environ, capture_output=True, text=True, timeout=240
    )
    assert installed.returncode == 0, installed.stderr
    assert service.unit_path(env).is_file() and is_running()
    config = fh.write_config('retention = "30d"\n')
    make_session(fh, age_days=45)
    pruned = fh.cli("prune", "--older-than", "30d", "--json", env=environ)
    assert pruned.returncode == 0 and len(json.loads(pruned.stdout)["removed"]) == 1, pruned
    state = fh.state
    assert (state / "trash").is_dir()
    claude = fh.claude
    before = sorted(p.relative_to(claude) for p in claude.rglob("*"))

    dry = _install_sh(fh, "--uninstall", "--dry-run", environ=environ)
    assert dry.returncode == 0, dry.stderr
    assert f"would run: {venv}/bin/agentkeep service uninstall" in dry.stdout
    assert f"would run: rm -rf {venv}" in dry.stdout and f"would run: rm -f {link}" in dry.stdout
    assert venv.is_dir() and link.is_symlink() and service.unit_path(env).is_file()

    done = _install_sh(fh, "--uninstall", environ=environ)
    assert done.returncode == 0, done.stderr
    assert not venv.exists() and not os.path.lexists(link)
    assert _unit_files(env) == [] and not is_running()
    assert state.is_dir() and config.is_file(), "removed without being asked"
    assert f"{state}: the index, pins and the trash (1 pruned session in the trash)" in done.stdout
    assert f"{config}: the config" in done.stdout and "--uninstall --purge" in done.stdout

    code, out = _install_sh_on_a_terminal(fh, "n", "--uninstall", environ=environ)
    assert code == 0 and "Remove them too?" in out, out
    assert state.is_dir() and config.is_file(), "removed after a no"
    code, out = _install_sh_on_a_terminal(fh, "y", "--uninstall", environ=environ)
    assert code == 0, out
    assert "these are removed too" in out and f"{state}: the index" in out, out
    assert not state.exists() and not config.exists() and not config.parent.exists()
    assert sorted(p.relative_to(claude) for p in claude.rglob("*")) == before
    assert fh.home.is_dir() and (fh.home / ".config").is_dir()
    again = _install_sh(fh, "--uninstall", "--purge", environ=environ)
    assert again.returncode == 0 and "left nothing behind" in again.stdout, again


def test_install_sh_purge_says_it_removes_what_it_removes(fake_home: FakeHome) -> None:
    """--purge removes the state dir and the config, and says so: it never
    lists them as left in place."""
    fake_home.state.mkdir(parents=True, exist_ok=True)
    config = fake_home.write_config('retention = "30d"\n')
    done = _install_sh(fake_home, "--uninstall", "--purge")
    assert done.returncode == 0, done.stderr
    assert not fake_home.state.exists() and not config.exists()
    assert "Left in place" not in done.stdout, done.stdout
    assert "these are removed too" in done.stdout and f"{config}: the config" in done.stdout


def test_install_sh_uninstall_takes_back_what_install_did(fake_home: FakeHome) -> None:
    """A real install (pip, ~15 s) and uninstall: with a real `systemd --user`
    running the installed daemon where the machine allows one, else with the
    fake systemctl."""
    if why_not() is not None:
        env, log = _systemd(fake_home, FAKE_LINGER="yes", FAKE_ACTIVE="active")
        environ = dict(_with_python(env).environ)
        _uninstall_flow(fake_home, environ, lambda: service.unit_path(env).is_file())
        assert "systemctl --user disable --now agentkeep.service" in _mutations(log)
        return
    with user_manager(fake_home) as manager:

        def running() -> bool:
            return _unit(manager)["ActiveState"] == "active"

        _uninstall_flow(fake_home, dict(fake_home.environ), running)
