"""`agentkeep doctor`: each condition staged in a fake home, then checked.

The service manager is a fake on the fake user's PATH (tests/test_service.py);
the daemon is the real `agentkeep serve`, except where its watch mode must be
one it cannot be forced into: there a real agentkeep socket server answers
`status` for it; the watch budget is forced through AGENTKEEP_INOTIFY_MAX.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep import client, doctor, service, watchplan
from agentkeep.daemon.server import Server
from agentkeep.doctor import Check
from agentkeep.errors import Failure
from agentkeep.paths import Env
from fakehome import FakeHome
from test_service import fake_service_manager

pytestmark = pytest.mark.slow

HUGE = str(10**9)


def _env(fh: FakeHome, **extra: str) -> Env:
    """The fake user with a fake systemd that reports the service running and lingering."""
    answers = {"FAKE_ACTIVE": "active", "FAKE_LINGER": "yes", "AGENTKEEP_INOTIFY_MAX": HUGE}
    answers.update(extra)
    env, _ = fake_service_manager(
        fh, "systemctl", "loginctl", AGENTKEEP_SERVICE_KIND="systemd", **answers
    )
    return env


def _install_unit(env: Env) -> None:
    path = service.unit_path(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(service.unit_text(env, service.daemon_command()))


def _by_name(checks: list[Check]) -> dict[str, Check]:
    by = {c.name: c for c in checks}
    assert len(by) == len(checks), "check names must be unique"
    return by


def _check(env: Env, name: str) -> Check:
    return _by_name(doctor.run_checks(env))[name]


@pytest.fixture
def daemon(fake_home: FakeHome) -> Iterator[dict[str, object]]:
    """A real socket server at the fake user's socket; `status` answers with
    the dict the test may change (the daemon's own status stands in)."""
    answer: dict[str, object] = {"pid": os.getpid(), "watch": {"mode": "inotify", "roots": []}}

    def handle(_conn: object, method: str, _params: dict[str, object]) -> object:
        assert method == "status"
        return answer

    server = Server(fake_home.socket, handle)
    server.bind()
    server.start()
    yield answer
    server.close()


@pytest.fixture
def real_daemon(fake_home: FakeHome) -> Iterator[subprocess.Popen[bytes]]:
    """The real `agentkeep serve` for the fake user, up once it answers `status`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkeep", "serve"],
        env=fake_home.environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = Env.from_environ(fake_home.environ)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                client.call(env, "status", {}, timeout=5)
                break
            except (client.NoDaemon, Failure):
                assert proc.poll() is None, f"the daemon exited {proc.returncode}"
                assert time.monotonic() < deadline, "the daemon never answered"
                time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _claude_settings(fh: FakeHome, data: object) -> Path:
    fh.claude.mkdir(parents=True, exist_ok=True)
    path = fh.claude / "settings.json"
    path.write_text(json.dumps(data))
    return path


def _stage_projects(fh: FakeHome, count: int) -> None:
    for n in range(count):
        (fh.claude / "projects" / f"-home-u-proj{n}").mkdir(parents=True)


# -- all well, through the real CLI --------------------------------------


def test_all_well_exits_0_and_problems_exit_1(fake_home: FakeHome, real_daemon: object) -> None:
    env = _env(fake_home)
    _install_unit(env)
    fake_home.write_config('retention = "30d"\n')
    _claude_settings(fake_home, {"cleanupPeriodDays": 45})
    _gemini_settings(fake_home.home, {"enabled": False})  # on by default
    fake_home.environ.update(env.environ)
    done = fake_home.cli("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "all is well"
    assert not re.search(r"^PROBLEM", done.stdout, re.M)

    fake_home.write_config('retention = "30x"\n')
    done = fake_home.cli("doctor")
    assert done.returncode == 2, done.stdout  # a config error, as every command says
    assert re.search(r"^PROBLEM +config: .*retention = '30x'", done.stdout, re.M), done.stdout
    assert re.search(r"^ +fix: correct retention in ", done.stdout, re.M), done.stdout
    assert done.stdout.splitlines()[-1] == "1 problem found"


# -- the watch budget ----------------------------------------------------


def test_a_low_watch_limit_is_a_problem(fake_home: FakeHome) -> None:
    if watchplan.inotify_budget() is None:
        pytest.skip("no inotify on this platform")
    _stage_projects(fake_home, 5)
    low = _check(_env(fake_home, AGENTKEEP_INOTIFY_MAX="3"), "watches")
    assert not low.ok
    need = int(re.match(r"(\d+) directories to watch", low.detail).group(1))  # type: ignore[union-attr]
    assert need >= 5 + 2, "SETUP INVALID: the staged project dirs are not counted"
    assert low.fix and "fs.inotify.max_user_watches" in low.fix
    plenty = _check(_env(fake_home), "watches")
    assert plenty.ok, plenty.detail


def test_the_running_daemon_reports_its_own_watches(
    fake_home: FakeHome, daemon: dict[str, object]
) -> None:
    if watchplan.inotify_budget() is None:
        pytest.skip("no inotify on this platform")
    environ = dict(_env(fake_home).environ)
    del environ["AGENTKEEP_INOTIFY_MAX"]  # the daemon's word, not the budget, decides
    env = Env.from_environ(environ)
    assert _check(env, "watches").ok
    daemon["watch"] = {"mode": "mixed", "roots": []}
    mixed = _check(env, "watches")
    assert not mixed.ok and "watch mode mixed" in mixed.detail


# -- the config ----------------------------------------------------------


def test_a_bad_config_is_a_problem_naming_the_key(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "30d"\nretension = "60d"\n')
    checks = _by_name(doctor.run_checks(_env(fake_home)))
    config = checks["config"]
    assert not config.ok
    assert "retension" in config.detail and "prunes nothing" in config.detail
    assert config.fix == f"correct retension in {fake_home.config_path}"
    # The other checks still ran, on the defaults (every agent enabled).
    assert checks["watches"].ok and checks["claude"].ok


def test_no_retention_is_not_a_failure_but_says_how_to_turn_it_on(fake_home: FakeHome) -> None:
    env = _env(fake_home)
    missing = _check(env, "config")
    assert missing.ok and 'retention = "30d"' in missing.detail
    assert not fake_home.state.exists(), "doctor only reads: it made the state dir"
    fake_home.write_config("max_removals = 50\n")
    empty = _check(env, "config")
    assert empty.ok and 'retention = "30d"' in empty.detail
    claude = _check(env, "claude")
    assert claude.ok
    assert "idle over 30 days" in claude.detail and "default 30" in claude.detail


# -- Claude's own sweep --------------------------------------------------


def test_claude_cleanup_shorter_than_retention_deletes_first(fake_home: FakeHome) -> None:
    env = _env(fake_home)
    fake_home.write_config('retention = "30d"\n')
    _claude_settings(fake_home, {"cleanupPeriodDays": 7})
    claude = _check(env, "claude")
    assert not claude.ok
    assert "Claude deletes first" in claude.detail and "30d" in claude.detail
    assert claude.fix == "`agentkeep adopt claude`, so agentkeep decides"
    _claude_settings(fake_home, {"cleanupPeriodDays": 30})
    assert _check(env, "claude").ok


@pytest.mark.parametrize("value", [0, -3, "30", None, 1.5, 1e300])
def test_a_claude_sweep_setting_it_rejects_is_a_problem(fake_home: FakeHome, value: object) -> None:
    """Claude Code 2.1.332 takes a whole number of days from 1 to 2^53-1;
    anything else is a settings error during which it skips its sweep, and
    older versions stopped writing transcripts at 0 (#23710)."""
    env = _env(fake_home)
    fake_home.write_config('retention = "30d"\n')
    _claude_settings(fake_home, {"cleanupPeriodDays": value})
    claude = _check(env, "claude")
    assert not claude.ok, claude.detail
    assert "skips its own clean-up" in claude.detail
    assert claude.fix == "`agentkeep adopt claude`, to leave the clean-up to agentkeep"


def test_claude_default_sweep_against_a_longer_retention(fake_home: FakeHome) -> None:
    env = _env(fake_home)
    fake_home.write_config('retention = "45d"\n')
    claude = _check(env, "claude")
    assert not claude.ok and "default 30" in claude.detail
    assert claude.fix == "`agentkeep adopt claude`, so agentkeep decides"


def test_claude_check_uses_claudes_own_retention(fake_home: FakeHome) -> None:
    env = _env(fake_home)
    fake_home.write_config('retention = "90d"\n[agents.claude]\nretention = "7d"\n')
    _claude_settings(fake_home, {"cleanupPeriodDays": 10})
    claude = _check(env, "claude")
    assert claude.ok and "7d" in claude.detail


@pytest.mark.parametrize(
    "text", ["{not json", '{\n  // a comment\n  "cleanupPeriodDays": 99999\n}']
)
def test_unreadable_claude_settings_are_reported_not_raised(fake_home: FakeHome, text: str) -> None:
    """Claude Code reads plain JSON: with a comment its settings do not
    parse, and 2.1.332 then skips its sweep (tests/real_agents/test_own_sweeps.py
    saw it)."""
    env = _env(fake_home)
    fake_home.write_config('retention = "60d"\n')
    fake_home.claude.mkdir(parents=True)
    settings = fake_home.claude / "settings.json"
    settings.write_text(text)
    claude = _check(env, "claude")
    assert "cannot be read" in claude.detail and "skips its own clean-up" in claude.detail
    assert not claude.ok, "Claude reads none of its settings"
    assert (
        claude.fix == f"correct {settings} (plain JSON: Claude Code takes no comments), then"
        " `agentkeep adopt claude`"
    )


# -- Gemini's own sweep --------------------------------------------------


def _gemini_settings(base: Path, policy: dict[str, object] | None) -> None:
    (base / ".gemini").mkdir(parents=True, exist_ok=True)
    settings = {"general": {"sessionRetention": policy}} if policy is not None else {}
    (base / ".gemini" / "settings.json").write_text(json.dumps(settings))


def test_gemini_session_retention_is_on_unless_turned_off(fake_home: FakeHome) -> None:
    """Gemini CLI 0.33+ deletes sessions idle over 30 days by default: only
    `enabled: false` turns it off."""
    env = _env(fake_home)
    for settings in (None, {}):  # no settings.json, or one that does not say
        if settings is not None:
            _gemini_settings(fake_home.home, settings)
        gemini = _check(env, "gemini")
        assert not gemini.ok and "idle over 30d" in gemini.detail and "by default" in gemini.detail
        assert "8-character id" in gemini.detail
        assert gemini.fix is not None and gemini.fix.startswith("`agentkeep adopt gemini`")
        assert "sessionRetention.enabled to false" in gemini.fix
        assert 'retention = "30d"' in gemini.fix, "no retention: the fix says how to set one"
    _gemini_settings(fake_home.home, {"enabled": True, "maxAge": "14d"})
    gemini = _check(env, "gemini")
    assert not gemini.ok and "idle over 14d" in gemini.detail
    assert "by default" not in gemini.detail
    _gemini_settings(fake_home.home, {"maxCount": 5})
    assert "past the newest 5" in _check(env, "gemini").detail
    _gemini_settings(fake_home.home, {"enabled": False})
    assert _check(env, "gemini").ok


def test_gemini_session_retention_that_does_not_validate_does_not_run(
    fake_home: FakeHome,
) -> None:
    """Gemini skips its clean-up when the policy does not validate."""
    env = _env(fake_home)
    for policy in (
        {"maxAge": "forever"},
        {"maxAge": "0d"},
        {"maxAge": "12h"},  # below the default minRetention of 1d
        {"maxAge": "2d", "minRetention": "1w"},
        {"maxAge": None, "maxCount": 0},
        {"maxAge": ""},
    ):
        _gemini_settings(fake_home.home, policy)
        gemini = _check(env, "gemini")
        assert gemini.ok and "off" in gemini.detail, policy
    _gemini_settings(fake_home.home, {"maxAge": "12h", "minRetention": "1h"})
    assert not _check(env, "gemini").ok


def test_gemini_settings_may_carry_comments(fake_home: FakeHome) -> None:
    """Gemini CLI reads its settings with // and /* */ comments."""
    env = _env(fake_home)
    (fake_home.home / ".gemini").mkdir(parents=True)
    settings = fake_home.home / ".gemini" / "settings.json"
    settings.write_text(
        '{\n  // mine, "not" a string\n  "general": { /* until\n */ "sessionRetention":'
        ' {"enabled": false} },\n  "proxy": "http://host//x /* kept */"\n}\n'
    )
    gemini = _check(env, "gemini")
    assert gemini.ok and "enabled is false" in gemini.detail, gemini.detail
    settings.write_text('{"general": {"sessionRetention": {"maxAge": "7d"}} /* open')
    gemini = _check(env, "gemini")
    assert gemini.ok and "cannot be read" in gemini.detail


def test_gemini_settings_follow_gemini_cli_home(fake_home: FakeHome) -> None:
    other = fake_home.root / "gemini-home"
    _gemini_settings(other, {"enabled": False})
    assert not _check(_env(fake_home), "gemini").ok, "SETUP INVALID: off without GEMINI_CLI_HOME"
    assert _check(_env(fake_home, GEMINI_CLI_HOME=str(other)), "gemini").ok


# -- Qwen's own sweep ----------------------------------------------------


def _qwen_settings(fh: FakeHome, text: str) -> Path:
    home = Path(fh.environ["QWEN_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(text)
    return home / "settings.json"


def test_qwen_sweep_against_agentkeeps_retention(fake_home: FakeHome) -> None:
    """Qwen Code's general.cleanupPeriodDays (default 30) deletes the file
    history, debug logs and subagent transcripts of old sessions; over 0 it
    is days, anything else one hour (0.24.4)."""
    env = _env(fake_home)
    fake_home.write_config('retention = "45d"\n')
    qwen = _check(env, "qwen")
    assert not qwen.ok and "idle over 30 days" in qwen.detail and "default 30" in qwen.detail
    assert "Qwen deletes first" in qwen.detail and "45d" in qwen.detail
    assert qwen.fix == "`agentkeep adopt qwen`, so agentkeep decides"
    for general, period in (
        ('{"cleanupPeriodDays": 0}', "an hour"),
        ('{"cleanupPeriodDays": -1}', "an hour"),
        ('{"cleanupPeriodDays": "soon"}', "an hour"),
        ('{"cleanupPeriodDays": "7"}', "7 days"),
        ('{"cleanupPeriodDays": 44}', "44 days"),
    ):
        _qwen_settings(fake_home, f'{{"general": {general}}}')
        qwen = _check(env, "qwen")
        assert not qwen.ok and f"idle over {period}" in qwen.detail, (general, qwen.detail)
    # Qwen Code reads comments and a byte order mark.
    _qwen_settings(fake_home, '\ufeff{\n  // mine\n  "general": {"cleanupPeriodDays": 45}\n}')
    qwen = _check(env, "qwen")
    assert qwen.ok and "after agentkeep's 45d retention" in qwen.detail, qwen.detail
    _qwen_settings(fake_home, '{"general": {"cleanupPeriodDays": 99999}}')
    fake_home.write_config('enabled = ["claude"]\n')
    assert "does not manage Qwen" in _check(env, "qwen").detail


def test_unreadable_qwen_settings_are_a_problem(fake_home: FakeHome) -> None:
    env = _env(fake_home)
    settings = _qwen_settings(fake_home, '{"general": {"cleanupPeriodDays": 99999},}')
    qwen = _check(env, "qwen")
    assert not qwen.ok and "cannot be read" in qwen.detail and "a comma before" in qwen.detail
    assert qwen.fix == f"correct {settings}, then `agentkeep adopt qwen`"


# -- the pause -----------------------------------------------------------


def test_a_paused_prune_is_a_problem(fake_home: FakeHome) -> None:
    env = _env(fake_home)
    assert _check(env, "pause").ok
    fake_home.state.mkdir(parents=True)
    (fake_home.state / "pause.json").write_text(json.dumps({"reason": "the clock went back"}))
    pause = _check(env, "pause")
    assert not pause.ok and "the clock went back" in pause.detail
    assert pause.fix is not None and "`agentkeep prune`" in pause.fix


# -- the service and the socket ------------------------------------------


def test_service_not_installed_not_running_and_linger(fake_home: FakeHome) -> None:
    env = _env(fake_home)
    missing = _check(env, "service")
    assert not missing.ok and missing.fix == "agentkeep service install"
    _install_unit(env)
    assert _check(env, "service").ok
    stopped = _check(_env(fake_home, FAKE_ACTIVE="failed"), "service")
    assert not stopped.ok
    assert stopped.fix and "journalctl --user -u agentkeep.service" in stopped.fix
    lingerless = _check(_env(fake_home, FAKE_LINGER="no"), "service")
    assert lingerless.ok and "loginctl enable-linger" in lingerless.detail


def test_service_without_a_service_manager(fake_home: FakeHome) -> None:
    """A unit written where no user manager answers (a container): the fix
    is one that works there, not a `systemctl` that cannot."""
    without_systemctl, _ = fake_service_manager(fake_home, AGENTKEEP_SERVICE_KIND="systemd")
    _install_unit(without_systemctl)
    checks = [_check(without_systemctl, "service")]
    # (this one puts a systemctl on PATH: it comes second)
    checks.append(_check(_env(fake_home, FAKE_NO_MANAGER="1"), "service"))
    for check in checks:
        assert not check.ok and "no user service manager answers here" in check.detail
        assert check.fix is not None and "agentkeep service uninstall" in check.fix
    assert "systemctl is not installed" in checks[0].detail
    assert "No medium found" in checks[1].detail


def test_a_restart_loop_is_a_problem_whatever_moment_it_is_seen(fake_home: FakeHome) -> None:
    """systemd shows a loop as waiting to restart, or as starting once more
    after restarts; given up on, as failed. None of them is "running"."""
    _install_unit(_env(fake_home))
    for answers in (
        {"FAKE_ACTIVE": "activating", "FAKE_SUB": "auto-restart", "FAKE_RESTARTS": "12"},
        {"FAKE_ACTIVE": "activating", "FAKE_SUB": "start", "FAKE_RESTARTS": "12"},
        {"FAKE_ACTIVE": "failed", "FAKE_SUB": "failed", "FAKE_RESTARTS": "5"},
    ):
        check = _check(_env(fake_home, FAKE_EXIT="1", **answers), "service")
        assert not check.ok, answers
        assert "12 restarts" in check.detail or "5 restarts" in check.detail, check.detail
        assert "keeps failing to start" in check.detail
        assert check.fix is not None and "journalctl --user -u agentkeep.service" in check.fix
        assert "reset-failed" in check.fix
    starting = _check(_env(fake_home, FAKE_ACTIVE="activating", FAKE_SUB="start"), "service")
    assert starting.ok, "a first start (a long first scan) is no loop"


def test_a_daemon_not_run_by_the_service_is_named(
    fake_home: FakeHome, daemon: dict[str, object]
) -> None:
    _install_unit(_env(fake_home))
    env = _env(fake_home, FAKE_ACTIVE="failed", FAKE_SUB="failed", FAKE_EXIT="10")
    check = _check(env, "service")
    assert not check.ok
    assert f"pid {os.getpid()}" in check.detail and "not run by the service" in check.detail
    assert check.fix is not None and check.fix.startswith(f"stop pid {os.getpid()}, then: ")
    # The service's own daemon answering is the normal case.
    env = _env(fake_home, FAKE_MAINPID=str(os.getpid()), FAKE_SUB="running")
    assert _check(env, "service").ok


def test_socket_reachable_or_not(fake_home: FakeHome, real_daemon: subprocess.Popen[bytes]) -> None:
    env = _env(fake_home)
    check = _check(env, "socket")
    assert check.ok and f"pid {real_daemon.pid}" in check.detail
    nobody = str(fake_home.root / "none.sock")
    elsewhere = _check(_env(fake_home, AGENTKEEP_SOCKET=nobody), "socket")
    assert not elsewhere.ok and "none.sock" in elsewhere.detail
    assert elsewhere.fix is not None and "agentkeep service install" in elsewhere.fix


def test_render_lists_each_problem_with_its_fix() -> None:
    lines: list[str] = []
    checks = [Check("a", True, "fine"), Check("b", False, "broken", "mend it")]
    doctor.render(checks, lines.append)
    assert lines == [
        "ok       a: fine",
        "PROBLEM  b: broken",
        "         fix: mend it",
        "1 problem found",
    ]
    assert doctor.exit_code(checks) == 1 and doctor.exit_code(checks[:1]) == 0


def test_doctor_json_is_one_document(fake_home: FakeHome) -> None:
    fake_home.environ.update(_env(fake_home).environ)
    done = fake_home.cli("doctor", "--json")
    assert done.returncode == 1, done.stderr
    names = [c["name"] for c in json.loads(done.stdout)]
    assert names == [
        "dependencies",
        "config",
        "watches",
        "service",
        "socket",
        "pause",
        "state disk",
        "claude",
        "gemini",
        "listing",
        "qwen",
    ]
