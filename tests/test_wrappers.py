"""agentkeep's own ancestors are not holders.

`timeout 60 agentkeep purge claude <id>`, `sh -c 'agentkeep show ...'`, a
cron or ssh line: the process that runs agentkeep names the session in its
command line only because it asks about it. Such ancestors (those whose
command line runs agentkeep) do not make the session live, whether the CLI
works in-process or the daemon answers; any other process naming the id
still does, an ancestor that is using the session (a `claude --resume <id>`
whose hook runs agentkeep) included.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest

from build_claude import make_session
from fakehome import FakeHome, Spawn
from test_daemon_serve import start_daemon, stop_daemons  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

AGENTKEEP = [sys.executable, "-m", "agentkeep"]
READY_THEN_WAIT = "import time; print('ready', flush=True); time.sleep(600)"
# A stand-in for an agent that runs agentkeep from a hook: its own command
# line names the session it has open, and it runs the hook's command (from
# its settings, not its command line) through a shell.
HOOK = "import os, subprocess, sys; sys.exit(subprocess.call(os.environ['HOOK'], shell=True))"


def run(fh: FakeHome, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=fh.environ, capture_output=True, text=True, timeout=120)


def state(fh: FakeHome, sid: str, wrap: list[str]) -> str:
    proc = run(fh, [*wrap, *AGENTKEEP, "show", "claude", sid, "--json"])
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["state"])


@pytest.mark.parametrize("served", [False, True], ids=["in-process", "by-the-daemon"])
def test_a_wrapper_that_runs_agentkeep_does_not_hold_the_session(
    fake_home: FakeHome, served: bool
) -> None:
    if shutil.which("timeout") is None:
        pytest.skip("timeout(1) is not installed")
    s = make_session(fake_home, age_days=40)
    if served:
        start_daemon(fake_home)
    line = shlex.join([*AGENTKEEP, "show", "claude", s.id, "--json"])
    shell = run(fake_home, ["sh", "-c", f"{line}; exit $?"])
    assert shell.returncode == 0, shell.stderr
    assert json.loads(shell.stdout)["state"] == "idle"
    assert state(fake_home, s.id, ["timeout", "60"]) == "idle"

    purged = run(fake_home, ["timeout", "60", *AGENTKEEP, "purge", "claude", s.id, "--json"])
    assert purged.returncode == 0, purged.stderr
    assert [r["id"] for r in json.loads(purged.stdout)["removed"]] == [s.id]


@pytest.mark.parametrize("served", [False, True], ids=["in-process", "by-the-daemon"])
def test_other_processes_naming_the_id_still_hold_it(
    fake_home: FakeHome, spawn: Spawn, served: bool
) -> None:
    s = make_session(fake_home, age_days=40)
    if served:
        start_daemon(fake_home)
    other = spawn([sys.executable, "-c", READY_THEN_WAIT, "--resume", s.id], ready=True)
    assert other.poll() is None, "SETUP INVALID: the process naming the id is gone"
    assert state(fake_home, s.id, ["timeout", "60"]) == "live"
    refused = run(fake_home, ["timeout", "60", *AGENTKEEP, "purge", "claude", s.id])
    assert refused.returncode == 4, refused.stderr
    assert all(p.exists() for p in s.all_paths())


def test_an_ancestor_using_the_session_still_holds_it(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=40)
    hook = shlex.join([*AGENTKEEP, "purge", "claude", s.id])
    hooked = subprocess.run(
        [sys.executable, "-c", HOOK, "--resume", s.id],
        env={**fake_home.environ, "HOOK": hook},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert hooked.returncode == 4, hooked.stdout + hooked.stderr
    assert "live" in hooked.stderr
    assert all(p.exists() for p in s.all_paths())


@pytest.mark.parametrize("served", [False, True], ids=["in-process", "by-the-daemon"])
@pytest.mark.parametrize("naming", ["add-dir", "interpreter"])
def test_an_agent_whose_command_line_holds_the_word_agentkeep_still_holds_its_session(
    fake_home: FakeHome, served: bool, naming: str
) -> None:
    """An agent given `--add-dir ~/src/agentkeep`, or run by an interpreter
    in a clone named agentkeep, that runs agentkeep from a hook: its command
    line holds the word, but it does not run agentkeep; it uses the session."""
    s = make_session(fake_home, age_days=40)
    if served:
        start_daemon(fake_home)
    interpreter = sys.executable
    extra: list[str] = []
    if naming == "add-dir":
        extra = ["--add-dir", str(fake_home.root / "src" / "agentkeep")]
    else:
        clone = fake_home.root / "src" / "agentkeep" / "bin"
        clone.mkdir(parents=True)
        (clone / "python3").symlink_to(sys.executable)
        interpreter = str(clone / "python3")
    hook = shlex.join([*AGENTKEEP, "purge", "claude", s.id])
    hooked = subprocess.run(
        [interpreter, "-c", HOOK, *extra, "--resume", s.id],
        env={**fake_home.environ, "HOOK": hook},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert hooked.returncode == 4, hooked.stdout + hooked.stderr
    assert "live" in hooked.stderr
    assert all(p.exists() for p in s.all_paths())
