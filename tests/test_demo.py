"""deploy/demo.py: a demo home holding sessions of every agent, shown with
the real CLI in the demo user's environment only, ending with what to do
next; its socket dir under its own root (or removed when it cannot be).

Every `agentkeep` the demo runs is a recorder (its $AGENTKEEP) that writes
down the environment it was given and then runs the real CLI, so a test
sees exactly which home, tmp and socket dirs the demo showed agentkeep.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentkeep.demo import SOCKET_PATH_MAX
from fakehome import FakeHome

pytestmark = pytest.mark.slow

DEMO = Path(__file__).resolve().parent.parent / "deploy" / "demo.py"
AGENTS = {"claude", "codex", "opencode", "gemini", "grok", "zero"}
# The variables that place a user's files: each must point into the demo.
PLACES = (
    "HOME",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
    "TMPDIR",
    "TMP",
    "TEMP",
    "AGENTKEEP_SYSTEM_TMP",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "COPILOT_HOME",
    "QWEN_HOME",
    "QWEN_RUNTIME_DIR",
    "PI_CODING_AGENT_DIR",
)

RECORDER = """#!{python}
import json, os, sys
seen = dict(os.environ, RUNTIME_EXISTED=str(os.path.isdir(os.environ["XDG_RUNTIME_DIR"])))
with open({log!r}, "a") as f:
    f.write(json.dumps(seen) + "\\n")
