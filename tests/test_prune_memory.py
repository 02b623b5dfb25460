"""A prune makes no garbage the cycle collector must find: a removal into the
trash writes its entry.json many times, and each write through json's
pure-Python encoder left a reference cycle (statefiles.write_json)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from agentkeep.prune import act
from build_claude import make_many
from fakehome import FakeHome, prune_here


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The collector off for the test, so that what the run left
    unreachable can be counted."""
    gc.collect()
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def test_a_prune_into_the_trash_leaves_no_cycles_to_its_end(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch, collector_off: None
) -> None:
    monkeypatch.setattr(act, "BATCH", 8)
    make_many(fake_home, 40, projects=4)
    report = prune_here(fake_home, older_than="30d")
    assert report is not None
    if len(report.removed) != 40 or report.removed.trashed == 0:
        pytest.fail(
            f"SETUP INVALID: {len(report.removed)} of 40 removed,"
            f" {report.removed.trashed} bytes into the trash"
        )

    left = gc.collect()
    # Held to the end, the 40 removals' writes left some 1,100 objects each.
    assert left < 40 * 20, f"{left} unreachable objects left by 40 removals"
