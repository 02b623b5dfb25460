"""keep_last and max_size end to end: the real CLI on a real fake home,
each shape on its own and with the keep rules a person sets (a pin, a live
process, a held lease), as prune, its dry run, du and show say them."""

from __future__ import annotations

import json
import sys
from typing import Any

from build_claude import make_session
from fakehome import FakeHome, Spawn


def prune(fh: FakeHome, *args: str) -> dict[str, Any]:
    done = fh.cli("prune", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_keep_last_keeps_the_most_recent_of_a_workspace(fake_home: FakeHome) -> None:
    old = [make_session(fake_home, cwd="/home/u/a", age_days=d) for d in (90, 80, 70)]
    fake_home.write_config('retention = "30d"\nkeep_last = 2\n')
    report = prune(fake_home)
    assert [(r["id"], r["why"]) for r in report["removed"]] == [(old[0].id, "age")]
    assert {k["id"]: k["reason"] for k in report["kept"]} == {
        old[1].id: "recent",
        old[2].id: "recent",
    }
    shown = json.loads(fake_home.cli("show", "claude", old[1].id, "--json").stdout)
    assert shown["verdict"]["reason"] == "recent", shown["verdict"]
    assert "keep_last" in shown["verdict"]["do"]


def test_max_size_alone_removes_the_longest_idle_past_the_keep_rules(
    fake_home: FakeHome, spawn: Spawn
) -> None:
    """No retention at all: the cap decides. What is pinned or live counts
    toward the size and stays; the idlest others go, with why "size"."""

    def made(days: float) -> Any:
        return make_session(fake_home, age_days=days, full=False, pad=40_000)

    pinned, live = made(60), made(50)
    idle = [made(d) for d in (40, 20, 10, 3)]
    today = made(0.2)
    assert fake_home.cli("pin", "claude", pinned.id).returncode == 0
    spawn(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)", live.id],
        ready=True,
    )
    # Room for the four that must stay and half of another: three must go.
    each = {s.transcript.stat().st_blocks * 512 for s in (pinned, live, *idle, today)}
    assert len(each) == 1, "SETUP INVALID: the sessions differ in size"
    cap_k = (4 * each.pop() + 20_000) // 1024
    fake_home.write_config(f'max_size = "{cap_k}K"\n')

    dry = prune(fake_home, "--dry-run")
    du = json.loads(fake_home.cli("du", "--json").stdout)
    report = prune(fake_home)
    gone = [(r["id"], r["why"]) for r in report["removed"]]
    assert gone == [(s.id, "size") for s in idle[:3]], gone
    assert [(r["id"], r["why"]) for r in dry["removed"]] == gone
    assert du["groups"][0]["reclaimable_bytes"] > 0
    for s in (pinned, live, idle[3], today):
        assert all(p.exists() for p in s.all_paths()), "a kept or young session went for size"
