"""Prune: the plan, the act under each session's lease, and the report.

Every situation is built for real: Claude and zero trees on disk, real
processes naming sessions, real flocks on lease files, the real CLI as a
subprocess where the contract's outside is what is tested, and the seams of
agentkeep.prune / agentkeep.rmtree where a race must be forced (each such
test fails with "SETUP INVALID" when the race did not happen).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep import leases
from agentkeep.adapters import base
from agentkeep.adapters.claude import ClaudeAdapter
from agentkeep.agents import AGENTS
from agentkeep.core.context import Context
from agentkeep.core.indexing import scan
from agentkeep.core.pruning import prune
from agentkeep.core.sessions import pin
from agentkeep.core.status import status_fields
from agentkeep.index import Index
from agentkeep.journal import Journal
from agentkeep.model import Session, parse_rfc3339, rfc3339
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.prune import act as prune_act
from agentkeep.prune import remove as prune_remove
from agentkeep.prune import run as prune_run
from agentkeep.prune.lock import PrunerLock
from agentkeep.prune.plan import ancestors, check_floor
from agentkeep.prune.report import PruneOptions, PruneRefused
from agentkeep.prune.run import Pruner
from agentkeep.trash.entries import list_entries
from agentkeep.trash.writing import open_entry
from build_agents import make_zero_session, zero_root
from build_claude import (
    ClaudeSessionPaths,
    jsonl,
    make_session,
    make_shared,
    set_age,
    write_registry,
)
from fakehome import FakeHome, Spawn, cli_json, make_fake_home
from trees import paths_state, settle, tree_state
from waiting import wait_until as wait_for

pytestmark = pytest.mark.slow

DAY = 86400.0
RFC3339_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
# The contract's keys, and `trash` (what went there, until when: README).
REPORT_KEYS = {"cutoff", "cutoffs", "dry_run", "removed", "kept", "failed", "residual", "trash"}
REPORT_KEYS |= {"leftovers", "compacted"}
REASONS = {"live", "held", "pinned", "ancestor", "updated", "undated", "unsafe", "capped"}
SLEEP = "import time; time.sleep(60)"


# -- helpers -------------------------------------------------------------------


def context() -> Context:
    return Context.open(Env.from_environ())


def run_prune(**kw: Any) -> dict[str, Any]:
    report = prune(context(), **kw)
    assert report is not None
    return report.to_json()


def cli_with_seams(
    fh: FakeHome, code: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """The real CLI in a subprocess after `code` set some seams."""
    script = code + "\nfrom agentkeep.cli import main\nmain()\n"
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env={**fh.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def outside_state(fh: FakeHome) -> dict[str, tuple[int, int, str] | None]:
    """The whole fake user but agentkeep's own state dir (made first, so that
    making it changes no parent's mtime)."""
    fh.state.mkdir(parents=True, exist_ok=True, mode=0o700)
    return tree_state(fh.root, skip=(fh.state,))


def gone(s: ClaudeSessionPaths) -> bool:
    return not any(os.path.lexists(p) for p in s.all_paths())


def whole(s: ClaudeSessionPaths) -> bool:
    return all(os.path.lexists(p) for p in s.all_paths())


def top_paths(s: ClaudeSessionPaths) -> set[str]:
    return {str(p) for paths in s.artifacts.values() for p in paths}


def file_bytes(s: ClaudeSessionPaths) -> int:
    """st_size of the session's files, each inode once (Claude hard-links a
    kept command output into its tmp dir)."""
    sizes = {(st.st_dev, st.st_ino): st.st_size for st in map(os.lstat, s.files)}
    return sum(sizes.values())


