"""A state file half written: what a writer SIGKILLed before its rename
leaves (its temporary file) is cleared by the next prune, and nothing else
is: not a live writer's temporary file, not the user's files in a trash
entry, not a name that only looks like agentkeep's.

Each write goes through a temporary file its writer holds a flock on until
the rename (fsio.temporary); statefiles.clear_stale, as a prune
starts, removes those nobody holds.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from hardening_util import cli_argv, run_cli

from agentkeep import fsio, statefiles
from build_claude import make_session
from fakehome import FakeHome, prune_here
from trees import kept_files
from waiting import wait_until

pytestmark = pytest.mark.slow

# The first write whose temporary file (or, for a journal batch, whose
# name) begins with $KILL_WRITING is SIGKILLed once that file holds its
# data, before the rename.
KILLED_MID_WRITE = """
import os, signal
import agentkeep.journal as journal
import agentkeep.statefiles as statefiles
WHICH = os.environ["KILL_WRITING"]
def _written(path):
    if path.name.startswith(WHICH):
        os.kill(os.getpid(), signal.SIGKILL)
statefiles._write_hook = _written
journal._write_hook = _written
"""
# The temporary file of a pin waits for $GATE/go once it holds its data
# (its path noted in $GATE/writing first).
PAUSED_MID_WRITE = """
import os, pathlib, time
import agentkeep.statefiles as statefiles
gate = pathlib.Path(os.environ["GATE"])
def _paused(tmp):
    (gate / "writing").write_text(str(tmp))
    deadline = time.monotonic() + 60
    while not (gate / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
statefiles._write_hook = _paused
"""
OURS = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def temporaries(state: Path) -> list[Path]:
    """agentkeep's temporary files in the state dir, outside trash roots."""
    return sorted(p for p in state.rglob("*") if OURS.fullmatch(p.name) and "roots" not in p.parts)


def decoys(fh: FakeHome) -> list[Path]:
    """Files a prune must leave: the user's file with an agentkeep-like
    name in a trash entry not compressed yet, and names that only look like
    agentkeep's."""
    [roots] = list((fh.state / "trash").glob("*/*/roots"))
    made = [
        next(p for p in roots.rglob("*") if p.is_dir()) / ".notes.json.abcdefgh.tmp",
        fh.state / "notes.tmp",
        fh.state / ".notes.json.abcdefgh.tmpx",
        fh.state / ".pins.json.abcd1234",
    ]
    for path in made:
        path.write_text("{}")
    return made


@pytest.mark.parametrize(
    ("writing", "command"),
    [
        ("batch-", "prune"),
        (".entry.json.", "prune"),
        (".last_prune.json.", "prune"),
        (".pins.json.", "pin"),
    ],
)
def test_a_write_killed_half_way_is_cleared_by_the_next_prune(
    fake_home: FakeHome, writing: str, command: str
) -> None:
    fake_home.write_config('retention = "30d"\ntrash = "7d"\n', seen=True)
    make_session(fake_home, age_days=60)
    make_session(fake_home, age_days=1)  # a recent one: the prune does not pause
    # A trash entry, not compressed: a prune in-process packs nothing.
    assert prune_here(fake_home) is not None
    kept = decoys(fake_home)
    old = [make_session(fake_home, age_days=40 + n) for n in range(3)]
    args = ("pin", "claude", old[0].id) if command == "pin" else ("prune", "--json")

    killed = run_cli(fake_home, *args, seams=KILLED_MID_WRITE, env={"KILL_WRITING": writing})
    left = temporaries(fake_home.state)
    if killed.returncode != -signal.SIGKILL or not left:
        pytest.fail(f"SETUP INVALID: no write of {writing} killed half way: {killed.stderr}")

    done = run_cli(fake_home, "prune", "--json")

    assert done.returncode == 0, done.stderr
    assert temporaries(fake_home.state) == [], "a killed writer's temporary file is left"
    assert all(p.exists() or packed(p) for p in kept), "a file not agentkeep's temporary one went"


def packed(path: Path) -> bool:
    """`path`, in a trash entry's roots/, is kept in the entry's archive:
    the prune's packing took it in whole."""
    if "roots" not in path.parts:
        return False
    entry = Path(*path.parts[: path.parts.index("roots")])
    return str(path.relative_to(entry)) in kept_files(entry)


def test_a_live_writers_temporary_file_outlasts_a_prune(
    fake_home: FakeHome, tmp_path: Path
) -> None:
    fake_home.write_config('retention = "30d"\n', seen=True)
    s = make_session(fake_home, age_days=1)
    gate = tmp_path / "gate"
    gate.mkdir()
    stale = fake_home.state / ".pause.json.abcdefgh.tmp"  # a killed writer's, held by nobody
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("{")
    pin = subprocess.Popen(
        cli_argv(PAUSED_MID_WRITE, "pin", "claude", s.id),
        env={**fake_home.environ, "GATE": str(gate)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until((gate / "writing").exists, "the pin writing pins.json")
        writing = Path((gate / "writing").read_text())

        done = run_cli(fake_home, "prune", "--json")

        if pin.poll() is not None or stale.exists():
            pytest.fail("SETUP INVALID: the prune did not clear while the pin was writing")
        assert done.returncode == 0, done.stderr
        assert writing.exists(), "the prune took a live writer's temporary file"
    finally:
        (gate / "go").touch()
        out, err = pin.communicate(timeout=60)
    assert pin.returncode == 0, err
    assert json.loads((fake_home.state / "pins.json").read_text()) == [["claude", s.id]]
    assert temporaries(fake_home.state) == []


def test_a_temporary_file_cleared_before_its_writer_locked_it_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between its making and its lock, a temporary file looks like a
    killed writer's: taken then, it is made again, and the write holds."""
    made: list[str] = []
    mkstemp = tempfile.mkstemp

    def cleared_at_once(*args: object, **kwargs: object) -> tuple[int, str]:
        fd, name = mkstemp(*args, **kwargs)  # type: ignore[call-overload]
        made.append(name)
        if len(made) == 1 and statefiles.clear_stale(tmp_path) != [Path(name)]:
            pytest.fail("SETUP INVALID: the new temporary file was not cleared")
        return fd, name

    monkeypatch.setattr(fsio.tempfile, "mkstemp", cleared_at_once)
    statefiles.write_json(tmp_path / "pins.json", [["claude", "x"]])

    assert len(made) == 2, "the writer wrote into a file no longer there"
    assert json.loads((tmp_path / "pins.json").read_text()) == [["claude", "x"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pins.json"]
