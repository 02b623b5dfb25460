"""The text a person reads: every table at 80 columns (COLUMNS decides in a
pipe too), against snapshots in tests/snapshots/ (AGENTKEEP_UPDATE_SNAPSHOTS=1
rewrites them; read the diff before committing one). tests/test_terminal.py
runs the same tables in a real terminal."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from build_claude import make_session
from fakehome import FakeHome

pytestmark = pytest.mark.slow

SNAPSHOTS = Path(__file__).parent / "snapshots"
WIDTH = "80"

IDS = {
    "old": "0b7c4f6e-1a2b-4c3d-8e9f-0a1b2c3d4e5f",
    "fork": "1c8d5a7f-2b3c-4d4e-9f0a-1b2c3d4e5f60",
    "big": "2d9e6b80-3c4d-4e5f-a01b-2c3d4e5f6071",
    "recent": "3eaf7c91-4d5e-4f60-b12c-3d4e5f607182",
}


LONG = "/home/you/src/github.com/an-organisation/a-long-project-name"


def build(fh: FakeHome) -> None:
    make_session(fh, IDS["old"], cwd="/home/you/webapp", age_days=75.5)
    make_session(fh, IDS["fork"], cwd="/home/you/webapp", age_days=3.5, parent=IDS["old"])
    make_session(fh, IDS["big"], cwd="/home/you/cli-tool", age_days=45.5, pad=40_000)
    make_session(fh, IDS["recent"], cwd=LONG, age_days=0.25)


def text(fh: FakeHome, *args: str, code: int = 0) -> str:
    environ = dict(fh.environ, COLUMNS=WIDTH, NO_COLOR="1", TERM="dumb")
    proc = fh.cli(*args, env=environ)
    assert proc.returncode == code, proc.stderr
    lines = proc.stdout.replace(str(fh.root), "<root>").splitlines()
    if "--wide" not in args:
        too_wide = [line for line in lines if len(line) > int(WIDTH) and "<root>" not in line]
        assert not too_wide, too_wide
    return "\n".join(_steady(line.rstrip()) for line in lines) + "\n"


def _steady(line: str) -> str:
    """What changes from run to run: a scan's own time, the names of
    Claude's registry files (a dead pid each test process counts up) and of
    its recordings (the time they began, in ms), and the trash's compressed
    size (the archive holds the files' times, which the build sets from now:
    3.1 or 3.2 kB)."""
    line = re.sub(r"in \d+\.\d\d s$", "in <t> s", line)
    line = re.sub(r"(kB )\d\.\d kB( +now in)", r"\1#.# kB\2", line)
    line = re.sub(r"(kept compressed in )\d\.\d kB$", r"\1#.# kB", line)
    line = re.sub(r"-\d{13}\.cast$", "-<ms>.cast", line)
    return re.sub(r"/sessions/\d+(\.[0-9a-f]+)?(\.key|\.json)$", r"/sessions/<pid>\2", line)


def check(name: str, got: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("AGENTKEEP_UPDATE_SNAPSHOTS"):
        path.write_text(got)
    assert path.exists(), f"no snapshot {path}: run with AGENTKEEP_UPDATE_SNAPSHOTS=1"
    assert got == path.read_text(), f"{name} changed:\n{got}"


@pytest.fixture
def home(fake_home: FakeHome) -> FakeHome:
    build(fake_home)
    return fake_home


def test_ls_text(home: FakeHome) -> None:
    check("ls", text(home, "ls"))


def four_kib_blocks(where: Path) -> bool:
    """Whether a small file and a directory each take 4 KiB here (ext4 and
    most others): du shows disk use, so its snapshots hold for those alone."""
    probe = where / "block-probe"
    probe.mkdir()
    (probe / "f").write_bytes(b"x")
    return all(p.lstat().st_blocks * 512 == 4096 for p in (probe, probe / "f"))


def test_du_by_agent_and_by_workspace(home: FakeHome) -> None:
    if not four_kib_blocks(home.root):
        pytest.skip("du's snapshots are of a file system that gives small files 4 KiB")
    home.write_config('retention = "30d"\n')
    check("du-agent", text(home, "du"))
    check("du-workspace", text(home, "du", "--by", "workspace"))


def test_ls_wide_text(home: FakeHome) -> None:
    check("ls-wide", text(home, "ls", "--wide"))


def test_prune_report_and_trash_text(home: FakeHome) -> None:
    home.cli("pin", "claude", IDS["recent"], check=True)
    check("prune-dry-run", text(home, "prune", "--dry-run", "--older-than", "30d"))
    check("prune", text(home, "prune", "--older-than", "30d"))
    check("trash", text(home, "trash"))


def test_show_scan_and_status_text(home: FakeHome) -> None:
    home.cli("pin", "claude", IDS["fork"], check=True)
    check("scan", text(home, "scan"))
    # Whole paths: where they are cut depends on the tmp dir's length.
    check("show", text(home, "show", "--wide", "claude", IDS["fork"]))
    check("status", text(home, "status", code=1))
