"""The zero adapter against real session trees in a fake home."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentkeep import leases
from agentkeep.adapters.base import load
from agentkeep.adapters.zero import ZeroAdapter
from agentkeep.model import Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.removal import SessionRemoval
from build_agents import DAY, make_zero_session, mtimes, write, zero_root
from fakehome import FakeHome

BAD_IDS = ["", ".", "..", "a/b", "../x", "-lead", "a.b", "a b", "x" * 129, "é"]


@pytest.fixture
def adapter(fake_home: FakeHome) -> ZeroAdapter:
    return ZeroAdapter(Env.from_environ(fake_home.environ))


@pytest.fixture
def root(fake_home: FakeHome) -> Path:
    path = zero_root(fake_home.data)
    path.mkdir(parents=True)
    return path


def scan(adapter: ZeroAdapter) -> dict[str, Session]:
    return {s.id: s for s in adapter.sessions()}


def remover(sid: str) -> SessionRemoval:
    return SessionRemoval("zero", sid, dry_run=False, trash=None)


def test_root_follows_xdg_data_home(adapter: ZeroAdapter, fake_home: FakeHome) -> None:
    assert [r.path for r in adapter.roots()] == [fake_home.data / "zero" / "sessions"]
    assert adapter.watch_dirs() == []  # nothing to watch before zero ran


def test_idle_session_every_artifact_found_and_nothing_of_another(
    adapter: ZeroAdapter, root: Path
) -> None:
    idle = make_zero_session(root, "idle-1", days=40)
    other = make_zero_session(root, "idle-10", days=1)  # shares a prefix
    sessions = scan(adapter)
    assert set(sessions) == {"idle-1", "idle-10"}
    s = sessions["idle-1"]
    assert {a.path for a in s.artifacts} == {str(p) for p in idle.artifacts}
    assert [a.path for a in s.primary] == [str(idle.metadata)]
    assert s.artifacts[-1].path == str(idle.dir)  # the directory goes last
    assert not any(a.path.startswith(str(other.dir)) for a in s.artifacts)
    assert all(a.root == str(root) and not a.linked for a in s.artifacts)
    sizes = sum(p.stat().st_size for p in idle.dir.rglob("*") if p.is_file())
    assert s.bytes == sizes == sum(a.bytes for a in s.artifacts)
    last = s.last_activity()
    assert last is not None and abs(last - (time.time() - 40 * DAY)) < 60
    assert load(adapter, "idle-1") == s
    assert adapter.watch_dirs() == [root]


def test_bad_ids_reach_nothing(adapter: ZeroAdapter, root: Path) -> None:
    make_zero_session(root, "ok-id_1")
    assert adapter.canonical_id("ok-id_1") == "ok-id_1"
    for raw in BAD_IDS:
        assert adapter.canonical_id(raw) is None, raw
        assert load(adapter, raw) is None, raw
    assert adapter.session_for_path(str(root / "ok-id_1" / "events.jsonl")) == "ok-id_1"
    assert adapter.session_for_path(str(root / "ok-id_1")) == "ok-id_1"
    for path in (root, root / ".." / "ok-id_1", root / "a b" / "x", root.parent, "ok-id_1"):
        assert adapter.session_for_path(str(path)) is None, path
    # A root /x/sessions never claims /x/sessions2/...
    assert adapter.session_for_path(str(root) + "2/ok-id_1/metadata.json") is None


def test_malformed_entries_are_skipped_with_a_log_line(adapter: ZeroAdapter, root: Path) -> None:
    make_zero_session(root, "good")
    truncated = make_zero_session(root, "truncated", metadata='{"sessionId": "trunc')
    make_zero_session(root, "liar", metadata='{"sessionId": "../x", "updatedAt": 1}')
    make_zero_session(root, "bad-parent", parent="../evil")
    make_zero_session(root, "listy", metadata="[1, 2]")
    os.mkdir(os.fsencode(root) + b"/bad\xff")
    (root / "dotted.name").mkdir()
    write(root / "plainfile", "not a session")
    with capture_logs() as logs:
        sessions = scan(adapter)
    assert set(sessions) == {"good", "truncated", "liar", "bad-parent", "listy"}
    # A metadata file that cannot be trusted never lets the session look idle.
    for sid in ("truncated", "liar", "listy"):
        assert sessions[sid].undated and sessions[sid].last_activity() is None, sid
    assert sessions["truncated"].primary[0].path == str(truncated.metadata)
    assert sessions["bad-parent"].parent is None and not sessions["bad-parent"].undated
    assert not sessions["good"].undated
    events = " ".join(e["event"] for e in logs)
    for expected in ("malformed metadata", "metadata names another session", "parentSessionId"):
        assert expected in events
    assert any(e.get("path", "").endswith("bad\udcff") for e in logs), "not an id: skipped"
    assert any(e.get("path", "").endswith("dotted.name") for e in logs)


def test_parent_comes_from_metadata(adapter: ZeroAdapter, root: Path) -> None:
    make_zero_session(root, "parent")
    make_zero_session(root, "child", parent="parent")
    make_zero_session(root, "selfish", parent="selfish")
    sessions = scan(adapter)
    assert sessions["child"].parent == "parent"
    assert sessions["parent"].parent is None
    assert sessions["selfish"].parent is None


@pytest.mark.parametrize(
    "updated_at",
    ["2026-01-01T00:00:00Z", "2026-01-01T01:00:00.123456789+01:00", 1767225600, 1767225600000],
)
def test_updated_at_counts_toward_activity(
    adapter: ZeroAdapter, root: Path, updated_at: object
) -> None:
    # Files last written far before the metadata's updatedAt.
    make_zero_session(root, "s", updated_at=updated_at, days=3000)
    s = load(adapter, "s")
    assert s is not None and not s.undated
    assert s.updated is not None and abs(s.updated - 1767225600) < 1
    assert s.last_activity() == s.updated


@pytest.mark.parametrize("updated_at", ["yesterday", "2026-01-01T00:00:00", True, -5, "", [1]])
def test_unreadable_updated_at_makes_the_session_undated(
    adapter: ZeroAdapter, root: Path, updated_at: object
) -> None:
    make_zero_session(root, "s", updated_at=updated_at, days=3000)
    s = load(adapter, "s")
    assert s is not None and s.undated and s.last_activity() is None


def test_missing_metadata_is_a_half_removed_session_still_dated(
    adapter: ZeroAdapter, root: Path
) -> None:
    z = make_zero_session(root, "half", days=40)
    z.metadata.unlink()
    s = load(adapter, "half")
    assert s is not None and not s.undated and s.primary == []
    assert s.last_activity() is not None
    adapter.remove(s, remover("half"))
    assert not z.dir.exists()
    assert load(adapter, "half") is None


def test_removal_takes_metadata_first_then_the_rest(adapter: ZeroAdapter, root: Path) -> None:
    z = make_zero_session(root, "gone", days=40)
    keep = make_zero_session(root, "gone2", days=40)
    s = load(adapter, "gone")
    assert s is not None
    r = remover("gone")
    adapter.remove(s, r)
    assert r.removed[0] == str(z.metadata)
    assert r.removed[-1] == str(z.dir)
    assert set(r.removed) == {str(p) for p in z.artifacts}
    assert not z.dir.exists() and r.residuals == []
    assert load(adapter, "gone") is None
    assert keep.metadata.exists() and set(scan(adapter)) == {"gone2"}


def test_linked_session_dir_is_not_followed(
    adapter: ZeroAdapter, root: Path, fake_home: FakeHome
) -> None:
    elsewhere = make_zero_session(fake_home.root / "elsewhere", "linked", days=40)
    (root / "linked").symlink_to(elsewhere.dir)
    s = scan(adapter)["linked"]
    assert s.unsafe is not None
    inner = [a for a in s.artifacts if a.path != str(root / "linked")]
    assert inner and all(a.linked for a in inner)
    r = remover("linked")
    adapter.remove(s, r)
    assert all(p.exists() for p in elsewhere.artifacts)
    assert str(root / "linked" / "metadata.json") in r.residuals


def test_root_others_can_write_to_is_unsafe(adapter: ZeroAdapter, root: Path) -> None:
    make_zero_session(root, "s", days=40)
    os.chmod(root, 0o777)
    try:
        s = load(adapter, "s")
        assert s is not None and s.unsafe is not None
        assert all(a.linked for a in s.artifacts)
    finally:
        os.chmod(root, 0o700)


def test_lock_files_name_zeros_own_lease(adapter: ZeroAdapter, root: Path) -> None:
    make_zero_session(root, "s", lease=False)
    s = load(adapter, "s")
    assert s is not None
    assert adapter.lock_files(s) == [root / "s" / "lease.lock"]
    assert not leases.is_held(root / "s" / "lease.lock")  # no file: nobody holds it


@pytest.fixture
def lease_holder(root: Path, fake_home: FakeHome, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A real process holding `<root>/s/lease.lock` shared, the way zero does:
    util-linux `flock -s`, or python's fcntl.flock(LOCK_SH)."""
    make_zero_session(root, "s")
    lease = root / "s" / "lease.lock"
    ready = "import sys, time; print('ready', flush=True); time.sleep(60)"
    if request.param == "flock":
        argv = ["flock", "-s", str(lease), sys.executable, "-c", ready]
    else:
        code = (
            "import fcntl, sys, time; f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_SH); "
            + ready.split("; ", 1)[1]
        )
        argv = [sys.executable, "-c", code, str(lease)]
    proc = subprocess.Popen(argv, env=fake_home.environ, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield lease
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("lease_holder", ["flock", "python"], indirect=True)
def test_a_shared_flock_on_lease_lock_is_a_holder(adapter: ZeroAdapter, lease_holder: Path) -> None:
    s = load(adapter, "s")
    assert s is not None
    # The pruner and `show` test every lock file the adapter names.
    assert adapter.lock_files(s) == [lease_holder]
    assert leases.is_held(lease_holder)
    # The probe released its own lock at once: a shared lock is still possible.
    with open(lease_holder) as f:
        fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)


