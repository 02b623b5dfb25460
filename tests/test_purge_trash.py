"""purge, the trash and restore, through the real CLI (CONTRACT.md "purge",
"trash / restore", exit codes 0/1/2/4/5).

purge ignores age and the 24-hour floor but nothing else: live, held,
pinned and ancestors of sessions that stay are refused with exit 4. What it
removes goes through the trash like a prune, and `restore` puts every file
back as it was, never overwriting anything.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest

from agentkeep import leases
from agentkeep.model import parse_rfc3339
from agentkeep.processes import ProcessTable
from agentkeep.trash.writing import open_entry
from build_agents import make_zero_session, zero_root
from build_claude import ClaudeSessionPaths, make_session, new_id
from fakehome import FakeHome, Spawn, cli_json
from trees import paths_state
from waiting import wait_until as wait_for

pytestmark = pytest.mark.slow

DAY = 86400.0
SLEEP = "import time; time.sleep(60)"


def files_of(s: ClaudeSessionPaths) -> dict[str, tuple[int, int, str] | None]:
    """Every file and directory of the session: mode, mtime, content."""
    return paths_state([*s.files, *s.dirs])


def gone(s: ClaudeSessionPaths) -> bool:
    return not any(os.path.lexists(p) for p in s.all_paths())


def whole(s: ClaudeSessionPaths) -> bool:
    return all(os.path.lexists(p) for p in s.all_paths())


def removed_ids(doc: dict[str, Any]) -> list[str]:
    return [r["id"] for r in doc["removed"]]


def trash_ids(fh: FakeHome) -> list[str]:
    code, doc, err = cli_json(fh, "trash")
    assert code == 0, err
    return [e["id"] for e in doc["entries"] if e["agent"] == "claude"]


# -- what purge refuses --------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "sid"),
    [
        ("claude", "00000000-0000-4000-8000-000000000000"),
        ("claude", "not-a-uuid"),
        ("claude", "../../../etc"),
        ("zero", "no-such-zero-session"),
        ("zero", "bad/id"),
    ],
    ids=["unknown", "malformed", "path", "zero-unknown", "zero-malformed"],
)
def test_purge_of_no_such_session_exits_5(fake_home: FakeHome, agent: str, sid: str) -> None:
    other = make_session(fake_home, age_days=40)

    proc = fake_home.cli("purge", agent, sid, "--json")

    assert proc.returncode == 5
    assert "no such session" in proc.stderr
    assert whole(other)


def test_purge_of_an_unknown_agent_exits_2(fake_home: FakeHome) -> None:
    assert fake_home.cli("purge", "nosuch", new_id()).returncode == 2


def refuse(fh: FakeHome, *args: str) -> dict[str, Any]:
    code, doc, err = cli_json(fh, "purge", *args)
    assert code == 4, err
    assert "refused" in err
    assert doc is not None and doc["removed"] == [] and doc["cutoff"] is None
    return {k["id"]: k["reason"] for k in doc["kept"]}


def test_purge_refuses_a_live_session(fake_home: FakeHome, spawn: Spawn) -> None:
    s = make_session(fake_home, age_days=0.1)
    spawn([sys.executable, "-c", SLEEP, s.id])
    wait_for(lambda: bool(ProcessTable.snapshot().naming(s.id)), "the process naming the session")

    assert refuse(fake_home, "claude", s.id) == {s.id: "live"}
    assert whole(s)


def test_purge_refuses_a_held_session(fake_home: FakeHome, spawn: Spawn) -> None:
    s = make_session(fake_home, age_days=0.1)
    lease = leases.lease_path(fake_home.state, "claude", s.id)
    spawn(
        [
            sys.executable,
            "-m",
            "agentkeep",
            "hold",
            "claude",
            s.id,
            "--",
            sys.executable,
            "-c",
            SLEEP,
        ]
    )
    wait_for(lambda: lease.exists() and leases.is_held(lease), "agentkeep hold taking the lease")

    assert refuse(fake_home, "claude", s.id) == {s.id: "held"}
    assert whole(s)


def test_purge_refuses_a_pinned_session(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=0.1)
    assert fake_home.cli("pin", "claude", s.id).returncode == 0

    assert refuse(fake_home, "claude", s.id) == {s.id: "pinned"}
    assert whole(s)


def test_purge_refuses_the_ancestor_of_a_session_that_stays(fake_home: FakeHome) -> None:
    parent = make_session(fake_home, age_days=40)
    child = make_session(fake_home, parent=parent.id, age_days=0.1)

    assert refuse(fake_home, "claude", parent.id) == {parent.id: "ancestor"}
    assert whole(parent) and whole(child)


def test_cascade_stops_at_a_descendant_that_stays(fake_home: FakeHome, spawn: Spawn) -> None:
    parent = make_session(fake_home, age_days=40)
    child = make_session(fake_home, parent=parent.id, age_days=3)
    spawn([sys.executable, "-c", SLEEP, child.id])
    wait_for(lambda: bool(ProcessTable.snapshot().naming(child.id)), "the process naming the child")

    kept = refuse(fake_home, "claude", parent.id, "--cascade")

    assert kept == {child.id: "live", parent.id: "ancestor"}
    assert whole(parent) and whole(child)


# -- what purge does -----------------------------------------------------------


def test_cascade_removes_descendants_first(fake_home: FakeHome) -> None:
    parent = make_session(fake_home, age_days=40)
    child = make_session(fake_home, parent=parent.id, age_days=0.1)
    grandchild = make_session(fake_home, parent=child.id, age_days=0.05)
    unrelated = make_session(fake_home, age_days=90)

    code, doc, err = cli_json(fake_home, "purge", "claude", parent.id, "--cascade")

    assert code == 0, err
    assert doc["cutoff"] is None and doc["dry_run"] is False
    assert removed_ids(doc) == [grandchild.id, child.id, parent.id]
    assert doc["kept"] == [] and doc["failed"] == []
    assert gone(parent) and gone(child) and gone(grandchild)
    assert whole(unrelated), "purge removes what it was named and nothing else"


def test_purge_ignores_age_and_the_floor(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=1 / 24)  # an hour old

    code, doc, err = cli_json(fake_home, "purge", "claude", s.id)

    assert code == 0, err
    assert set(doc) == {
        "cutoff",
        "cutoffs",
        "dry_run",
        "removed",
        "kept",
        "failed",
        "residual",
        "leftovers",
        "compacted",
        "trash",
    }
    assert doc["cutoff"] is None
    assert removed_ids(doc) == [s.id]
    assert gone(s)


def test_purge_does_not_count_toward_max_removals(fake_home: FakeHome) -> None:
    fake_home.write_config("max_removals = 1\n")
    parent = make_session(fake_home, age_days=40, full=False)
    children = [make_session(fake_home, parent=parent.id, age_days=2, full=False) for _ in "ab"]

    code, doc, err = cli_json(fake_home, "purge", "claude", parent.id, "--cascade")

    assert code == 0, err
    assert len(doc["removed"]) == 3 and removed_ids(doc)[-1] == parent.id
    assert all(gone(s) for s in [parent, *children])


def test_a_purge_dry_run_removes_nothing(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=0.1)
    before = files_of(s)

    code, doc, err = cli_json(fake_home, "purge", "claude", s.id, "--dry-run")

    assert code == 0, err
    assert doc["dry_run"] is True and removed_ids(doc) == [s.id]
    assert files_of(s) == before
    assert trash_ids(fake_home) == []


def test_purge_ignores_a_time_it_cannot_read(fake_home: FakeHome) -> None:
    z = make_zero_session(zero_root(fake_home.data), "z-bad", metadata="{not json", days=40)

    code, doc, err = cli_json(fake_home, "purge", "zero", "z-bad")

    assert code == 0, err
    assert removed_ids(doc) == ["z-bad"] and not z.dir.exists()


def test_purge_of_a_zero_session_removes_its_directory(fake_home: FakeHome) -> None:
    z = make_zero_session(zero_root(fake_home.data), "z-1", days=0.1)

    code, doc, err = cli_json(fake_home, "purge", "zero", "z-1")

    assert code == 0, err
    assert removed_ids(doc) == ["z-1"] and not z.dir.exists()


# -- the trash and restore -------------------------------------------------------


def test_a_purged_session_waits_in_the_trash_and_comes_back_whole(fake_home: FakeHome) -> None:
    fake_home.write_config('trash = "7d"\n')
    s = make_session(fake_home, age_days=40)
    before = files_of(s)

    code, doc, err = cli_json(fake_home, "purge", "claude", s.id)
    assert code == 0, err
    assert gone(s)

    code, listing, err = cli_json(fake_home, "trash")
    assert code == 0, err
    (entry,) = listing["entries"]
    assert (entry["agent"], entry["id"]) == ("claude", s.id)

    started = time.time()
    code, restored, err = cli_json(fake_home, "restore", "claude", s.id)
    finished = time.time()

    assert code == 0, err
    assert files_of(s) == before, "every file back, byte for byte, with its times and modes"
    assert trash_ids(fake_home) == []

    code, rows, _ = cli_json(fake_home, "ls")
    (row,) = [r for r in rows if r["id"] == s.id]
    assert int(started) <= parse_rfc3339(row["last_activity"]) <= finished, (
        "a restore counts as activity"
    )
    code, report, err = cli_json(fake_home, "prune", "--older-than", "30d")
    assert code == 0, err
    assert s.id not in removed_ids(report) and whole(s), "a restored session is not idle"


@pytest.mark.parametrize("where", ["transcript", "deep-tmp-file"])
def test_restore_never_overwrites_and_moves_nothing(fake_home: FakeHome, where: str) -> None:
    s = make_session(fake_home, age_days=40)
    before = files_of(s)
    assert fake_home.cli("purge", "claude", s.id).returncode == 0
    # Something new now stands where a file of the session was: the
    # transcript (first root) or a file deep in the tmp scratch dir (last root).
    blocker = s.transcript if where == "transcript" else s.tmp / "tasks" / "bwdin25xx.output"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a new session wrote here\n")
    made = {blocker, *blocker.parents}

    proc = fake_home.cli("restore", "claude", s.id, "--json")

    assert proc.returncode == 1
    assert str(blocker) in proc.stderr
    assert blocker.read_text() == "a new session wrote here\n"
    assert all(not os.path.lexists(p) for p in s.all_paths() if p not in made)
    assert trash_ids(fake_home) == [s.id], "still in the trash, whole"

    blocker.unlink()
    assert fake_home.cli("restore", "claude", s.id).returncode == 0
    assert files_of(s) | {str(p): before[str(p)] for p in s.dirs if p in made} == before


def test_restore_brings_back_the_ancestors_still_in_the_trash(fake_home: FakeHome) -> None:
    parent = make_session(fake_home, age_days=40)
    child = make_session(fake_home, parent=parent.id, age_days=2)
    before = files_of(parent) | files_of(child)
    assert fake_home.cli("purge", "claude", parent.id, "--cascade").returncode == 0
    assert sorted(trash_ids(fake_home)) == sorted([parent.id, child.id])

    code, _, err = cli_json(fake_home, "restore", "claude", child.id)

    assert code == 0, err
    assert files_of(parent) | files_of(child) == before
    assert trash_ids(fake_home) == []


@pytest.mark.parametrize(
    ("sid", "code"),
    [("00000000-0000-4000-8000-000000000000", 5), ("not-a-uuid", 5)],
    ids=["not-in-trash", "malformed"],
)
def test_restore_of_no_such_entry(fake_home: FakeHome, sid: str, code: int) -> None:
    assert fake_home.cli("restore", "claude", sid).returncode == code


def test_the_next_prune_empties_expired_trash(fake_home: FakeHome) -> None:
    fake_home.write_config('trash = "7d"\n')
    expired = make_session(fake_home, age_days=3)
    waiting = make_session(fake_home, age_days=3)
    for s in (expired, waiting):
        assert fake_home.cli("purge", "claude", s.id).returncode == 0
    open_entry(
        fake_home.state,
        "claude",
        expired.id,
        parent=None,
        keep_for=7 * DAY,
        now=time.time() - 8 * DAY,
    ).close()

    code, doc, err = cli_json(fake_home, "prune", "--older-than", "30d")

    assert code == 0, err
    assert trash_ids(fake_home) == [waiting.id]
    assert fake_home.cli("restore", "claude", expired.id).returncode == 5
    assert gone(expired)


def test_with_trash_0_a_purge_removes_at_once(fake_home: FakeHome) -> None:
    fake_home.write_config('trash = "0"\n')
    s = make_session(fake_home, age_days=40)

    code, doc, err = cli_json(fake_home, "purge", "claude", s.id)

    assert code == 0, err
    assert removed_ids(doc) == [s.id] and gone(s)
    assert trash_ids(fake_home) == []
    assert fake_home.cli("restore", "claude", s.id).returncode == 5
