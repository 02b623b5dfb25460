"""A Claude scan past grouping.SPOOL_AT items keeps them in temporary files
until it has looked everywhere, and reads them back a sixteenth at a time:
it finds exactly what a scan holding them finds, a spool that fails midway
(a full disk) loses nothing, and what a scan holds no longer grows with the
home."""

from __future__ import annotations

import errno
import gc
import tempfile
import tracemalloc
from pathlib import Path
from typing import IO

import pytest
from structlog.testing import capture_logs

from agentkeep.adapters.base import Root
from agentkeep.adapters.claude import ClaudeAdapter, finding, grouping
from agentkeep.adapters.claude.listings import Listings
from agentkeep.adapters.claude.roots import Layout
from agentkeep.model import Session
from agentkeep.paths import Env
from build_claude import make_many, make_session, new_id, write_registry
from fakehome import FakeHome
from fulldisk import FullDisk

pytestmark = pytest.mark.slow

HELD_IN_MEMORY = "a scan's findings are held in memory"


def scanned(fh: FakeHome) -> list[Session]:
    return list(ClaudeAdapter(Env.from_environ(fh.environ)).sessions())


def tricky_home(fh: FakeHome) -> None:
    """Sessions of every kind: forks, a job naming a parent, an id spelled
    uppercase on disk, a registry record, sessions sharing key dirs, and
    one with nothing but its transcript."""
    made = make_many(fh, 12, projects=3, forks_every=4)
    make_session(fh, id=new_id().upper(), cwd="/home/user/p0")
    make_session(fh, job_parent=made[0].id)
    make_session(fh, full=False)
    write_registry(fh, 4_199_021, made[1].id)


def spool_small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grouping, "SPOOL_AT", 5)
    monkeypatch.setattr(grouping, "_FLUSH", 7)


def test_a_spooled_scan_finds_what_a_held_one_finds(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    tricky_home(fake_home)
    held = scanned(fake_home)

    spool_small(monkeypatch)
    disk = FullDisk(monkeypatch)
    spooled = scanned(fake_home)

    if disk.flushed < 3:
        pytest.fail(f"SETUP INVALID: the spool took {disk.flushed} writes")
    assert spooled == held
    assert [s.id for s in spooled] == sorted(s.id for s in held), "in the order of their ids"


@pytest.mark.parametrize("room", [0, 1, 4])
def test_a_spool_that_fills_up_loses_nothing(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch, room: int
) -> None:
    """With room for none of its writes, one, or a few, the first being the
    move of what was held."""
    tricky_home(fake_home)
    held = scanned(fake_home)

    spool_small(monkeypatch)
    disk = FullDisk(monkeypatch, room)
    with capture_logs() as logs:
        spooled = scanned(fake_home)

    if (disk.flushed, disk.failed) != (room, 1):
        pytest.fail(f"SETUP INVALID: {disk.flushed} writes, {disk.failed} failed, room {room}")
    assert spooled == held
    assert HELD_IN_MEMORY in [e["event"] for e in logs]


def test_a_spool_that_cannot_be_made_loses_nothing(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    tricky_home(fake_home)
    held = scanned(fake_home)
    tried: list[int] = []

    def no_room() -> IO[bytes]:
        tried.append(1)
        raise OSError(errno.EMFILE, "Too many open files")

    spool_small(monkeypatch)
    monkeypatch.setattr(tempfile, "TemporaryFile", no_room)
    with capture_logs() as logs:
        assert scanned(fake_home) == held
    assert tried == [1], "tried once, then held"
    assert HELD_IN_MEMORY in [e["event"] for e in logs]


def test_a_path_found_twice_is_taken_once_as_first_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Across the spool and what was held after it could not take more."""
    monkeypatch.setattr(grouping, "SPOOL_AT", 1)
    monkeypatch.setattr(grouping, "_FLUSH", 2)
    FullDisk(monkeypatch, room=1)
    root = Root(tmp_path, "config")
    found = grouping.Grouped(Layout(root, Root(tmp_path / "projects", "projects"), ()), None)
    sid = new_id()
    adds: list[tuple[str, str]] = [("a", "first"), ("b", "first"), ("a", "again"), ("c", "first")]
    adds += [("b", "again"), ("d", "first"), ("a", "third")]
    for name, kind in adds:
        found.add(sid, str(tmp_path / name), kind, root, False)

    parts = list(found.parts(10))

    assert [[(p[0], p[1]) for p in items] for _, items, _, _ in parts[0]] == [
        [(str(tmp_path / n), "first") for n in "abcd"]
    ]


def _held_by_find(fh: FakeHome) -> int:
    """Python memory a full find() holds once it has looked everywhere: the
    least of three runs, each counted after a full collection (garbage in
    a cycle, and objects made from free lists, not traced, move one run's
    count by hundreds of KB)."""
    least = None
    for _ in range(3):
        adapter = ClaudeAdapter(Env.from_environ(fh.environ))
        layout = adapter._layout()
        gc.collect()
        tracemalloc.start()
        try:
            found = finding.find(Listings(), layout, None)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert sum(len(part) for part in found.parts(100)) > 0
        least = held if least is None else min(least, held)
    assert least is not None
    return least


def test_what_a_scan_holds_stops_growing_at_the_spool(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_many(fake_home, 300, projects=5)
    whole = _held_by_find(fake_home)
    monkeypatch.setattr(grouping, "SPOOL_AT", 100)
    monkeypatch.setattr(grouping, "_FLUSH", 50)
    spooled = _held_by_find(fake_home)
    # 300 sessions are some 2,400 items of about 300 bytes each.
    assert whole > 400_000, f"SETUP INVALID: {whole} bytes held"
    assert spooled < whole / 4, f"{spooled} bytes held with a spool, {whole} without"