def test_a_lease_released_holds_nothing(
    adapter: ZeroAdapter, root: Path, fake_home: FakeHome
) -> None:
    make_zero_session(root, "s")
    s = load(adapter, "s")
    assert s is not None
    code = "import sys, time; print('ready', flush=True); sys.stdin.readline()"
    argv = ["flock", "-s", str(root / "s" / "lease.lock"), sys.executable, "-c", code]
    proc = subprocess.Popen(
        argv, env=fake_home.environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert leases.is_held(adapter.lock_files(s)[0])
        assert proc.stdin is not None
        proc.stdin.write("done\n")
        proc.stdin.close()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert not leases.is_held(adapter.lock_files(s)[0])


def test_a_process_naming_the_id_is_a_holder(
    adapter: ZeroAdapter, root: Path, fake_home: FakeHome
) -> None:
    make_zero_session(root, "sess-42")
    make_zero_session(root, "sess-4")
    code = "import time; print('ready', flush=True); time.sleep(60)"
    argv = [sys.executable, "-c", code, "--session=sess-42"]
    proc = subprocess.Popen(argv, env=fake_home.environ, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        procs = ProcessTable.snapshot()
        named, other = load(adapter, "sess-42"), load(adapter, "sess-4")
        assert named is not None and other is not None
        assert proc.pid in [h.pid for h in adapter.holders(named, procs)]
        assert proc.pid not in [h.pid for h in adapter.holders(other, procs)]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_scans_change_no_timestamp(adapter: ZeroAdapter, root: Path) -> None:
    for i in range(3):
        make_zero_session(root, f"s{i}", parent="s0" if i else None, days=40 + i)
    before = mtimes(root)
    sessions = scan(adapter)
    for s in sessions.values():
        load(adapter, s.id)
        adapter.holders(s, ProcessTable())
        adapter.session_for_path(s.artifacts[0].path)
    adapter.watch_dirs()
    assert mtimes(root) == before