def kept(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {k["id"]: (k["reason"], k["detail"]) for k in doc["kept"]}


def reasons(doc: dict[str, Any]) -> dict[str, str]:
    return {k["id"]: k["reason"] for k in doc["kept"]}


def removed_ids(doc: dict[str, Any]) -> list[str]:
    return [r["id"] for r in doc["removed"]]


def assert_report_shape(doc: dict[str, Any]) -> None:
    """Exactly the contract's prune report."""
    assert set(doc) == REPORT_KEYS, doc.keys()
    assert doc["cutoff"] is None or RFC3339_Z.fullmatch(doc["cutoff"])
    assert isinstance(doc["cutoffs"], dict)
    assert all(RFC3339_Z.fullmatch(v) for v in doc["cutoffs"].values())
    assert isinstance(doc["dry_run"], bool)
    for r in doc["removed"]:
        assert set(r) == {"agent", "id", "bytes", "last_activity", "paths", "why"}
        assert isinstance(r["bytes"], int) and RFC3339_Z.fullmatch(r["last_activity"])
        assert all(isinstance(p, str) for p in r["paths"])
    for k in doc["kept"]:
        assert set(k) == {"agent", "id", "reason", "detail"} and k["reason"] in REASONS
    for f in doc["failed"]:
        assert set(f) == {"agent", "id", "reason"} and isinstance(f["reason"], str)
    for r in doc["residual"]:
        assert set(r) == {"agent", "id", "path"}


def index_ids(fh: FakeHome) -> list[str]:
    return sorted(s.id for s in Index(fh.state / "index.sqlite").sessions("claude"))


def disk_ids() -> list[str]:
    return sorted(s.id for s in ClaudeAdapter(Env.from_environ()).sessions())


def lease_file(fh: FakeHome, sid: str, agent: str = "claude") -> Path:
    path = leases.lease_path(fh.state, agent, sid)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.touch()
    return path


def names(sid: str) -> bool:
    return bool(ProcessTable.snapshot().naming(sid))


# -- the whole run, from the outside -------------------------------------------


def check_complete_prune(
    fh: FakeHome, doc: dict[str, Any], old: list[ClaudeSessionPaths], keep: list[Path]
) -> None:
    assert_report_shape(doc)
    assert doc["dry_run"] is False
    assert sorted(removed_ids(doc)) == sorted(s.id for s in old)
    assert doc["kept"] == [] and doc["failed"] == []
    # Looking again finds what names a removed session and is not the prune's
    # to remove: here the image-cache dirs Claude keeps per session (shared).
    named = [(r["id"], fh.claude / "image-cache" / r["id"]) for r in doc["removed"]]
    residual = {(r["id"], r["path"]) for r in doc["residual"]}
    assert residual == {(sid, str(path)) for sid, path in named if path.exists()}
    by_id = {s.id: s for s in old}
    for r in doc["removed"]:
        s = by_id[r["id"]]
        assert r["agent"] == "claude"
        assert set(r["paths"]) == top_paths(s), "every artifact is removed and reported"
        assert r["last_activity"] == rfc3339(s.mtime)
        assert gone(s), [p for p in s.all_paths() if os.path.lexists(p)]
    code, rows, _ = cli_json(fh, "ls")
    assert code == 0
    left = sorted(r["id"] for r in rows)
    assert left == index_ids(fh) == disk_ids(), "ls, the index and the disk agree"
    assert all(os.path.lexists(p) for p in keep)


def test_older_than_30d_removes_old_idle_sessions_whole_and_nothing_else(
    fake_home: FakeHome,
) -> None:
    old = [
        make_session(fake_home, cwd="/home/u/alpha", age_days=40),
        make_session(fake_home, cwd="/home/u/beta", age_days=45),
    ]
    recent = make_session(fake_home, cwd="/home/u/alpha", age_days=3)
    shared = make_shared(fake_home, cwd="/home/u/alpha", session_ids=[*(s.id for s in old)])
    expected_bytes = {s.id: file_bytes(s) for s in old}
    shared_before = paths_state(shared.all_paths())
    recent_before = paths_state(recent.all_paths())

    started = time.time()
    code, doc, err = cli_json(fake_home, "prune", "--older-than", "30d")
    finished = time.time()

    assert code == 0, err
    check_complete_prune(fake_home, doc, old, recent.all_paths())
    cutoff = parse_rfc3339(doc["cutoff"])
    assert int(started - 30 * DAY) - 1 <= cutoff <= finished - 30 * DAY
    assert doc["cutoffs"] == {agent: doc["cutoff"] for agent in AGENTS}
    assert {r["id"]: r["bytes"] for r in doc["removed"]} == expected_bytes
    assert paths_state(recent.all_paths()) == recent_before
    assert paths_state(shared.all_paths()) == shared_before, "shared files are never touched"
    assert index_ids(fake_home) == [recent.id]


def test_the_config_retention_is_the_cutoff_when_none_is_given(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "30d"\n')
    old = [make_session(fake_home, age_days=31), make_session(fake_home, age_days=90)]
    recent = make_session(fake_home, age_days=29)
    shared = make_shared(fake_home, session_ids=[s.id for s in [*old, recent]])
    shared_before = paths_state(shared.all_paths())

    started = time.time()
    code, doc, err = cli_json(fake_home, "prune")
    finished = time.time()

    assert code == 0, err
    check_complete_prune(fake_home, doc, old, recent.all_paths())
    assert int(started - 30 * DAY) - 1 <= parse_rfc3339(doc["cutoff"]) <= finished - 30 * DAY
    assert set(doc["cutoffs"]) == set(AGENTS)
    assert paths_state(shared.all_paths()) == shared_before


def test_cutoff_is_null_when_an_agent_has_its_own_retention(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "30d"\n\n[agents.codex]\nretention = "90d"\n')
    old = make_session(fake_home, age_days=40)

    code, doc, err = cli_json(fake_home, "prune")

    assert code == 0, err
    assert_report_shape(doc)
    assert doc["cutoff"] is None
    assert set(doc["cutoffs"]) == set(AGENTS)
    claude, codex = (parse_rfc3339(doc["cutoffs"][a]) for a in ("claude", "codex"))
    assert claude - codex == pytest.approx(60 * DAY, abs=1)
    assert {doc["cutoffs"][a] for a in AGENTS if a != "codex"} == {doc["cutoffs"]["claude"]}
    assert removed_ids(doc) == [old.id]


def test_agent_option_prunes_only_that_agent(fake_home: FakeHome) -> None:
    claude_old = make_session(fake_home, age_days=40)
    zero = make_zero_session(zero_root(fake_home.data), "z-old", days=40)

    doc = run_prune(older_than="30d", agent="zero")

    assert list(doc["cutoffs"]) == ["zero"]
    assert removed_ids(doc) == ["z-old"]
    assert not zero.dir.exists()
    assert whole(claude_old)


# -- every kept reason, from a real situation ------------------------------------


def test_a_process_naming_the_id_keeps_the_session_live(fake_home: FakeHome, spawn: Spawn) -> None:
    s = make_session(fake_home, age_days=40)
    other = make_session(fake_home, age_days=40)
    proc = spawn([sys.executable, "-c", SLEEP, s.id])
    wait_for(lambda: names(s.id), "the process naming the session showing in the table")

    doc = run_prune(older_than="30d")

    reason, detail = kept(doc)[s.id]
    assert reason == "live" and detail.startswith(f"pid {proc.pid}")
    assert list(kept(doc)) == [s.id] and removed_ids(doc) == [other.id]
    assert whole(s)


def test_a_registry_file_of_a_live_process_keeps_the_session_live(
    fake_home: FakeHome, spawn: Spawn
) -> None:
    s = make_session(fake_home, age_days=40)
    proc = spawn([sys.executable, "-c", SLEEP])  # its command line names nothing
    wait_for(lambda: ProcessTable.snapshot().alive(proc.pid) is not None, "the process starting")
    # startedAt is after the process started (not a reused pid); the file
    # itself is as old as the rest of the session.
    reg, key = write_registry(fake_home, proc.pid, s.id, started_at=int(time.time() * 1000))
    set_age([reg, key], 40)

    doc = run_prune(older_than="30d")

    reason, detail = kept(doc)[s.id]
    assert reason == "live" and f"pid {proc.pid}" in detail
    assert whole(s) and reg.exists()


def test_a_shared_flock_on_the_lease_keeps_the_session_held(
    fake_home: FakeHome, spawn: Spawn
) -> None:
    s = make_session(fake_home, age_days=40)
    path = lease_file(fake_home, s.id)
    # The lease is taken by flock(1) on a descriptor, so no command line names
    # the id and only the lease says the session is in use.
    spawn(
        ["sh", "-c", 'exec 9<"$LEASE"; flock -s 9 && exec sleep 60'],
        env={**fake_home.environ, "LEASE": str(path)},
    )
    wait_for(lambda: leases.is_held(path), "flock taking the lease")
    if names(s.id):
        pytest.fail("SETUP INVALID: the holder's command line names the session")

    doc = run_prune(older_than="30d")

    assert reasons(doc) == {s.id: "held"}
    assert whole(s)


def test_flock_s_on_the_lease_file_keeps_the_session(fake_home: FakeHome, spawn: Spawn) -> None:
    """The contract's own recipe: `flock -s <lease> CMD`. Its command line
    names the id too (in the lease's file name), so both live and held
    apply; the report gives one of them."""
    s = make_session(fake_home, age_days=40)
    path = lease_file(fake_home, s.id)
    spawn(["flock", "-s", str(path), "sleep", "60"])
    wait_for(lambda: leases.is_held(path), "flock taking the lease")

    doc = run_prune(older_than="30d")

    assert reasons(doc)[s.id] in ("live", "held")
    assert removed_ids(doc) == []
    assert whole(s)


def test_agentkeep_hold_keeps_the_session_held(fake_home: FakeHome, spawn: Spawn) -> None:
    s = make_session(fake_home, age_days=40)
    path = leases.lease_path(fake_home.state, "claude", s.id)
    holder = spawn(
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
    wait_for(
        lambda: os.path.exists(path) and leases.is_held(path), "agentkeep hold taking the lease"
    )

    doc = run_prune(older_than="30d")

    assert reasons(doc) == {s.id: "held"}
    assert whole(s)
    holder.kill()
    holder.wait(timeout=10)
    wait_for(lambda: not leases.is_held(path), "the lease ending with the command")
    assert removed_ids(run_prune(older_than="30d")) == [s.id]


def test_zeros_own_lease_lock_keeps_a_zero_session_held(fake_home: FakeHome, spawn: Spawn) -> None:
    z = make_zero_session(zero_root(fake_home.data), "z-held", days=40)
    lock = z.dir / "lease.lock"
    spawn(
        ["sh", "-c", 'exec 9<"$LEASE"; flock -s 9 && exec sleep 60'],
        env={**fake_home.environ, "LEASE": str(lock)},
    )
    wait_for(lambda: leases.is_held(lock), "zero's lease.lock being held")

    doc = run_prune(older_than="30d")

    assert reasons(doc) == {"z-held": "held"}
    assert z.metadata.exists() and lock.exists()


def test_a_process_started_after_the_plan_keeps_the_session_live(
    fake_home: FakeHome, spawn: Spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = make_session(fake_home, age_days=40)
    started: list[int] = []

    def resume_it(agent: str, sid: str) -> None:
        started.append(spawn([sys.executable, "-c", SLEEP, sid]).pid)
        wait_for(lambda: names(sid), "the new process showing in the process table")

    monkeypatch.setattr(prune_remove, "_after_lease", resume_it)
    doc = run_prune(older_than="30d")

    if len(started) != 1:
        pytest.fail("SETUP INVALID: no process was started between the plan and the act")
    assert reasons(doc) == {s.id: "live"}
    assert whole(s)


def test_a_process_started_while_its_batch_takes_leases_keeps_the_session_live(
    fake_home: FakeHome, spawn: Spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process table of the check under the leases is read once per
    batch: after the batch's last lease, never at its first."""
    first = make_session(fake_home, age_days=40)
    second = make_session(fake_home, age_days=41)
    leased: list[str] = []
    started: list[int] = []

    def resume_the_other(agent: str, sid: str) -> None:
        leased.append(sid)
        if len(leased) == 2:  # the first one's lease is held already
            started.append(spawn([sys.executable, "-c", SLEEP, leased[0]]).pid)
            wait_for(lambda: names(leased[0]), "the new process showing in the process table")

    monkeypatch.setattr(prune_act, "BATCH", 2)
    monkeypatch.setattr(prune_remove, "_after_lease", resume_the_other)
    doc = run_prune(older_than="30d")

    if len(started) != 1:
        pytest.fail("SETUP INVALID: no process was started between two leases of a batch")
    live = leased[0]
    assert reasons(doc) == {live: "live"}
    assert sorted(removed_ids(doc)) == [leased[1]]
    assert whole(first if first.id == live else second)


def test_a_pinned_session_is_kept(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=40)
    assert fake_home.cli("pin", "claude", s.id).returncode == 0

    doc = run_prune(older_than="30d")

    assert reasons(doc) == {s.id: "pinned"}
    assert whole(s)


def test_the_old_parent_of_a_recent_fork_is_kept_as_ancestor(fake_home: FakeHome) -> None:
    parent = make_session(fake_home, age_days=60)
    fork = make_session(fake_home, parent=parent.id, age_days=2)

    doc = run_prune(older_than="30d")

    assert reasons(doc) == {parent.id: "ancestor"}
    assert fork.id in kept(doc)[parent.id][1], "the detail names the session that stays"
    assert removed_ids(doc) == []
    assert whole(parent) and whole(fork)


def test_ancestors_through_a_cycle_and_up_to_a_missing_parent_are_kept(
    fake_home: FakeHome,
) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    a = make_session(fake_home, parent=missing, age_days=50, full=False)
    recent_a = make_session(fake_home, parent=a.id, age_days=1, full=False)
    # c1 and c2 name each other as parent: a cycle the walk must survive.
    c1_id, c2_id = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
    c1 = make_session(fake_home, id=c1_id, parent=c2_id, age_days=50, full=False)
    c2 = make_session(fake_home, id=c2_id, parent=c1_id, age_days=55, full=False)
    recent_c = make_session(fake_home, parent=c1_id, age_days=1, full=False)
    lone = make_session(fake_home, parent=missing, age_days=40, full=False)

    doc = run_prune(older_than="30d")

    assert reasons(doc) == {a.id: "ancestor", c1.id: "ancestor", c2.id: "ancestor"}
    assert recent_a.id in kept(doc)[a.id][1]
    assert recent_c.id in kept(doc)[c1.id][1]
    assert removed_ids(doc) == [lone.id], "a missing parent keeps nothing"
    assert all(whole(s) for s in (a, recent_a, c1, c2, recent_c))


def test_the_ancestors_walk_survives_cycles_and_missing_parents() -> None:
    parents = {"a": "b", "b": "c", "c": "a", "d": "x"}
    assert list(ancestors("a", parents.get)) == ["b", "c"]
    assert list(ancestors("d", parents.get)) == ["x"]
    assert list(ancestors("x", parents.get)) == []
    assert list(ancestors("self", {"self": "self"}.get)) == []


def test_a_session_whose_metadata_cannot_be_read_is_kept_undated(fake_home: FakeHome) -> None:
    root = zero_root(fake_home.data)
    bad = make_zero_session(root, "z-bad", metadata="{not json", days=40)
    good = make_zero_session(root, "z-good", days=40)

    doc = run_prune(older_than="30d")

    assert kept(doc)["z-bad"][0] == "undated"
    assert removed_ids(doc) == ["z-good"]
    assert bad.metadata.exists() and not good.dir.exists()


def test_a_workspace_dir_linked_from_outside_keeps_the_session_unsafe(
    fake_home: FakeHome,
) -> None:
    s = make_session(fake_home, cwd="/home/u/linked", age_days=40)
    key_dir = fake_home.claude / "projects" / s.key
    outside = fake_home.root / "elsewhere" / s.key
    outside.parent.mkdir()
    os.rename(key_dir, outside)
    key_dir.symlink_to(outside)
    outside_before = tree_state(outside)
    rest = [p for p in s.all_paths() if not str(p).startswith(str(key_dir))]
    rest_before = paths_state(rest)

    doc = run_prune(older_than="30d")

    assert reasons(doc) == {s.id: "unsafe"}
    assert removed_ids(doc) == []
    assert tree_state(outside) == outside_before, "what lies behind the link is untouched"
    assert paths_state(rest) == rest_before, "an unsafe session is kept whole"


def move_behind_link(path: Path, elsewhere: Path) -> None:
    elsewhere.parent.mkdir(parents=True, exist_ok=True)
    os.rename(path, elsewhere)
    path.symlink_to(elsewhere, target_is_directory=elsewhere.is_dir())


def test_an_artifact_behind_a_linked_directory_is_left_and_reported_residual(
    fake_home: FakeHome,
) -> None:
    s = make_session(fake_home, age_days=40)
    outside = fake_home.root / "elsewhere" / "file-history"
    move_behind_link(fake_home.claude / "file-history", outside)
    outside_before = tree_state(outside)

    doc = run_prune(older_than="30d")

    assert removed_ids(doc) == [s.id] and doc["kept"] == []
    assert doc["residual"] == [{"agent": "claude", "id": s.id, "path": str(s.file_history)}]
    assert str(s.file_history) not in doc["removed"][0]["paths"]
    assert tree_state(outside) == outside_before, "what lies behind the link is never removed"
    assert not s.transcript.exists() and not s.session_env.exists()


def test_a_session_directory_that_is_itself_a_link_is_removed_as_the_link_alone(
    fake_home: FakeHome,
) -> None:
    s = make_session(fake_home, age_days=40)
    outside = fake_home.root / "elsewhere" / "session-env"
    move_behind_link(s.session_env, outside)
    os.utime(s.session_env, (s.mtime, s.mtime), follow_symlinks=False)
    outside_before = tree_state(outside)

    doc = run_prune(older_than="30d")

    assert removed_ids(doc) == [s.id]
    assert not os.path.lexists(s.session_env), "the link itself is gone"
    assert tree_state(outside) == outside_before, "its target is untouched"


def test_max_removals_caps_a_run(fake_home: FakeHome) -> None:
    fake_home.write_config("max_removals = 2\n")
    sessions = [make_session(fake_home, age_days=40 + i, full=False) for i in range(5)]

    doc = run_prune(older_than="30d")

    assert len(doc["removed"]) == 2
    assert {r for r, _ in kept(doc).values()} == {"capped"} and len(doc["kept"]) == 3
    assert set(removed_ids(doc)) | set(kept(doc)) == {s.id for s in sessions}
    assert sum(gone(s) for s in sessions) == 2 and sum(whole(s) for s in sessions) == 3


def test_a_session_written_between_plan_and_removal_is_kept_updated(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = make_session(fake_home, age_days=40)
    written: list[str] = []

    def write_to_it(agent: str, sid: str) -> None:
        with open(s.transcript, "a") as f:
            f.write(jsonl([{"type": "user", "sessionId": sid, "cwd": s.cwd}]))
        written.append(sid)

    monkeypatch.setattr(prune_remove, "_after_lease", write_to_it)
    doc = run_prune(older_than="30d")

    if written != [s.id]:
        pytest.fail(f"SETUP INVALID: the seam wrote to {written}, not to {s.id}")
    assert s.transcript.stat().st_mtime > time.time() - 600, "the write happened"
    assert reasons(doc) == {s.id: "updated"}
    assert removed_ids(doc) == [] and whole(s)


def test_a_fork_made_after_the_plan_keeps_its_old_parent(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = make_session(fake_home, age_days=40)
    forks: list[ClaudeSessionPaths] = []

    def fork_it() -> None:
        forks.append(make_session(fake_home, parent=parent.id, cwd=parent.cwd, age_days=0.01))

    monkeypatch.setattr(prune_run, "_after_plan", fork_it)
    doc = run_prune(older_than="30d")

    if len(forks) != 1 or not whole(forks[0]):
        pytest.fail("SETUP INVALID: no fork was made between the plan and the act")
    assert reasons(doc) == {parent.id: "ancestor"}
    assert forks[0].id in kept(doc)[parent.id][1]
    assert removed_ids(doc) == []
    assert whole(parent)


def test_a_fork_made_as_another_removal_ends_keeps_its_old_parent(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two idle sessions of one project, in batches of their own: as the
    first one's removal ends, the other is forked (a new transcript in the
    directory the removal just changed). The fork shows at the next
    batch's check, and its parent stays: the mtime the removal left holds
    the fork too, and taking it for the removal's own hid the fork."""
    pair = [make_session(fake_home, age_days=40, cwd="/home/user/p") for _ in range(2)]
    project = pair[0].transcript.parent
    assert pair[1].transcript.parent == project, "SETUP INVALID: not one project"
    old = time.time() - 3600
    os.utime(project, (old, old))  # no change below falls in the plan's mtime tick
    monkeypatch.setattr(prune_act, "BATCH", 1)
    forks: list[tuple[str, ClaudeSessionPaths]] = []
    remove = ClaudeAdapter.remove

    def remove_then_fork(self: ClaudeAdapter, session: Session, remover: Any) -> None:
        remove(self, session, remover)
        if not forks:
            other = next(s for s in pair if s.id != session.id)
            forks.append((other.id, make_session(fake_home, parent=other.id, cwd=other.cwd)))

    monkeypatch.setattr(ClaudeAdapter, "remove", remove_then_fork)
    doc = run_prune(older_than="30d")

    if len(forks) != 1 or forks[0][1].transcript.parent != project:
        pytest.fail("SETUP INVALID: no fork was made in the project as a removal ended")
    parent, fork = forks[0]
    assert reasons(doc) == {parent: "ancestor"}
    assert fork.id in kept(doc)[parent][1]
    assert removed_ids(doc) == [s.id for s in pair if s.id != parent]


def test_a_fork_in_a_directory_whose_mtime_stays_keeps_its_old_parent(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory's mtime comes from a coarse clock: one changed just
    before the plan read it can change again, a fork made in it, and keep
    that mtime. The fork still shows at the check, and its parent stays.
    The same clock tick is stood for by an mtime ahead of the clock, kept
    through the fork (no wait on the clock in the test)."""
    parent = make_session(fake_home, age_days=40, full=False)
    project = parent.transcript.parent
    stamp = time.time_ns() + 60 * 10**9
    os.utime(project, ns=(stamp, stamp))
    forks: list[ClaudeSessionPaths] = []

    def fork_in_the_same_tick() -> None:
        fork = make_session(fake_home, parent=parent.id, cwd=parent.cwd, full=False)
        os.utime(project, ns=(stamp, stamp))
        if fork.transcript.parent == project and project.stat().st_mtime_ns == stamp:
            forks.append(fork)

    monkeypatch.setattr(prune_run, "_after_plan", fork_in_the_same_tick)
    doc = run_prune(older_than="30d")

    if len(forks) != 1:
        pytest.fail("SETUP INVALID: no fork made in the project after the plan, its mtime kept")
    assert reasons(doc) == {parent.id: "ancestor"}
    assert forks[0].id in kept(doc)[parent.id][1]
    assert removed_ids(doc) == [] and whole(parent)


def test_a_fork_made_after_the_plan_in_a_new_project_keeps_its_old_parent(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fork's key dir is new since the plan, and holds all there is of
    it so far (its transcript): the view finds the dir as a new one to
    watch, and the fork in it."""
    parent = make_session(fake_home, age_days=40)
    forks: list[ClaudeSessionPaths] = []

    def fork_it() -> None:
        fork = make_session(
            fake_home, parent=parent.id, cwd="/new/project", age_days=0.01, full=False
        )
        forks.append(fork)

    monkeypatch.setattr(prune_run, "_after_plan", fork_it)
    doc = run_prune(older_than="30d")

    if len(forks) != 1 or forks[0].transcript.parent == parent.transcript.parent:
        pytest.fail("SETUP INVALID: no fork was made in a new project between plan and act")
    assert reasons(doc) == {parent.id: "ancestor"}
    assert removed_ids(doc) == [] and whole(parent)


@pytest.mark.parametrize(
    ("named", "new_entries", "scans"), [("known", 6, 0), ("new", 1, 0), ("new", 6, 4)]
)
def test_a_home_in_use_is_not_listed_again_whole_between_batches(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch, named: str, new_entries: int, scans: int
) -> None:
    """Files appearing in watched directories during a prune (a claude at
    work) make the view list only the sessions new there; past its bound
    (lowered here to 0, and a quarter of 8 sessions is 2) the agent once
    again, at each batch. Files of sessions the view holds list nothing: a
    planned one is listed again under its lease anyway."""
    idle = [make_session(fake_home, age_days=40) for _ in range(8)]
    monkeypatch.setattr(prune_act, "BATCH", 2)
    monkeypatch.setattr(base, "LOOKUPS_ALONE", 0)
    calls = {"scan": 0, "named": 0}
    listing, session_for_path = ClaudeAdapter.sessions, ClaudeAdapter.session_for_path

    def counted_scan(
        self: ClaudeAdapter, names: frozenset[str] | None = None, known: Any = None
    ) -> Iterator[Any]:
        calls["scan"] += names is None
        return listing(self, names, known)

    def counted_named(self: ClaudeAdapter, path: str) -> str | None:
        calls["named"] += 1
        return session_for_path(self, path)

    monkeypatch.setattr(ClaudeAdapter, "sessions", counted_scan)
    monkeypatch.setattr(ClaudeAdapter, "session_for_path", counted_named)
    planned: list[int] = []
    monkeypatch.setattr(prune_run, "_after_plan", lambda: planned.append(calls["scan"]))

    def claude_at_work(agent: str, sid: str) -> None:
        for n in range(new_entries):
            # A new session's debug log, or more of a known one's.
            name = f"{sid}-work-{n}.log" if named == "known" else f"{uuid.uuid4()}.txt"
            (fake_home.claude / "debug" / name).write_text("x")

    monkeypatch.setattr(prune_remove, "_after_lease", claude_at_work)
    doc = run_prune(older_than="30d")

    scans_in_act = calls["scan"] - planned[0] if planned else 0
    if calls["named"] == 0 and scans_in_act == 0:
        pytest.fail("SETUP INVALID: the act never saw a directory change")
    assert sorted(removed_ids(doc)) == sorted(s.id for s in idle)
    assert scans_in_act == scans


def test_a_changed_directory_asks_whose_only_its_names_new_since_the_plan(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first change the act sees in a watched directory (debug/, where
    each session has its log) asks whose a name is of the names new there
    only: those of the sessions listed for the plan are theirs already."""
    idle = [make_session(fake_home, age_days=40) for _ in range(6)]
    settle(context().adapters["claude"].watch_dirs())
    monkeypatch.setattr(prune_act, "BATCH", 2)
    asked: list[str] = []
    session_for_path = ClaudeAdapter.session_for_path

    def counted_named(self: ClaudeAdapter, path: str) -> str | None:
        asked.append(path)
        return session_for_path(self, path)

    monkeypatch.setattr(ClaudeAdapter, "session_for_path", counted_named)
    written: list[str] = []

    def another_writer(agent: str, sid: str) -> None:
        if not written:
            path = fake_home.claude / "debug" / "latest"
            path.write_text("x")
            written.append(str(path))

    monkeypatch.setattr(prune_remove, "_after_lease", another_writer)
    doc = run_prune(older_than="30d")

    if not written or not asked:
        pytest.fail("SETUP INVALID: the act never saw debug/ change")
    assert asked == written
    assert sorted(removed_ids(doc)) == sorted(s.id for s in idle)


def test_a_recent_parent_of_a_session_kept_at_removal_is_not_reported(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = make_session(fake_home, age_days=2)  # in use: recent
    child = make_session(fake_home, parent=parent.id, age_days=40)  # a fork left idle
    written: list[str] = []

    def write_to_it(agent: str, sid: str) -> None:
        with open(child.transcript, "a") as f:
            f.write(jsonl([{"type": "user", "sessionId": sid, "cwd": child.cwd}]))
        written.append(sid)

    monkeypatch.setattr(prune_remove, "_after_lease", write_to_it)
    doc = run_prune(older_than="30d")

    if written != [child.id]:
        pytest.fail("SETUP INVALID: the child was not written between the plan and the act")
    assert reasons(doc) == {child.id: "updated"}
    assert whole(parent) and whole(child)


def test_a_per_agent_retention_applies_without_a_global_one(fake_home: FakeHome) -> None:
    fake_home.write_config('[agents.zero]\nretention = "30d"\n')
    claude_old = make_session(fake_home, age_days=400)
    zero = make_zero_session(zero_root(fake_home.data), "z-old", days=40)

    doc = run_prune()

    assert list(doc["cutoffs"]) == ["zero"]
    assert removed_ids(doc) == ["z-old"] and not zero.dir.exists()
    assert whole(claude_old), "no cutoff for claude: nothing of it is pruned"


def test_descendants_are_removed_before_their_ancestors(fake_home: FakeHome) -> None:
    root = make_session(fake_home, age_days=60)
    child = make_session(fake_home, parent=root.id, age_days=50)
    grandchild = make_session(fake_home, parent=child.id, age_days=40)

    doc = run_prune(older_than="30d")

    assert removed_ids(doc) == [grandchild.id, child.id, root.id]
    assert doc["kept"] == [] and all(gone(s) for s in (root, child, grandchild))


def test_sessions_are_journaled_a_batch_at_a_time(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One durable journal write per batch, not per session (each costs
    fsyncs), and every session is named by its batch before it goes."""
    monkeypatch.setattr(prune_act, "BATCH", 4)
    n = prune_act.BATCH * 2 + 3
    old = [
        make_session(fake_home, cwd=f"/home/u/p{i % 7}", age_days=40, full=False) for i in range(n)
    ]
    batches: list[list[str]] = []
    named_before_removal: list[bool] = []
    begin = Journal.begin_batch

    def counting(self: Journal, entries: list[Any]) -> Path:
        batches.append([e.id for e in entries])
        for e in entries:
            named_before_removal.append(any(os.path.lexists(p) for p in e.paths))
        return begin(self, entries)

    monkeypatch.setattr(Journal, "begin_batch", counting)
    doc = run_prune(older_than="30d")

    assert sorted(removed_ids(doc)) == sorted(s.id for s in old)
    assert all(gone(s) for s in old)
    assert [len(b) for b in batches] == [prune_act.BATCH, prune_act.BATCH, 3]
    assert sorted(i for b in batches for i in b) == sorted(s.id for s in old)
    assert all(named_before_removal), "a batch was written after its removals began"
    assert pending_journal(fake_home) == []


# The CLI started where it may open this many files, and cannot raise it.
FEW_FILES = 200
FEW_FILES_SEAM = f"""
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, ({FEW_FILES}, {FEW_FILES}))
"""


def test_a_prune_where_few_files_may_be_open_checks_smaller_batches(
    fake_home: FakeHome,
) -> None:
    """Each session of a batch holds its lease's descriptor until it is
    removed: where the process may open fewer files than a batch of
    leases needs, batches are as big as fit, and every session goes."""
    n = FEW_FILES + 50
    if n >= prune_act.BATCH:
        pytest.fail(f"SETUP INVALID: {n} sessions fit in one batch of {prune_act.BATCH} anyway")
    old = [
        make_session(fake_home, cwd=f"/home/u/p{i % 5}", age_days=40, full=False) for i in range(n)
    ]
    fake_home.write_config(f"max_removals = {n}\n")

    proc = cli_with_seams(fake_home, FEW_FILES_SEAM, "prune", "--older-than", "30d", "--json")
    out, err = proc.communicate(timeout=300)

    doc = json.loads(out)
    assert proc.returncode == 0, err[-3000:]
    assert doc["kept"] == [] and doc["failed"] == [], (doc["kept"][:3], doc["failed"][:3])
    assert sorted(removed_ids(doc)) == sorted(s.id for s in old)
    assert all(gone(s) for s in old)


# -- invariant 1: a cutoff the user chose, never under a day ------------------------


def test_a_cutoff_under_a_day_is_refused_by_the_cli(fake_home: FakeHome) -> None:
    young = make_session(fake_home, age_days=0.6)  # 14 hours: older than "12h"
    old = make_session(fake_home, age_days=40)
    before = outside_state(fake_home)

    proc = fake_home.cli("prune", "--older-than", "12h", "--json")

    assert proc.returncode == 2
    assert "24 hours" in proc.stderr
    assert outside_state(fake_home) == before
    assert whole(young) and whole(old)


def test_a_config_retention_under_a_day_is_refused(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "12h"\n')
    young = make_session(fake_home, age_days=0.6)
    old = make_session(fake_home, age_days=40)
    before = outside_state(fake_home)

    proc = fake_home.cli("prune", "--json")

    assert proc.returncode == 2
    assert "retention" in proc.stderr and "12h" in proc.stderr
    assert outside_state(fake_home) == before
    assert whole(young) and whole(old)


@pytest.mark.parametrize(
    "args",
    [("--older-than", "30x"), ("--older-than", "0d"), ("--older-than", "30d", "--agent", "nosuch")],
    ids=["bad-age", "zero-age", "unknown-agent"],
)
def test_bad_prune_options_exit_2_and_remove_nothing(
    fake_home: FakeHome, args: tuple[str, ...]
) -> None:
    s = make_session(fake_home, age_days=40)

    proc = fake_home.cli("prune", *args, "--json")

    assert proc.returncode == 2
    assert proc.stdout.strip() == ""
    assert args[-1] in proc.stderr
    assert whole(s)


def test_the_floor_is_enforced_inside_the_prune_itself(fake_home: FakeHome) -> None:
    now = time.time()
    with pytest.raises(PruneRefused):
        check_floor({"claude": now - 12 * 3600}, now)
    with pytest.raises(PruneRefused):
        check_floor({"claude": now - 30 * DAY, "codex": now - 3600}, now)
    with pytest.raises(PruneRefused):
        check_floor({"claude": float("nan")}, now)
    with pytest.raises(PruneRefused):
        check_floor({"claude": now + DAY}, now)
    check_floor({"claude": now - DAY - 1}, now)

    young = make_session(fake_home, age_days=0.6)
    ctx = context()
    pruner = Pruner(ctx.adapters, ctx.state_dir, index=ctx.index)
    before = outside_state(fake_home)
    with pytest.raises(PruneRefused):
        pruner.run(PruneOptions(cutoffs={"claude": now - 12 * 3600}, now=now))
    assert outside_state(fake_home) == before and whole(young)


def test_prune_without_a_cutoff_exits_2_and_names_the_config_line(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=400)
    for config in (None, "max_removals = 5\n"):
        if config is not None:
            fake_home.write_config(config)
        proc = fake_home.cli("prune")
        assert proc.returncode == 2
        assert 'retention = "30d"' in proc.stderr
        assert str(fake_home.config_path) in proc.stderr
        assert "--older-than" in proc.stderr
    assert whole(s)


# -- invariant 8: a dry run decides the same and removes nothing ---------------------


def build_twin(where: FakeHome, now: float) -> list[str]:
    """The same sessions (same ids, times and registry pids) in any fake home."""
    ids = [f"{n:08x}-aaaa-4aaa-8aaa-{n:012x}" for n in range(1, 8)]
    shapes: list[tuple[str | None, float]] = [
        (None, 40),
        (None, 50),  # the parent of a recent fork
        (ids[1], 2),
        (None, 45),  # pinned
        (None, 60),  # the old parent of an old child
        (ids[4], 41),
        (None, 1),
    ]
    for n, (parent, age) in enumerate(shapes):
        # Registry pids above PID_MAX_LIMIT: never alive.
        make_session(where, id=ids[n], parent=parent, age_days=age, now=now, pid=4_300_000 + n)
    ctx = Context.open(Env.from_environ(where.environ))
    pin(ctx, "claude", ids[3])
    return ids


def comparable(doc: dict[str, Any], root: Path) -> dict[str, Any]:
    def local(p: str) -> str:
        return p.replace(str(root), "<root>")

    return {
        "removed": [{**r, "paths": sorted(local(p) for p in r["paths"])} for r in doc["removed"]],
        "kept": sorted((k["id"], k["reason"], local(k["detail"])) for k in doc["kept"]),
        "failed": doc["failed"],
        "residual": doc["residual"],
        "agents": sorted(doc["cutoffs"]),
    }


@pytest.fixture
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeHome]:
    """A second fake user (for subprocesses only), outside the first one's tree."""
    fh = make_fake_home(tmp_path_factory.mktemp("twin"))
    yield fh
    subprocess.run(["rm", "-rf", fh.environ["XDG_RUNTIME_DIR"]], check=False)


def test_a_dry_run_decides_like_the_real_run_and_changes_nothing(
    fake_home: FakeHome, twin: FakeHome
) -> None:
    now = time.time()
    ids = build_twin(fake_home, now)
    assert build_twin(twin, now) == ids
    before = outside_state(fake_home)

    dry = fake_home.cli("prune", "--dry-run", "--older-than", "30d", "--json")
    real = twin.cli("prune", "--older-than", "30d", "--json")

    assert dry.returncode == 0 and real.returncode == 0, dry.stderr + real.stderr
    dry_doc, real_doc = json.loads(dry.stdout), json.loads(real.stdout)
    assert dry_doc["dry_run"] is True and real_doc["dry_run"] is False
    assert_report_shape(dry_doc)
    assert comparable(dry_doc, fake_home.root) == comparable(real_doc, twin.root)
    assert set(removed_ids(real_doc)) == {ids[0], ids[4], ids[5]}
    assert removed_ids(real_doc).index(ids[5]) < removed_ids(real_doc).index(ids[4])
    assert reasons(real_doc) == {ids[1]: "ancestor", ids[3]: "pinned"}
    assert outside_state(fake_home) == before, "the dry run changed nothing"
    assert not any(os.path.lexists(p) for r in real_doc["removed"] for p in r["paths"])


# -- invariant 5 and 9: failures, kills, and the journal ------------------------------

FAIL_ON_PATH = """
import os
import agentkeep.rmtree as rmtree

def fail(path):
    if path == os.environ["FAIL_PATH"]:
        raise PermissionError(13, "Permission denied", path)

rmtree._before_leaf = fail
"""


def pending_journal(fh: FakeHome) -> list[str]:
    return sorted(e.id for e in Journal(fh.state).pending() if e.agent == "claude")


def test_a_removal_failing_half_way_is_reported_and_finished_by_the_next_run(
    fake_home: FakeHome,
) -> None:
    s = make_session(fake_home, age_days=40)
    other = make_session(fake_home, age_days=41)
    env = {"FAIL_PATH": str(s.file_history)}
    before = paths_state(s.all_paths())

    proc = cli_with_seams(
        fake_home, FAIL_ON_PATH, "prune", "--older-than", "30d", "--json", env=env
    )
    out, err = proc.communicate(timeout=60)

    doc = json.loads(out)
    if not doc["failed"]:
        pytest.fail(f"SETUP INVALID: the seam never failed a removal\n{err}")
    assert proc.returncode == 1
    assert_report_shape(doc)
    assert [(f["agent"], f["id"]) for f in doc["failed"]] == [("claude", s.id)]
    assert "PermissionError" in doc["failed"][0]["reason"]
    assert removed_ids(doc) == [other.id] and gone(other)
    assert not s.transcript.exists(), "the record the agent lists it by went first"
    assert s.file_history.exists()
    assert pending_journal(fake_home) == [s.id], "the journal entry is left"

    code, again, err = cli_json(fake_home, "prune", "--older-than", "30d")

    assert code == 0, err
    assert again["failed"] == []
    assert gone(s), [p for p in s.all_paths() if p.exists()]
    assert pending_journal(fake_home) == []
    assert index_ids(fake_home) == disk_ids() == []
    # What the finishing run removed went to the trash too: all of it comes back.
    restored = fake_home.cli("restore", "claude", s.id)
    assert restored.returncode == 0, restored.stderr
    assert paths_state(s.all_paths()) == before


KILL_MID_REMOVAL = """
import os, signal
import agentkeep.prune.remove as prune
import agentkeep.rmtree as rmtree

counts = {"sessions": 0, "leaves": 0}

def on_leaf(path):
    counts["leaves"] += 1
    if counts["leaves"] > int(os.environ["KILL_AFTER_LEAVES"]):
        os.kill(os.getpid(), signal.SIGKILL)

def after_lease(agent, sid):
    counts["sessions"] += 1
    if counts["sessions"] == int(os.environ["KILL_ON_SESSION"]):
        rmtree._before_leaf = on_leaf

prune._after_lease = after_lease
"""


def test_a_prune_killed_mid_removal_is_finished_by_the_next_run(fake_home: FakeHome) -> None:
    old = [make_session(fake_home, cwd=f"/home/u/p{i}", age_days=40 + i) for i in range(3)]
    recent = make_session(fake_home, age_days=2)
    env = {"KILL_ON_SESSION": "2", "KILL_AFTER_LEAVES": "3"}

    proc = cli_with_seams(fake_home, KILL_MID_REMOVAL, "prune", "--older-than", "30d", env=env)
    proc.communicate(timeout=60)

    if proc.returncode != -signal.SIGKILL:
        pytest.fail(f"SETUP INVALID: the prune was not killed (exit {proc.returncode})")
    half = [s for s in old if not whole(s) and not gone(s)]
    if len(half) != 1 or half[0].id not in pending_journal(fake_home):
        pytest.fail("SETUP INVALID: no session was left half removed with a journal entry")
    assert not half[0].transcript.exists(), "the primary record went first"

    code, doc, err = cli_json(fake_home, "prune", "--older-than", "30d")

    assert code == 0, err
    assert doc["failed"] == []
    for s in [*old, recent]:
        assert whole(s) or gone(s), f"{s.id} is half removed"
    assert all(gone(s) for s in old) and whole(recent)
    assert pending_journal(fake_home) == []
    code, rows, _ = cli_json(fake_home, "ls")
    code2, counts, _ = cli_json(fake_home, "scan")
    _, rows_after_scan, _ = cli_json(fake_home, "ls")
    assert code == code2 == 0
    assert [r["id"] for r in rows] == [r["id"] for r in rows_after_scan] == [recent.id]
    assert counts["sessions"]["claude"] == len(rows)


HOLD_AFTER_PLAN = """
import os, pathlib, time
import agentkeep.prune.run as prune

def wait_at_barrier():
    barrier = pathlib.Path(os.environ["BARRIER"])
    (barrier / "planned").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not (barrier / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit("barrier never opened")
        time.sleep(0.01)

prune._after_plan = wait_at_barrier
"""


def blocked_on_a_flock(pid: int) -> bool:
    """/proc/locks lists a process waiting for a flock with "->"."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "->" and fields[2] == "FLOCK" and fields[5] == str(pid):
            return True
    return False


def test_two_prunes_started_together_run_one_after_the_other(
    fake_home: FakeHome, tmp_path: Path, spawn: Spawn
) -> None:
    old = [make_session(fake_home, cwd=f"/home/u/p{i}", age_days=40 + i) for i in range(3)]
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    first = cli_with_seams(
        fake_home,
        HOLD_AFTER_PLAN,
        "prune",
        "--older-than",
        "30d",
        "--json",
        env={"BARRIER": str(barrier)},
    )
    try:
        wait_for(lambda: (barrier / "planned").exists(), "the first prune reaching its plan")
        second = spawn(
            [sys.executable, "-m", "agentkeep", "prune", "--older-than", "30d", "--json"]
        )
        wait_for(lambda: blocked_on_a_flock(second.pid), "the second prune waiting on the lock")
        assert second.poll() is None
        assert all(whole(s) for s in old), "nothing went before the first prune acted"
        (barrier / "go").write_text("")
        out1, err1 = first.communicate(timeout=60)
        out2, err2 = second.communicate(timeout=60)
    finally:
        (barrier / "go").write_text("")
        if first.poll() is None:
            first.kill()
        first.wait(timeout=10)

    assert first.returncode == 0, err1
    assert second.returncode == 0, err2
    one, two = json.loads(out1), json.loads(out2)
    assert sorted(removed_ids(one)) == sorted(s.id for s in old)
    assert removed_ids(two) == [], "nothing is removed twice"
    assert one["failed"] == two["failed"] == []
    assert all(gone(s) for s in old)


# -- the scheduled prune's pause ------------------------------------------------


def write_last_prune(fh: FakeHome, ts: float) -> None:
    fh.state.mkdir(parents=True, exist_ok=True)
    (fh.state / "last_prune.json").write_text(json.dumps({"ts": ts, "time": rfc3339(ts)}))


def scheduled() -> dict[str, Any] | None:
    report = prune(context(), scheduled=True)
    return None if report is None else report.to_json()


def paused_reason() -> str | None:
    reason = status_fields(context())["paused"]
    return reason if reason is None else str(reason)


@pytest.mark.parametrize(
    ("last_prune_ago", "newest_age", "words"),
    [
        (-3600.0, 2.0, "clock"),  # the clock reads before the last prune
        (31 * DAY, 2.0, "retention"),  # more than the retention since the last prune
        (None, 35.0, "newest"),  # even the newest session is idle past the retention
    ],
    ids=["clock-behind", "long-since-last-prune", "all-idle"],
)
def test_a_scheduled_prune_pauses_when_the_clock_or_machine_looks_wrong(
    fake_home: FakeHome, last_prune_ago: float | None, newest_age: float, words: str
) -> None:
    fake_home.write_config('retention = "30d"\n')
    old = make_session(fake_home, age_days=40)
    newest = make_session(fake_home, age_days=newest_age)
    if last_prune_ago is not None:
        write_last_prune(fake_home, time.time() - last_prune_ago)

    doc = scheduled()

    assert doc is not None and doc["removed"] == [] and doc["kept"] == []
    assert words in doc["paused"]
    assert paused_reason() == doc["paused"]
    assert (fake_home.state / "pause.json").exists()
    assert whole(old) and whole(newest)

    # The pause persists though the condition is gone.
    write_last_prune(fake_home, time.time() - 3600)
    make_session(fake_home, age_days=0.5)
    again = scheduled()
    assert again is not None and again["paused"] == doc["paused"] and again["removed"] == []
    assert whole(old)


def test_a_cli_prune_lifts_the_pause_and_a_dry_run_does_not(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "30d"\n')
    old = make_session(fake_home, age_days=40)
    recent = make_session(fake_home, age_days=2)
    write_last_prune(fake_home, time.time() + 3600)
    doc = scheduled()
    if doc is None or not doc.get("paused"):
        pytest.fail("SETUP INVALID: the scheduled prune did not pause")

    dry = fake_home.cli("prune", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert paused_reason() == doc["paused"], "a dry run does not lift the pause"
    assert whole(old)

    code, real, err = cli_json(fake_home, "prune")
    assert code == 0, err
    assert removed_ids(real) == [old.id]
    assert paused_reason() is None
    assert not (fake_home.state / "pause.json").exists()
    after = scheduled()
    assert after is not None and not after.get("paused")
    assert whole(recent)


@pytest.mark.parametrize(
    "last_prune_ago",
    [
        pytest.param(None, id="never"),
        pytest.param(60 * DAY, id="old"),
        pytest.param(-3600.0, id="ahead"),
    ],
)
def test_an_empty_index_never_pauses(fake_home: FakeHome, last_prune_ago: float | None) -> None:
    fake_home.write_config('retention = "30d"\n')
    if last_prune_ago is not None:
        write_last_prune(fake_home, time.time() - last_prune_ago)

    doc = scheduled()

    assert doc is not None and not doc.get("paused")
    assert paused_reason() is None
    assert not (fake_home.state / "pause.json").exists()


def test_max_removals_caps_a_scheduled_run(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "30d"\nmax_removals = 2\n', seen=True)
    old = [make_session(fake_home, age_days=40 + i, full=False) for i in range(4)]
    make_session(fake_home, age_days=1, full=False)
    write_last_prune(fake_home, time.time() - DAY)

    doc = scheduled()

    assert doc is not None and not doc.get("paused")
    assert len(doc["removed"]) == 2
    assert sorted(r for r, _ in kept(doc).values()) == ["capped", "capped"]
    assert sum(gone(s) for s in old) == 2


def test_a_paused_run_removes_nothing_not_even_expired_trash(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "30d"\n')
    trashed = make_session(fake_home, age_days=3)
    assert fake_home.cli("purge", "claude", trashed.id).returncode == 0
    # Trashed eight days ago for seven days: due to expire by this clock.
    open_entry(
        fake_home.state,
        "claude",
        trashed.id,
        parent=None,
        keep_for=7 * DAY,
        now=time.time() - 8 * DAY,
    ).close()
    make_session(fake_home, age_days=40)
    make_session(fake_home, age_days=2)
    write_last_prune(fake_home, time.time() + 3600)  # the clock is behind: do nothing

    doc = scheduled()

    if doc is None or not doc.get("paused"):
        pytest.fail("SETUP INVALID: the scheduled prune did not pause")
    assert [e.id for e in list_entries(fake_home.state)] == [trashed.id]


def test_a_scheduled_prune_skips_its_turn_while_another_prune_runs(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "30d"\n')
    old = make_session(fake_home, age_days=40)
    make_session(fake_home, age_days=1)
    fake_home.state.mkdir(parents=True, exist_ok=True)
    lock = PrunerLock(fake_home.state)
    assert lock.acquire(wait=False)
    try:
        assert scheduled() is None
    finally:
        lock.release()
    assert whole(old)
    doc = scheduled()
    assert doc is not None and removed_ids(doc) == [old.id]


def lease_files(fh: FakeHome) -> list[str]:
    folder = fh.state / "leases" / "claude"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def test_lease_files_go_with_their_sessions_and_a_dry_run_leaves_none(
    fake_home: FakeHome,
) -> None:
    old = [make_session(fake_home, cwd=f"/home/u/p{i}", age_days=40 + i) for i in range(3)]
    kept = make_session(fake_home, age_days=45)
    held = lease_file(fake_home, kept.id)  # a lease file nobody holds: it stays
    code, doc, err = cli_json(fake_home, "prune", "--older-than", "30d", "--dry-run")
    assert code == 0, err
    assert sorted(removed_ids(doc)) == sorted(s.id for s in [*old, kept])
    assert lease_files(fake_home) == [held.name], "a dry run creates no lease file"

    assert fake_home.cli("pin", "claude", kept.id).returncode == 0
    code, doc, err = cli_json(fake_home, "prune", "--older-than", "30d")
    assert code == 0, err
    assert sorted(removed_ids(doc)) == sorted(s.id for s in old)
    assert lease_files(fake_home) == [held.name], "each removed session's lease file is gone"


def test_an_index_write_that_fails_midway_loses_no_session_from_the_plan(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view is listed on the way to the index: when the index's write
    fails after taking some of the sessions, the rest are listed into the
    view all the same, and the prune plans and removes every one."""
    from agentkeep.index import rows, writing

    idle = [make_session(fake_home, age_days=40) for _ in range(5)]
    monkeypatch.setattr(rows, "BATCH", 2)
    writes = {"n": 0}
    write = writing._write

    def full_after_one(db: Any, done: Any) -> None:
        writes["n"] += 1
        if writes["n"] == 2:
            raise sqlite3.OperationalError("database or disk is full")
        write(db, done)

    monkeypatch.setattr(writing, "_write", full_after_one)
    doc = run_prune(older_than="30d")
    if writes["n"] < 2:
        pytest.fail("SETUP INVALID: the index's write never failed midway")
    assert sorted(removed_ids(doc)) == sorted(s.id for s in idle)


def test_a_listing_that_fails_midway_fails_the_prune_and_removes_nothing(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError of the adapter's own listing is not the index's (which a
    prune goes on without): the run fails, naming it, before any plan, and
    the index keeps what it held."""
    idle = [make_session(fake_home, age_days=40) for _ in range(3)]
    ctx = context()
    scan(ctx)
    listing = ClaudeAdapter.sessions

    def failing_scan(
        self: ClaudeAdapter, names: frozenset[str] | None = None, known: Any = None
    ) -> Iterator[Any]:
        it = listing(self, names, known)
        yield next(it)
        raise OSError(5, "Input/output error", str(fake_home.claude / "projects"))

    monkeypatch.setattr(ClaudeAdapter, "sessions", failing_scan)
    with pytest.raises(OSError, match="Input/output error"):
        prune(ctx, older_than="30d")
    assert all(whole(s) for s in idle)
    assert sorted(r.id for r in Index(ctx.index.path).sessions()) == sorted(s.id for s in idle)


def test_a_fork_made_while_the_plan_lists_keeps_its_parent(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view's directory signatures are taken before the listing: a fork
    made in a directory already listed shows at the first check."""
    parent = make_session(fake_home, age_days=40)
    forks: list[ClaudeSessionPaths] = []
    listing = ClaudeAdapter.sessions

    def scan_then_fork(
        self: ClaudeAdapter, names: frozenset[str] | None = None, known: Any = None
    ) -> Iterator[Any]:
        yield from listing(self, names, known)
        if names is None and not forks:  # every directory listed already
            forks.append(make_session(fake_home, parent=parent.id, age_days=0.01, full=False))

    monkeypatch.setattr(ClaudeAdapter, "sessions", scan_then_fork)
    doc = run_prune(older_than="30d")

    if len(forks) != 1 or forks[0].transcript.parent != parent.transcript.parent:
        pytest.fail("SETUP INVALID: no fork was made in the listed directory while it was listed")
    assert reasons(doc) == {parent.id: "ancestor"}
    assert removed_ids(doc) == [] and whole(parent)


def test_a_session_all_behind_a_link_is_kept_unsafe_at_every_prune(
    fake_home: FakeHome,
) -> None:
    """A Claude session of which only its tmp dir is left, below a key dir
    that is a link to elsewhere: the link and what it leads to stay, and
    every prune keeps it `unsafe`; none reports it removed (with no paths)."""
    s = make_session(fake_home, kinds=["tmp"], age_days=40)
    elsewhere = fake_home.root / "elsewhere" / "tmpkey"
    key_dir = s.layout.tmp_root / s.key
    elsewhere.parent.mkdir(parents=True)
    key_dir.rename(elsewhere)
    key_dir.symlink_to(elsewhere)
    for _ in range(2):
        done = fake_home.cli("prune", "--older-than", "30d", "--json")
        report = json.loads(done.stdout)
        assert done.returncode == 0, done.stderr
        assert report["removed"] == [], report
        assert [(k["id"], k["reason"]) for k in report["kept"]] == [(s.id, "unsafe")]
    assert key_dir.is_symlink() and (elsewhere / s.id).is_dir()
