"""A prune's report is streamed, not held: past RemovedLog.HELD its
removals wait in an unnamed temporary file and are read back as the report
is written, so a prune's memory does not grow with what it removed; the
report written is byte for byte the document it stands for, and a file that
cannot be written loses none of it."""

from __future__ import annotations

import gc
import json
import tracemalloc
import uuid

import pytest
from structlog.testing import capture_logs

from agentkeep.jsontext import folded_parts
from agentkeep.prune.report import Removed, RemovedLog
from build_claude import make_many
from fakehome import FakeHome, prune_here
from fulldisk import FullDisk

pytestmark = pytest.mark.slow


def removed(n: int) -> Removed:
    """A removal as a Claude session's reads: eight paths of some 150 bytes."""
    sid = str(uuid.UUID(int=n + 1))
    paths = [f"/home/u/.claude/projects/-home-u-work/{sid}/{k}-" + "x" * 80 for k in range(8)]
    return Removed("claude", sid, 1000 + n, 1.0e9 + n, paths, [], n % 3)


def filled(count: int) -> tuple[RemovedLog, list[Removed]]:
    log, given = RemovedLog(), [removed(n) for n in range(count)]
    for r in given:
        log.append(r)
    return log, given


def spilled(log: RemovedLog) -> bool:
    return log._spilled > 0


def test_the_log_gives_back_every_removal_in_order_with_its_sums() -> None:
    log, given = filled(3 * RemovedLog.HELD + 5)
    if not spilled(log):
        pytest.fail("SETUP INVALID: nothing was written to the file")

    assert list(log) == given
    assert list(log) == given, "read back a second time"
    assert len(log) == len(given) and bool(log)
    assert log.bytes == sum(r.bytes for r in given)
    assert log.trashed == sum(r.trashed for r in given)


def test_two_readings_at_once_each_keep_their_place() -> None:
    log, given = filled(2 * RemovedLog.HELD + 1)
    assert list(zip(log, log, strict=True)) == [(r, r) for r in given]


def test_an_empty_log_is_false_and_gives_nothing() -> None:
    log = RemovedLog()
    assert not log and len(log) == 0 and list(log) == [] and not spilled(log)


@pytest.mark.parametrize("room", [0, 1, 2])
def test_a_file_that_fills_up_loses_no_removal(monkeypatch: pytest.MonkeyPatch, room: int) -> None:
    """The file takes `room` batches whole and part of the next."""
    disk = FullDisk(monkeypatch, room)
    with capture_logs() as logs:
        log, given = filled(4 * RemovedLog.HELD + 3)

    if (disk.flushed, disk.failed) != (room, 1):
        pytest.fail(f"SETUP INVALID: {disk.flushed} writes, {disk.failed} failed, room {room}")
    assert list(log) == given
    assert log.bytes == sum(r.bytes for r in given)
    assert "the report is held in memory" in [e["event"] for e in logs]


def _held_after(count: int) -> int:
    """Python memory a log of `count` removals holds (the least of three)."""
    least = None
    for _ in range(3):
        gc.collect()
        tracemalloc.start()
        try:
            log = RemovedLog()
            for n in range(count):
                log.append(removed(n))
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        del log
        least = held if least is None else min(least, held)
    assert least is not None
    return least


def test_the_log_holds_no_more_memory_with_more_removals() -> None:
    few, many = _held_after(1000), _held_after(5000)
    # Held whole, a removal of eight paths costs some 1,500 bytes.
    assert (many - few) / 4000 < 30, f"{many - few} bytes more for 4,000 more removals"


def test_a_prune_writes_the_document_of_its_report(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RemovedLog, "HELD", 2)
    sessions = make_many(fake_home, 7, projects=3)
    report = prune_here(fake_home, older_than="30d")
    assert report is not None
    if not spilled(report.removed):
        pytest.fail("SETUP INVALID: the removals were never written to the file")

    doc = report.to_json()
    assert "".join(report.json_parts()) == json.dumps(doc, indent=2)
    # As the daemon sends it: one line, read as the same document.
    folded = "".join(folded_parts(report.json_parts()))
    assert "\n" not in folded and json.loads(folded) == doc
    assert sorted(r["id"] for r in doc["removed"]) == sorted(s.id for s in sessions)
    assert all(r["paths"] for r in doc["removed"])
    assert report.bytes == sum(r["bytes"] for r in doc["removed"]) > 0
    assert [set(r) for r in report.to_json(paths=False)["removed"]] == [
        {"agent", "id", "bytes", "last_activity", "why"}
    ] * len(sessions)


def test_the_cli_prints_a_report_longer_than_what_it_holds(fake_home: FakeHome) -> None:
    fake_home.write_config("max_removals = 1000\n")
    sessions = make_many(fake_home, RemovedLog.HELD + 40, projects=4, full=False)

    proc = fake_home.cli("prune", "--older-than", "30d", "--json")

    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert proc.stdout == json.dumps(doc, indent=2) + "\n"
    assert sorted(r["id"] for r in doc["removed"]) == sorted(s.id for s in sessions)
    assert all(not s.transcript.exists() for s in sessions)
