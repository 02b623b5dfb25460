"""The service files, `agentkeep service install|uninstall|status`, and deploy/install.sh.

No test here touches the machine's service manager: every `systemctl`,
`launchctl` and `loginctl` is a fake script on the fake user's PATH that
records its argv, and every file lands in the fake home.
"""

from __future__ import annotations

import os
import plistlib
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import FakeHome

from agentkeep import service
from agentkeep.paths import Env
from agentkeep.service import Action, ServiceError

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
printf '%s\n' "${0##*/} $*" >> "$FAKE_LOG"
case "${0##*/} $*" in
  "systemctl --user is-active agentkeep.service")
    state=${FAKE_ACTIVE:-inactive}; echo "$state"; [ "$state" = active ]; exit ;;
  "systemctl --user daemon-reload")
    if [ -n "${FAKE_FAIL_RELOAD:-}" ]; then
      echo "Failed to connect to bus: No medium found" >&2; exit 1
    fi ;;
  "loginctl show-user "*)
    echo "Linger=${FAKE_LINGER:-no}" ;;
  "launchctl print "*)
    [ -n "${FAKE_LOADED:-}" ] || { echo "Could not find service" >&2; exit 113; }
    printf '%s = {\n\tstate = %s\n}\n' "$2" "${FAKE_LOADED}" ;;
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


_READ_ONLY = re.compile(r"^(systemctl --user is-active |loginctl show-user |launchctl print )")


def _mutations(log: Path) -> list[str]:
    return [c for c in _calls(log) if not _READ_ONLY.match(c)]


def _collect(actions: list[Action], env: Env, *, dry_run: bool) -> tuple[int, list[str]]:
    lines: list[str] = []
    code = service.apply(actions, dry_run=dry_run, out=lines.append, env=env)
    return code, lines


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


# -- systemd install / uninstall -----------------------------------------


def _systemd(fh: FakeHome, **answers: str) -> tuple[Env, Path]:
    return fake_service_manager(
        fh, "systemctl", "loginctl", AGENTKEEP_SERVICE_KIND="systemd", **answers
    )


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
    assert _mutations(log) == []


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
    code, lines = _collect(service.install_plan(env), env, dry_run=False)
    assert code == 0, lines
    assert _mutations(log)[-1] == "systemctl --user restart agentkeep.service"


def test_apply_stops_at_the_first_failure(fake_home: FakeHome) -> None:
    env, log = _systemd(fake_home, FAKE_FAIL_RELOAD="1", FAKE_LINGER="yes")
    code, lines = _collect(service.install_plan(env), env, dry_run=False)
    assert code == 1
    assert "Failed to connect to bus" in lines[-1]
    assert lines[-1].startswith("failed: systemctl --user daemon-reload")
    assert _mutations(log) == ["systemctl --user daemon-reload"], "enable ran after a failure"


def test_apply_reports_a_missing_service_manager(fake_home: FakeHome) -> None:
    env, _ = fake_service_manager(fake_home, "loginctl", AGENTKEEP_SERVICE_KIND="systemd")
    code, lines = _collect(service.install_plan(env), env, dry_run=False)
    assert code == 1
    assert lines[-1] == "failed: systemctl --user daemon-reload: systemctl not found on PATH"


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
    assert service.status(env)["active"] is True

    log.write_text("")
    code, lines = _collect(service.uninstall_plan(env), env, dry_run=False)
    assert code == 0, lines
    assert _mutations(log) == [f"launchctl bootout gui/{uid}/dev.agentkeep.daemon"]
    assert not plist.exists() and logs.is_dir()


# -- status --------------------------------------------------------------


def test_status_reports_installed_active_and_linger(fake_home: FakeHome) -> None:
    env, _ = _systemd(fake_home, FAKE_ACTIVE="active", FAKE_LINGER="yes")
    assert service.status(env) == {
        "kind": "systemd",
        "unit_path": str(service.unit_path(env)),
        "installed": False,
        "active": True,
        "linger": True,
    }
    env, _ = _systemd(fake_home, FAKE_ACTIVE="failed", FAKE_LINGER="no")
    service.unit_path(env).parent.mkdir(parents=True)
    service.unit_path(env).write_text("[Unit]\n")
    got = service.status(env)
    assert (got["installed"], got["active"], got["linger"]) == (True, False, False)


def test_status_without_a_service_manager_says_unknown(fake_home: FakeHome) -> None:
    env, log = fake_service_manager(fake_home, AGENTKEEP_SERVICE_KIND="systemd")
    got = service.status(env)
    assert (got["installed"], got["active"], got["linger"]) == (False, None, None)
    assert _calls(log) == []


# -- deploy/install.sh ---------------------------------------------------


def _install_sh(fh: FakeHome, *args: str) -> subprocess.CompletedProcess[str]:
    environ = dict(fh.environ, PYTHON=sys.executable, PIP_DISABLE_PIP_VERSION_CHECK="1")
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
    assert "would remove" in second.stdout and "ancestor" in second.stdout, second.stdout
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
