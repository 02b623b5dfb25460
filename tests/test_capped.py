"""max_removals takes the longest idle sessions across every agent, children
before their parents still, and text output sums up the rest in one line."""

from __future__ import annotations

import json

from build_agents import make_zero_session, zero_root
from build_claude import make_session
from fakehome import FakeHome


def test_the_oldest_go_first_whatever_the_agent(fake_home: FakeHome) -> None:
    fake_home.write_config("max_removals = 3\n")
    claude = {
        days: make_session(fake_home, cwd=f"/home/u/c{days}", age_days=days)
        for days in (40, 90, 300)
    }
    root = zero_root(fake_home.data)
    zero = {days: make_zero_session(root, f"z{days}", days=days) for days in (50, 200, 400)}

    code_text = fake_home.cli("prune", "--older-than", "30d", "--dry-run")
    assert code_text.returncode == 0, code_text.stderr
    assert "3 more old sessions wait for the next run (capped: over max_removals)" in (
        code_text.stdout
    )
    assert "capped" not in code_text.stdout.split("3 more old sessions")[0]

    proc = fake_home.cli("prune", "--older-than", "30d", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    removed = [(r["agent"], r["id"]) for r in report["removed"]]
    assert removed == [("zero", "z400"), ("claude", claude[300].id), ("zero", "z200")]
    capped = sorted(k["id"] for k in report["kept"] if k["reason"] == "capped")
    assert capped == sorted([claude[40].id, claude[90].id, "z50"])
    assert zero[50].dir.exists()


def test_children_still_go_before_their_parent(fake_home: FakeHome) -> None:
    fake_home.write_config("max_removals = 2\n")
    parent = make_session(fake_home, cwd="/home/u/p", age_days=300)
    child = make_session(fake_home, cwd="/home/u/p", parent=parent.id, age_days=35)
    other = make_session(fake_home, cwd="/home/u/o", age_days=200)
    report = json.loads(fake_home.cli("prune", "--older-than", "30d", "--json", check=True).stdout)
    # The oldest family is taken first: its child, then the parent itself.
    assert [r["id"] for r in report["removed"]] == [child.id, parent.id]
    assert [k["id"] for k in report["kept"] if k["reason"] == "capped"] == [other.id]
