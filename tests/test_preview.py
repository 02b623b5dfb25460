"""A new or shorter retention waits to be seen: the daemon's first scheduled
prune with it is a dry run, shown in status; the real one comes a
prune_interval later, or at once after a person's own prune."""

from __future__ import annotations

import json
from typing import Any

from build_claude import make_session
from fakehome import FakeHome, prune_here
from test_daemon_serve import start_daemon, stop_daemons  # noqa: F401 (fixture)


def scheduled(fh: FakeHome) -> dict[str, Any] | None:
    report = prune_here(fh, scheduled=True)
    return None if report is None else report.to_json()


def an_interval_passed(fh: FakeHome) -> None:
    path = fh.state / "preview.json"
    doc = json.loads(path.read_text())
    doc["at"] -= 7 * 3600  # the default prune_interval is 6h
    path.write_text(json.dumps(doc))


def test_a_first_retention_is_previewed_then_pruned(fake_home: FakeHome) -> None:
    old = make_session(fake_home, age_days=50)
    recent = make_session(fake_home, age_days=1)  # the machine is in use: no pause
    fake_home.write_config('retention = "30d"\n')

    first = scheduled(fake_home)
    assert first is not None and first["dry_run"] is True
    assert [r["id"] for r in first["removed"]] == [old.id], "what it would remove"
    assert all(p.exists() for p in old.all_paths()), "nothing removed yet"
    again = scheduled(fake_home)
    assert again is not None and again["dry_run"] is True, "still within the interval"

    an_interval_passed(fake_home)
    real = scheduled(fake_home)
    assert real is not None and real["dry_run"] is False
    assert [r["id"] for r in real["removed"]] == [old.id]
    assert not any(p.exists() for p in old.all_paths())
    assert all(p.exists() for p in recent.all_paths())


def test_a_shorter_retention_is_previewed_a_longer_one_is_not(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=1)
    mid = make_session(fake_home, age_days=50)
    fake_home.write_config('retention = "90d"\n')
    scheduled(fake_home)
    an_interval_passed(fake_home)
    assert scheduled(fake_home)["dry_run"] is False  # type: ignore[index]

    fake_home.write_config('retention = "30d"\n')  # shorter: previewed first
    shorter = scheduled(fake_home)
    assert shorter is not None and shorter["dry_run"] is True
    assert [r["id"] for r in shorter["removed"]] == [mid.id]
    assert all(p.exists() for p in mid.all_paths())

    fake_home.write_config('retention = "60d"\n')  # longer than the last run's? no: than 90d
    assert scheduled(fake_home)["dry_run"] is True  # type: ignore[index]
    fake_home.write_config('retention = "120d"\n')  # longer than what was pruned with
    assert scheduled(fake_home)["dry_run"] is False  # type: ignore[index]


def test_a_persons_prune_confirms_the_retention(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=1)
    old = make_session(fake_home, age_days=50)
    later = make_session(fake_home, age_days=45)
    fake_home.write_config('retention = "30d"\n')
    assert scheduled(fake_home)["dry_run"] is True  # type: ignore[index]
    person = fake_home.cli("prune", "--json")
    assert person.returncode == 0, person.stderr
    assert {r["id"] for r in json.loads(person.stdout)["removed"]} == {old.id, later.id}
    third = make_session(fake_home, age_days=40)
    after = scheduled(fake_home)
    assert after is not None and after["dry_run"] is False
    assert [r["id"] for r in after["removed"]] == [third.id]


def test_the_daemon_shows_the_preview_in_status(fake_home: FakeHome) -> None:
    old = make_session(fake_home, age_days=50)
    make_session(fake_home, age_days=1)
    fake_home.write_config('retention = "30d"\n')
    daemon = start_daemon(fake_home, extra={"AGENTKEEP_FIRST_PRUNE_DELAY": "0.2"})
    last = daemon.wait(lambda: daemon.status()["last_prune"], 30, "the first scheduled prune")
    assert "new or shorter retention" in last["preview"]
    # Nothing was removed, in status and in the daemon's log line.
    assert (last["removed"], last["would_remove"], last["dry_run"]) == (0, 1, True), last

    def logged() -> list[str]:
        return [line for line in daemon.stderr().splitlines() if "scheduled prune done" in line]

    done = daemon.wait(logged, 10, "the daemon's line on its scheduled prune")
    assert json.loads(done[-1])["removed"] == 0, done
    assert json.loads(done[-1])["would_remove"] == 1
    assert all(p.exists() for p in old.all_paths())
    text = fake_home.cli("status").stdout
    assert "would remove 1" in text and "agentkeep prune --dry-run" in text, text


def test_a_new_size_cap_or_a_smaller_keep_last_is_previewed_first(fake_home: FakeHome) -> None:
    """Any new shape that would remove more waits to be seen, as a new
    retention does; one that only keeps more does not."""
    make_session(fake_home, age_days=1)
    make_session(fake_home, age_days=10, cwd="/home/u/a")
    mid = make_session(fake_home, age_days=12, cwd="/home/u/a")
    old = make_session(fake_home, age_days=50, cwd="/home/u/b")
    fake_home.write_config('retention = "30d"\nkeep_last = 1\n')
    scheduled(fake_home)
    an_interval_passed(fake_home)
    confirmed = scheduled(fake_home)
    assert confirmed is not None and confirmed["dry_run"] is False
    assert confirmed["removed"] == [] and [k["reason"] for k in confirmed["kept"]] == ["recent"]

    fake_home.write_config('retention = "30d"\nkeep_last = 2\n')  # keeps more: no preview
    assert scheduled(fake_home)["dry_run"] is False  # type: ignore[index]
    fake_home.write_config('retention = "30d"\nkeep_last = 0\n')  # keeps less: previewed
    fewer = scheduled(fake_home)
    assert fewer is not None and fewer["dry_run"] is True
    assert [r["id"] for r in fewer["removed"]] == [old.id]

    fake_home.write_config('retention = "30d"\nkeep_last = 1\nmax_size = "1K"\n')
    capped = scheduled(fake_home)
    assert capped is not None and capped["dry_run"] is True, "a new size cap is previewed"
    assert [(r["id"], r["why"]) for r in capped["removed"]] == [(mid.id, "size")]
    assert all(p.exists() for p in mid.all_paths())
