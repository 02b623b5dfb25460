"""The clock (issue #7): when the clock reads earlier than the last recorded
prune, or even the newest session on disk is idle past the retention (a clock
jumped forward a year, a machine back from months off), the scheduled prune
removes nothing and pauses; `status` and `doctor` say why; one `agentkeep
prune` from the CLI lifts it; `max_removals` caps every run.

A clock that jumps cannot be faked for another process here (no libfaketime),
and agentkeep only ever compares time.time() with recorded times and mtimes:
so a jump forward by T is made by moving every recorded time and mtime back
by T, which is exactly what the program sees after such a jump.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hardening_util import DAY, events_named, kept_reasons, removed_ids, report_of, run_cli

from agentkeep.core.context import Context
from agentkeep.core.pruning import prune
from agentkeep.core.status import status_fields
from agentkeep.model import rfc3339
from agentkeep.paths import Env
from build_claude import ClaudeSessionPaths, make_session
from fakehome import FakeHome
from test_daemon_serve import start_daemon, stop_daemons
from waiting import wait_until

pytestmark = pytest.mark.slow

__all__ = ["stop_daemons"]

CAP = 3


def config(fh: FakeHome) -> None:
    fh.write_config(f'retention = "30d"\nmax_removals = {CAP}\n', seen=True)


def write_last_prune(fh: FakeHome, ts: float) -> None:
    fh.state.mkdir(parents=True, exist_ok=True, mode=0o700)
    (fh.state / "last_prune.json").write_text(json.dumps({"ts": ts, "time": rfc3339(ts)}))


def context(fh: FakeHome) -> Context:
    return Context.open(Env.from_environ(fh.environ))


def scheduled(fh: FakeHome) -> dict[str, Any]:
    report = prune(context(fh), scheduled=True)
    assert report is not None, "the scheduled prune skipped its turn"
    return report.to_json()


def present(sessions: list[ClaudeSessionPaths]) -> list[ClaudeSessionPaths]:
    return [s for s in sessions if s.transcript.exists()]


def assert_says_why(fh: FakeHome, reason: str) -> None:
    """status (no daemon: pid null, exit 1) and doctor both give the reason."""
    assert status_fields(context(fh))["paused"] == reason
    status = run_cli(fh, "status", "--json")
    assert status.returncode == 1, status.stderr
    doc = json.loads(status.stdout)
    assert doc["pid"] is None and doc["paused"] == reason
    text = run_cli(fh, "status")
    assert reason in " ".join(text.stdout.split()), text.stdout
    assert "agentkeep prune" in text.stdout
    doctor = run_cli(fh, "doctor")
    assert doctor.returncode == 1
    flat = " ".join(doctor.stdout.split())
    assert f"paused itself: {reason}" in flat, doctor.stdout
    assert "agentkeep prune" in flat


def lift_with_the_cli(fh: FakeHome, old: list[ClaudeSessionPaths], reason: str) -> None:
    """A dry run does not lift the pause; one real CLI prune does, capped."""
    dry = run_cli(fh, "prune", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert status_fields(context(fh))["paused"] == reason
    before = len(present(old))
    real = run_cli(fh, "prune", "--json")
    assert real.returncode == 0, real.stderr
    doc = report_of(real)
    assert len(doc["removed"]) == CAP, "max_removals caps the prune that lifts the pause"
    assert sorted(kept_reasons(doc).values()) == ["capped"] * (before - CAP)
    assert len(present(old)) == before - CAP
    assert status_fields(context(fh))["paused"] is None
    assert "paused itself" not in run_cli(fh, "doctor").stdout


def test_a_clock_behind_the_last_prune_pauses_until_a_cli_prune(fake_home: FakeHome) -> None:
    config(fake_home)
    old = [make_session(fake_home, age_days=40 + i, full=False) for i in range(7)]
    recent = [make_session(fake_home, age_days=2 + i, full=False) for i in range(2)]
    write_last_prune(fake_home, time.time() + DAY)  # recorded by a clock a day ahead

    for _ in range(2):  # the pause holds run after run
        doc = scheduled(fake_home)
        assert doc["removed"] == [] and doc["kept"] == [] and doc["failed"] == []
        assert "clock" in doc["paused"]
    assert len(present(old)) == 7 and len(present(recent)) == 2
    assert_says_why(fake_home, doc["paused"])

    lift_with_the_cli(fake_home, old, doc["paused"])
    # Resumed: each scheduled run removes at most max_removals.
    after = scheduled(fake_home)
    assert not after.get("paused") and len(after["removed"]) == CAP
    last = scheduled(fake_home)
    assert not last.get("paused") and len(last["removed"]) == 1
    assert present(old) == [] and len(present(recent)) == 2


@pytest.mark.parametrize(
    ("jump_days", "last_prune_ago"),
    [
        pytest.param(365, 365, id="clock-jumped-a-year"),
        pytest.param(150, None, id="months-off-never-pruned"),
    ],
)
def test_a_clock_jumped_forward_or_a_machine_back_from_months_off_pauses(
    fake_home: FakeHome, jump_days: float, last_prune_ago: float | None
) -> None:
    config(fake_home)
    # What was old and recent before the jump: after it, all idle past 30 days.
    old = [make_session(fake_home, age_days=jump_days + 40 + i, full=False) for i in range(5)]
    was_recent = [make_session(fake_home, age_days=jump_days + 1 + i, full=False) for i in range(2)]
    if last_prune_ago is not None:
        write_last_prune(fake_home, time.time() - last_prune_ago * DAY)

    doc = scheduled(fake_home)

    assert doc["removed"] == [] and doc["paused"], doc
    assert len(present(old + was_recent)) == 7
    assert_says_why(fake_home, doc["paused"])
    lift_with_the_cli(fake_home, old + was_recent, doc["paused"])


def test_one_cli_prune_resumes_the_schedule_even_when_it_was_capped(fake_home: FakeHome) -> None:
    config(fake_home)
    old = [make_session(fake_home, age_days=200 + i, full=False) for i in range(2 * CAP + 1)]
    write_last_prune(fake_home, time.time() - 180 * DAY)
    if not scheduled(fake_home).get("paused"):
        pytest.fail("SETUP INVALID: the scheduled prune did not pause")
    lifted = run_cli(fake_home, "prune", "--json")
    assert len(report_of(lifted)["removed"]) == CAP

    doc = scheduled(fake_home)

    assert not doc.get("paused"), doc.get("paused")
    assert len(doc["removed"]) == CAP
    assert len(present(old)) == 1


def test_the_daemon_pauses_says_why_and_a_cli_prune_resumes_it(fake_home: FakeHome) -> None:
    config(fake_home)
    old = [make_session(fake_home, age_days=40 + i, full=False) for i in range(5)]
    recent = make_session(fake_home, age_days=3, full=False)
    write_last_prune(fake_home, time.time() + 3600)
    daemon = start_daemon(fake_home, extra={"AGENTKEEP_FIRST_PRUNE_DELAY": "0.5"})

    done = daemon.wait(
        lambda: events_named(daemon.log, "scheduled prune done"), 20, "the scheduled prune"
    )
    assert done[0]["removed"] == 0 and "clock" in done[0]["paused"]
    status = daemon.status()
    assert status["paused"] == done[0]["paused"]
    assert any(
        e.get("reason") == status["paused"]
        for e in events_named(daemon.log, "scheduled prune paused")
    )
    assert len(present(old)) == 5
    doctor = run_cli(fake_home, "doctor")
    assert f"paused itself: {status['paused']}" in " ".join(doctor.stdout.split())

    # The CLI's prune is answered by the daemon, over the socket: it lifts the pause.
    real = run_cli(fake_home, "prune", "--json")
    assert real.returncode == 0, real.stderr
    assert len(removed_ids(report_of(real))) == CAP
    wait_until(lambda: daemon.status()["paused"] is None, "the pause to lift", 5, setup=False)
    assert len(present(old)) == 5 - CAP and recent.transcript.exists()
    assert daemon.stop() == 0, daemon.stderr()


def test_a_first_prune_delay_of_zero_prunes_at_once(fake_home: FakeHome) -> None:
    config(fake_home)
    old = make_session(fake_home, age_days=40, full=False)
    make_session(fake_home, age_days=3, full=False)
    daemon = start_daemon(fake_home, extra={"AGENTKEEP_FIRST_PRUNE_DELAY": "0"})
    assert daemon.status()["next_prune"] is not None

    daemon.wait(lambda: not old.transcript.exists(), 5, "the first prune")
