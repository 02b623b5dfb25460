"""Finishing the journal keeps every keep rule.

A prune journals a whole batch before its first removal. When it is killed
right then, the next run finds journal entries for sessions whose removal
never began, orphans among them (a `file-history/<id>` left by a transcript
Claude's own sweep deleted: no primary record). Finishing is a removal like
any other: an orphan pinned, written or opened since the kill stays.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agentkeep.journal import Journal
from build_agents import make_zero_session, zero_root
from build_claude import FILE_HISTORY, SESSION_ENV, make_session
from fakehome import FakeHome, Spawn

pytestmark = pytest.mark.slow

# Killed at the first path a removal would act on: by then the batch is
# journaled whole, and nothing of it is removed yet.
KILL_AT_FIRST_LEAF = """
import os, signal
import agentkeep.rmtree as rmtree

def kill(path):
    os.kill(os.getpid(), signal.SIGKILL)

rmtree._before_leaf = kill
from agentkeep.cli import main
main()
"""


READY_THEN_WAIT = "import time; print('ready', flush=True); time.sleep(600)"


def killed_prune(fh: FakeHome) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AT_FIRST_LEAF, "prune", "--older-than", "30d"],
        env=fh.environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != -signal.SIGKILL:
        pytest.fail(f"SETUP INVALID: the prune was not killed ({proc.returncode}): {proc.stderr}")


def journaled(fh: FakeHome) -> set[str]:
    return {e.id for e in Journal(fh.state).pending()}


def exists(paths: list[Path]) -> bool:
    return all(os.path.lexists(p) for p in paths)


def test_finishing_an_orphan_applies_pins_writes_and_live_processes(
    fake_home: FakeHome, spawn: Spawn
) -> None:
    orphans = {
        why: make_session(fake_home, kinds=[FILE_HISTORY, SESSION_ENV], age_days=50)
        for why in ("pinned", "written", "live", "idle")
    }
    killed_prune(fake_home)
    if journaled(fake_home) != {s.id for s in orphans.values()}:
        pytest.fail(f"SETUP INVALID: the journal names {journaled(fake_home)}")
    if not all(exists(s.all_paths()) for s in orphans.values()):
        pytest.fail("SETUP INVALID: something was removed before the kill")

    # After the kill, before the restart: a person pins one, an agent writes
    # into another, and a process opens the third.
    assert fake_home.cli("pin", "claude", orphans["pinned"].id).returncode == 0
    written = orphans["written"].artifacts[FILE_HISTORY][0] / "after-the-kill.txt"
    written.write_text("new work")
    holder = spawn(
        [sys.executable, "-c", READY_THEN_WAIT, "--resume", orphans["live"].id], ready=True
    )
    assert holder.poll() is None, "SETUP INVALID: the live process is gone"

    proc = fake_home.cli("prune", "--older-than", "30d", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    kept = {k["id"]: k["reason"] for k in report["kept"]}
    assert kept[orphans["pinned"].id] == "pinned"
    assert kept[orphans["written"].id] == "updated"
    assert kept[orphans["live"].id] == "live"
    for why in ("pinned", "written", "live"):
        assert exists(orphans[why].all_paths()), f"the {why} orphan lost something"
    assert [r["id"] for r in report["removed"]] == [orphans["idle"].id]
    assert not any(os.path.lexists(p) for p in orphans["idle"].all_paths())
    assert journaled(fake_home) == set(), "every entry was judged and settled"


@pytest.mark.parametrize("trash", ["0", "7d"])
def test_a_half_removed_session_is_still_finished(fake_home: FakeHome, trash: str) -> None:
    """The directories an interrupted removal emptied have new mtimes: that
    is our own doing, not a write, and the session is finished."""
    fake_home.write_config(f'trash = "{trash}"\n')
    s = make_session(fake_home, age_days=50)
    seam = """
import os, signal
import agentkeep.rmtree as rmtree
count = 0
def kill(path):
    global count
    count += 1
    if count > 4:
        os.kill(os.getpid(), signal.SIGKILL)
rmtree._before_leaf = kill
from agentkeep.cli import main
main()
"""
    proc = subprocess.run(
        [sys.executable, "-c", seam, "prune", "--older-than", "30d"],
        env=fake_home.environ,
        capture_output=True,
        timeout=120,
    )
    half = not exists(s.all_paths()) and any(os.path.lexists(p) for p in s.all_paths())
    if proc.returncode != -signal.SIGKILL or not half:
        pytest.fail("SETUP INVALID: the session was not left half removed")
    report = json.loads(fake_home.cli("prune", "--older-than", "30d", "--json").stdout)
    assert [r["id"] for r in report["removed"]] == [s.id], report
    assert not any(os.path.lexists(p) for p in s.all_paths())


@pytest.mark.parametrize("trash", ["0", "7d"])
def test_finishing_honours_the_agent_s_own_lock_as_a_fresh_removal_does(
    fake_home: FakeHome, spawn: Spawn, trash: str
) -> None:
    """Two old zero sessions; a prune is killed once the first lost its
    metadata.json (its removal is journaled and half done). Then a zero
    process opens each, holding its `lease.lock` shared as zero does. The
    next prune keeps both `held`: finishing takes every lease of a session,
    the agent's own lock files among them, exactly as a fresh removal does."""
    fake_home.write_config(f'trash = "{trash}"\n')
    root = zero_root(Path(fake_home.environ["XDG_DATA_HOME"]))
    # Ids no other process's command line holds as a token (one that did
    # would keep its session `live`: the conformance suite runs beside).
    ids = (f"half-{uuid.uuid4().hex}", f"whole-{uuid.uuid4().hex}")
    half, whole = (make_zero_session(root, sid, days=50) for sid in ids)
    seam = """
import os, signal
import agentkeep.rmtree as rmtree
def kill(path):
    if not path.endswith("metadata.json"):
        os.kill(os.getpid(), signal.SIGKILL)
rmtree._before_leaf = kill
from agentkeep.cli import main
main()
"""
    proc = subprocess.run(
        [sys.executable, "-c", seam, "prune", "--older-than", "30d"],
        env=fake_home.environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    metadata = {s.id: root / s.id / "metadata.json" for s in (half, whole)}
    states = {sid: p.exists() for sid, p in metadata.items()}
    if proc.returncode != -signal.SIGKILL or sorted(states.values()) != [False, True]:
        pytest.fail(f"SETUP INVALID: not one half-removed zero session: {states} {proc.stderr}")
    (done,) = [sid for sid, there in states.items() if not there]
    if journaled(fake_home) != {half.id, whole.id}:
        pytest.fail(f"SETUP INVALID: the journal names {journaled(fake_home)}")
    for sid in (half.id, whole.id):
        # The lock's path in the environment, not on a command line (a
        # command line naming the id would keep it `live` instead).
        environ = dict(fake_home.environ, LOCK=str(root / sid / "lease.lock"))
        hold = 'exec 9<"$LOCK"; flock -s 9; echo ready; exec sleep 600'
        spawn(["sh", "-c", hold], environ, ready=True)

    report = json.loads(fake_home.cli("prune", "--older-than", "30d", "--json").stdout)
    kept = {k["id"]: k["reason"] for k in report["kept"]}
    assert report["removed"] == [], report
    assert kept == {half.id: "held", whole.id: "held"}, report
    assert (root / done / "events.jsonl").exists(), "finishing removed a held session"
    assert done in journaled(fake_home), "a held finish must wait for a later run"
