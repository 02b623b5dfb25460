"""The trash, as a person meets it: what a prune moved there and what that
freed, the trash in `du`, emptying it now, and times in words."""

from __future__ import annotations

import json

import pytest

from agentkeep import leases, render
from build_claude import make_session
from fakehome import FakeHome
from waiting import wait_until

pytestmark = pytest.mark.slow

WEEK = 7 * 86400


def prune_json(fh: FakeHome) -> dict:
    return json.loads(fh.cli("prune", "--older-than", "30d", "--json", check=True).stdout)


def test_a_prune_to_the_trash_says_so_and_frees_nothing_yet(fake_home: FakeHome) -> None:
    old = [make_session(fake_home, cwd=f"/home/u/p{i}", age_days=40 + i) for i in range(2)]
    dry = fake_home.cli("prune", "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0 and "2 would move to the trash" in dry.stdout, dry.stdout
    report = prune_json(fake_home)
    moved = sum(r["bytes"] for r in report["removed"])
    assert report["trash"]["bytes"] == moved > 0, "state and home share a file system here"
    assert report["trash"]["freed_bytes"] == 0
    until = report["trash"]["until"]
    assert until[:10] >= report["cutoff"][:10]

    more = make_session(fake_home, age_days=50)
    text = fake_home.cli("prune", "--older-than", "30d")
    assert "1 moved to the trash" in text.stdout, text.stdout
    assert "this freed 0 B now" in text.stdout and "in 7 days" in text.stdout
    assert not any(p.exists() for s in [*old, more] for p in s.all_paths())


def test_without_a_trash_the_report_says_removed(fake_home: FakeHome) -> None:
    fake_home.write_config('trash = "0"\n')
    make_session(fake_home, age_days=40)
    report = prune_json(fake_home)
    assert report["trash"] is None
    text = fake_home.cli("prune", "--older-than", "30d", "--dry-run")
    assert "would move" not in text.stdout


def test_du_counts_the_trash(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40)
    kept = make_session(fake_home, age_days=1)
    report = prune_json(fake_home)
    doc = json.loads(fake_home.cli("du", "--json", check=True).stdout)
    assert set(doc) == {"by", "groups"}, "the contract's shape"
    assert [g["sessions"] for g in doc["groups"]] == [1]
    text = fake_home.cli("du", check=True).stdout
    [entry] = json.loads(fake_home.cli("trash", "--json", check=True).stdout)["entries"]
    assert 0 < entry["compressed_bytes"] < report["trash"]["bytes"], "SETUP INVALID"
    held = render.size(entry["compressed_bytes"])  # what emptying it frees
    assert f"the trash holds {held} more (1 session)" in text, text
    assert "agentkeep trash --empty" in text
    assert kept.transcript.exists()


def test_trash_lists_times_in_words(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40)
    prune_json(fake_home)
    text = fake_home.cli("trash", check=True).stdout
    assert "in 7 days" in text and "now" in text
    # A session that comes back whole carries no mark; a partial one a `*`
    # explained below the table.
    assert "PARTIAL" not in text and "*" not in text


def test_emptying_the_trash_frees_it_under_the_leases(fake_home: FakeHome, spawn) -> None:
    sessions = [make_session(fake_home, cwd=f"/home/u/p{i}", age_days=40 + i) for i in range(3)]
    prune_json(fake_home)
    held = sessions[0]
    lease = leases.lease_path(fake_home.state, "claude", held.id)
    lease.parent.mkdir(parents=True, exist_ok=True)
    holder = spawn(["flock", "-s", str(lease), "sleep", "600"])
    wait_until(lambda: leases.is_held(lease), "the lease taken by flock -s")
    assert holder.poll() is None

    before = json.loads(fake_home.cli("trash", "--json", check=True).stdout)["entries"]
    proc = fake_home.cli("trash", "--empty", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert sorted(e["id"] for e in doc["emptied"]) == sorted(s.id for s in sessions[1:])
    assert [e["id"] for e in doc["held"]] == [held.id]
    assert doc["bytes"] == sum(e["bytes"] for e in before if e["id"] != held.id)
    left = json.loads(fake_home.cli("trash", "--json", check=True).stdout)["entries"]
    assert [e["id"] for e in left] == [held.id]
    restored = fake_home.cli("restore", "claude", sessions[1].id)
    assert restored.returncode == 5, "an emptied session is gone for good"


def test_emptying_only_what_is_older(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40)
    prune_json(fake_home)
    kept = json.loads(fake_home.cli("trash", "--empty", "--older-than", "1d", "--json").stdout)
    assert kept["emptied"] == [] and kept["held"] == []
    assert len(json.loads(fake_home.cli("trash", "--json").stdout)["entries"]) == 1
    assert fake_home.cli("trash", "--older-than", "1d").returncode == 2
