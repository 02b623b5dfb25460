"""A bad config is an error for every command that reads it, not only prune.

`ls`, `du` and `scan` used to exit 0 on a broken config and advise "No
retention is set ... add this line". Every command but `service` (and the
daemon, which serves on and prunes nothing) now exits 2 naming the key and
the value; `status` and `doctor` show the error, then exit 2.
"""

from __future__ import annotations

import json

import pytest

from build_claude import make_session
from fakehome import FakeHome
from test_daemon_serve import start_daemon, stop_daemons  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

BAD = {
    "a number for a duration": ("retention = 30\n", "retention"),
    "an unknown key": ('retention = "30d"\nretension = "30d"\n', "retension"),
    "an unknown agent": ('enabled = ["kodex"]\n', "enabled"),
    "no removals": ("max_removals = 0\n", "max_removals"),
    "a store at home": ('[[stores]]\nname = "s"\nroot = "~"\ndepth = 1\n', "stores[0].root"),
}
SESSION = "0b7c0000-0000-4000-8000-000000000001"
COMMANDS = [
    ["scan"],
    ["ls"],
    ["ls", "--json"],
    ["du"],
    ["show", "claude", SESSION],
    ["prune", "--dry-run", "--older-than", "30d"],
    ["purge", "claude", SESSION, "--dry-run"],
    ["pin", "claude", SESSION],
    ["trash"],
    ["restore", "claude", SESSION],
    ["hold", "claude", SESSION, "--", "true"],
]


@pytest.mark.parametrize("bad", sorted(BAD))
def test_every_command_refuses_a_bad_config_naming_the_key(fake_home: FakeHome, bad: str) -> None:
    make_session(fake_home, id=SESSION, age_days=40)
    text, key = BAD[bad]
    path = fake_home.write_config(text)
    for args in COMMANDS:
        proc = fake_home.cli(*args)
        assert proc.returncode == 2, f"{args}: {proc.returncode}\n{proc.stdout}{proc.stderr}"
        assert key in proc.stderr and str(path) in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert "No retention is set" not in proc.stdout + proc.stderr
    assert not (fake_home.state / "pins.json").exists()


def test_status_shows_the_error_without_the_hint_and_exits_2(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40)
    fake_home.write_config("retention = 30\n")
    for served in (False, True):
        if served:
            start_daemon(fake_home)
        proc = fake_home.cli("status")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "retention" in proc.stdout and "config error" in proc.stdout
        assert "No retention is set" not in proc.stdout
        doc = json.loads(fake_home.cli("status", "--json").stdout)
        assert doc["config"]["ok"] is False and "retention" in doc["config"]["error"]
    doctor = fake_home.cli("doctor")
    assert doctor.returncode == 2 and "retention" in doctor.stdout


def test_a_config_named_by_agentkeep_config_must_exist(fake_home: FakeHome) -> None:
    missing = fake_home.root / "agentkeep-confg.toml"
    env = {**fake_home.environ, "AGENTKEEP_CONFIG": str(missing)}
    proc = fake_home.cli("ls", env=env)
    assert proc.returncode == 2
    assert str(missing) in proc.stderr and "does not exist" in proc.stderr


@pytest.mark.parametrize("command", [["ls"], ["serve"]])
def test_a_bad_log_level_is_one_line(fake_home: FakeHome, command: list[str]) -> None:
    env = {**fake_home.environ, "AGENTKEEP_LOG_LEVEL": "verbose"}
    proc = fake_home.cli(*command, env=env, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "agentkeep: AGENTKEEP_LOG_LEVEL must be one of debug, info, warning, error, not 'verbose'"
    ]
