"""A prune holds no garbage it made: with the cycle collector paused for the
run (core.indexing.collector_paused), each batch's reference cycles (a
removal into the trash writes its entry.json many times, each write through
json's pure-Python encoder leaving one) are collected every few removals
and after each batch, not held to the batch's end or the run's."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from agentkeep.prune import act
from build_claude import make_many
from fakehome import FakeHome, prune_here


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The collector off for the test, so that the run's pause keeps it off
    after the run too and what the run left unreachable can be counted."""
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


def test_a_batch_into_the_trash_holds_its_cycles_a_few_removals_at_most(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch, collector_off: None
) -> None:
    """One batch of 40 sessions: the cycles of its removals are collected
    every act.COLLECT_EVERY of them, not held to the batch's end."""
    monkeypatch.setattr(act, "BATCH", 1000)
    monkeypatch.setattr(act, "COLLECT_EVERY", 4)
    make_many(fake_home, 40, projects=4)
    young: list[int] = []  # the objects of the young generation, after each removal
    remove = act.Pruner._remove

    def counted(self: act.Pruner, *args: object, **kw: object) -> object:
        outcome = remove(self, *args, **kw)  # type: ignore[arg-type]
        young.append(len(gc.get_objects(generation=0)))
        return outcome

    monkeypatch.setattr(act.Pruner, "_remove", counted)
    report = prune_here(fake_home, older_than="30d")
    assert report is not None
    if len(report.removed) != 40 or report.removed.trashed == 0 or len(young) != 40:
        pytest.fail(f"SETUP INVALID: {len(report.removed)} of 40 removed, {len(young)} counted")

    # Made since the last collection: what four removals leave at most,
    # the same at the batch's end as at its beginning.
    assert max(young[-8:]) < 2 * max(young[4:8]), young
