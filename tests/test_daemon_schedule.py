"""The apscheduler jobs in-process with real time: the first prune after its
delay, then every interval, one at a time; interval changes; the env knob."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from agentkeep.daemon import schedule
from agentkeep.daemon.schedule import Jobs, Schedule
from waiting import wait_until

pytestmark = pytest.mark.slow


class Recorder:
    def __init__(self, busy_for: float = 0.0) -> None:
        self.starts: list[float] = []
        self.running = 0
        self.most = 0
        self.busy_for = busy_for
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.starts.append(time.monotonic())
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.busy_for)
        with self.lock:
            self.running -= 1


def nothing() -> None:
    return None


@pytest.fixture
def started() -> Iterator[Callable[..., Schedule]]:
    made: list[Schedule] = []

    def start(jobs: Jobs, **kw: float) -> Schedule:
        s = Schedule(jobs, **kw)
        s.start()
        made.append(s)
        return s

    yield start
    for s in made:
        s.shutdown()


def test_first_prune_after_the_delay_then_every_interval_one_at_a_time(started) -> None:
    prune = Recorder(busy_for=0.5)
    began = time.monotonic()
    s = started(Jobs(prune, nothing, nothing, nothing), prune_interval=0.2, first_prune_delay=0.3)
    next_prune = s.next_prune()
    assert next_prune is not None
    assert abs((next_prune - datetime.now(UTC)).total_seconds() - 0.3) < 0.2
    wait_until(lambda: len(prune.starts) >= 3, "three prunes", 5, setup=False)
    assert prune.starts[0] - began >= 0.25
    # Each run outlasts the interval: runs never overlap, and the ones that
    # came due meanwhile were coalesced into the next, not stacked.
    assert prune.most == 1
    gaps = [b - a for a, b in zip(prune.starts, prune.starts[1:], strict=False)]
    assert all(g >= 0.45 for g in gaps), gaps


def test_a_shorter_interval_moves_the_next_prune_closer(started) -> None:
    s = started(
        Jobs(nothing, nothing, nothing, nothing), prune_interval=3600, first_prune_delay=3000
    )
    before = s.next_prune()
    s.set_prune_interval(120)
    after = s.next_prune()
    assert before is not None and after is not None
    assert after - datetime.now(UTC) <= timedelta(seconds=121)
    s.set_prune_interval(7200)  # longer: the next prune does not move away
    assert s.next_prune() == after


def test_a_changed_interval_is_used_for_later_runs(started) -> None:
    prune = Recorder()
    s = started(Jobs(prune, nothing, nothing, nothing), prune_interval=3600, first_prune_delay=3600)
    s.set_prune_interval(0.2)
    wait_until(lambda: len(prune.starts) >= 2, "prunes at the new interval", 5, setup=False)


def test_first_prune_delay_from_the_environment() -> None:
    assert schedule.first_prune_delay({}) == 60
    assert schedule.first_prune_delay({"AGENTKEEP_FIRST_PRUNE_DELAY": "2.5"}) == 2.5
    assert schedule.first_prune_delay({"AGENTKEEP_FIRST_PRUNE_DELAY": "soon"}) == 60
    assert schedule.first_prune_delay({"AGENTKEEP_FIRST_PRUNE_DELAY": "-1"}) == 60


def test_after_shutdown_nothing_runs(started) -> None:
    prune = Recorder()
    s = started(Jobs(prune, nothing, nothing, nothing), prune_interval=0.1, first_prune_delay=0.1)
    wait_until(lambda: len(prune.starts) >= 1, "a first prune", 5, setup=False)
    s.shutdown()
    count = len(prune.starts)
    time.sleep(0.4)  # several intervals: none may start
    assert len(prune.starts) == count
    assert s.next_prune() is None
