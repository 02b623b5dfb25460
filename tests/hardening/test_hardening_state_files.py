"""Damaged state files never make agentkeep remove more.

A damaged `pins.json` (empty, cut short, NUL-filled, of another shape) used
to read as "no pins": a warning, then every pinned session pruned. Now it
stops the prune, naming the file, until a person fixes or deletes it; a
damaged pause file keeps the scheduled prune paused; a damaged record of
the last prune pauses it too.
"""

from __future__ import annotations

import json
import os

import pytest

from agentkeep.core.context import Context
from agentkeep.core.pruning import prune
from agentkeep.paths import Env
from agentkeep.prune.pause import read_pause
from build_claude import make_session
from fakehome import FakeHome

pytestmark = pytest.mark.slow

DAMAGED = {
    "empty": b"",
    "truncated": b'[["claude", "0b7c',
    "nul-filled": b"\0" * 4096,
    "a dict": b'{"claude": ["x"]}',
    "strings": b'["claude", "x"]',
    "not utf-8": b'[["claude", "\xff"]]',
}


def everything(sessions: list) -> bool:
    return all(os.path.lexists(p) for s in sessions for p in s.all_paths())


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_pins_file_stops_the_prune_and_removes_nothing(
    fake_home: FakeHome, damage: str
) -> None:
    pinned = make_session(fake_home, age_days=50)
    other = make_session(fake_home, age_days=50)
    assert fake_home.cli("pin", "claude", pinned.id).returncode == 0
    pins = fake_home.state / "pins.json"
    assert json.loads(pins.read_text()) == [["claude", pinned.id]], "SETUP INVALID"
    pins.write_bytes(DAMAGED[damage])

    for args in (["prune", "--older-than", "30d"], ["prune", "--older-than", "30d", "--json"]):
        proc = fake_home.cli(*args)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert str(pins) in proc.stderr and "damaged" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert everything([pinned, other]), "nothing removed"
    purge = fake_home.cli("purge", "claude", other.id)
    assert purge.returncode == 1 and str(pins) in purge.stderr
    assert everything([pinned, other])

    refused = fake_home.cli("pin", "claude", other.id)
    assert refused.returncode == 1 and str(pins) in refused.stderr
    assert pins.read_bytes() == DAMAGED[damage], "a damaged file is never overwritten"
    listed = fake_home.cli("ls")
    assert listed.returncode == 1 and str(pins) in listed.stderr

    pins.unlink()  # a person deletes it: everything works again
    assert fake_home.cli("ls").returncode == 0


@pytest.mark.parametrize("damage", ["empty", "truncated", "nul-filled", "strings"])
def test_a_damaged_pause_file_keeps_the_prune_paused(fake_home: FakeHome, damage: str) -> None:
    fake_home.state.mkdir(parents=True, exist_ok=True)
    (fake_home.state / "pause.json").write_bytes(DAMAGED[damage])
    reason = read_pause(fake_home.state)
    assert reason is not None and "pause file cannot be read" in reason


def test_a_damaged_last_prune_record_pauses_the_scheduled_prune(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=50)
    recent = make_session(fake_home, age_days=0.5)
    fake_home.write_config('retention = "30d"\n')
    fake_home.state.mkdir(parents=True, exist_ok=True)
    (fake_home.state / "last_prune.json").write_bytes(b"\0\0\0")
    ctx = Context.open(Env.from_environ(fake_home.environ))
    try:
        report = prune(ctx, scheduled=True)
    finally:
        ctx.index.close()
    assert report is not None
    assert not report.removed
    assert report.paused is not None and "last prune cannot be read" in report.paused
    assert everything([recent])


def test_a_prune_lock_that_cannot_be_taken_is_one_clear_line(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=50)
    (fake_home.state / "prune.lock").mkdir(parents=True)  # not a file: it cannot be locked
    proc = fake_home.cli("prune", "--older-than", "30d")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "prune lock" in proc.stderr and "prune.lock" in proc.stderr
    assert everything([s])