os.execv(sys.executable, [sys.executable, "-m", "agentkeep", *sys.argv[1:]])
"""


@dataclass
class DemoRun:
    proc: subprocess.CompletedProcess[str]
    environs: list[dict[str, str]]  # what each `agentkeep` it ran was given

    def section(self, command: str) -> list[str]:
        """The lines `agentkeep <command>` printed."""
        parts = self.proc.stdout.split("\n$ agentkeep ")
        found = [p for p in parts if p.startswith(command + " ")]
        assert len(found) == 1, self.proc.stdout
        return found[0].splitlines()[1:]


def run_demo(fh: FakeHome, root: Path) -> DemoRun:
    log = fh.root / "agentkeep-calls.jsonl"
    log.unlink(missing_ok=True)
    recorder = fh.root / "recording-agentkeep"
    recorder.write_text(RECORDER.format(python=sys.executable, log=str(log)))
    recorder.chmod(0o755)
    proc = subprocess.run(
        [sys.executable, str(DEMO), str(root)],
        env={**fh.environ, "AGENTKEEP": str(recorder)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = log.read_text().splitlines() if log.exists() else []
    return DemoRun(proc, [json.loads(line) for line in lines])


def demo_cli(environ: dict[str, str], *args: str) -> object:
    env = {k: v for k, v in environ.items() if k != "RUNTIME_EXISTED"}
    proc = subprocess.run(
        [sys.executable, "-m", "agentkeep", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def tmp_dirs() -> set[str]:
    """The socket dirs a fake user may leave in the real /tmp."""
    return set(glob.glob("/tmp/akrt-*")) | set(glob.glob("/tmp/agentkeep-demo-*"))


def test_the_demo_shows_every_agent_and_says_what_to_do_next(fake_home: FakeHome) -> None:
    root = fake_home.root / "demo"
    before = tmp_dirs()
    run = run_demo(fake_home, root)
    left = tmp_dirs() - before
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.proc.stderr == "", "the demo printed on stderr"

    # Every command ran in the demo user's environment, its socket dir
    # included: nothing of the real home, nor of the real /tmp. Under a
    # deep $TMPDIR (every macOS one) the socket dir cannot lie under the
    # root: then it is the demo's own in /tmp, removed at the end.
    assert len(run.environs) == 4, run.proc.stdout
    deep = len(os.fsencode(root / "run" / "agentkeep" / "agentkeep.sock")) > SOCKET_PATH_MAX
    for environ in run.environs:
        for name in PLACES:
            if name == "XDG_RUNTIME_DIR" and deep:
                assert Path(environ[name]).parent == Path("/tmp"), environ[name]
                continue
            assert Path(environ[name]).is_relative_to(root), (name, environ[name])
    runtime = run.environs[0]["XDG_RUNTIME_DIR"]
    assert runtime not in left and not [d for d in left if "agentkeep-demo-" in d], left
    assert not deep or not Path(runtime).exists(), "the demo's socket dir in /tmp was left"

    ls_rows = [line.split()[0] for line in run.section("ls")[1:] if line[:1].islower()]
    assert set(ls_rows) == AGENTS, run.section("ls")
    sessions = demo_cli(run.environs[0], "ls")
    assert isinstance(sessions, list)
    assert {s["agent"] for s in sessions} == AGENTS

    # The dry run would trash every session idle past 30 days but the old
    # parent of a recent fork, kept as its ancestor, and nothing fresher.
    cutoff = datetime.now(UTC) - timedelta(days=30)
    by_id = {s["id"]: s for s in sessions}
    old = {s["id"] for s in sessions if datetime.fromisoformat(s["last_activity"]) < cutoff}
    forks = [s for s in sessions if s["parent"] in old]
    assert len(forks) == 1, "SETUP INVALID: the demo has no recent fork of an old session"
    parent = forks[0]["parent"]
    prune = run.section("prune")
    kept_at = next(i for i, line in enumerate(prune) if line.startswith("KEPT"))
    trashed = {line.split()[1] for line in prune[1:kept_at]}
    assert trashed == old - {parent}
    assert {by_id[sid]["agent"] for sid in trashed} == AGENTS
    kept = prune[kept_at + 1].split()
    assert kept[1:3] == [parent, "ancestor"], prune

    # It ends with what the person saw and what to do next.
    steps = run.proc.stdout.rsplit("\n\n", 1)[1]
    assert steps.startswith(f"This was a demo home under {root}:"), steps
    assert "agentkeep prune --dry-run --older-than 30d" in steps
    assert f'add  retention = "30d"  to {fake_home.config_path}' in steps
    assert "agentkeep ui" in steps
    assert steps.endswith(f"sh {DEMO.with_name('install.sh')} --uninstall\n"), steps


def test_a_demo_too_deep_for_a_socket_path_removes_its_socket_dir(fake_home: FakeHome) -> None:
    root = fake_home.root / ("d" * 60) / ("e" * 60)
    run = run_demo(fake_home, root)
    assert run.proc.returncode == 0, run.proc.stderr
    runtime = {e["XDG_RUNTIME_DIR"] for e in run.environs}
    assert len(runtime) == 1
    outside = Path(runtime.pop())
    assert not outside.is_relative_to(root)
    assert all(e["RUNTIME_EXISTED"] == "True" for e in run.environs)
    # A short one of its own in /tmp, and removed.
    assert outside.parent == Path("/tmp") and outside.name.startswith("agentkeep-demo-")
    assert len(os.fsencode(outside / "agentkeep" / "agentkeep.sock")) < 100
    assert not outside.exists()


def test_a_second_run_rebuilds_the_demo_and_another_folder_is_refused(
    fake_home: FakeHome,
) -> None:
    root = fake_home.root / "demo"
    assert run_demo(fake_home, root).proc.returncode == 0
    stale = root / "home" / "left-from-the-first-run"
    stale.write_text("x")
    again = run_demo(fake_home, root)
    assert again.proc.returncode == 0, again.proc.stderr
    assert not stale.exists(), "the demo was not built afresh"
    assert (root / ".agentkeep-demo").is_file()

    mine = fake_home.root / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    refused = run_demo(fake_home, mine)
    assert refused.proc.returncode == 2
    assert (
        refused.proc.stderr
        == f"demo: {mine} exists and is not a demo home; choose another folder\n"
    )
    assert refused.environs == [], "agentkeep ran on a folder that is not a demo"
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "mine"
