"""The trash: move, list, restore without overwriting, expire, partial entries."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentkeep import rmtree
from agentkeep.core.context import Context
from agentkeep.core.pruning import prune
from agentkeep.core.trashcan import expire_trash
from agentkeep.leases import is_held, lease_path, try_exclusive
from agentkeep.model import Artifact
from agentkeep.paths import Env, ensure_private_dir
from agentkeep.removal import SessionRemoval
from agentkeep.trash.entries import (
    NoSuchEntry,
    RestoreConflict,
    RestoreRefused,
    TrashError,
    entry_dir,
    list_entries,
)
from agentkeep.trash.expiry import Expiry
from agentkeep.trash.restored import restored_at
from agentkeep.trash.restoring import restore
from agentkeep.trash.writing import open_entry
from trees import tree_state
from waiting import wait_until

NOW = 1_800_000_000.0
WEEK = 7 * 86400.0


@pytest.fixture
def state(fake_home) -> Path:
    return ensure_private_dir(fake_home.state)


@pytest.fixture
def root(fake_home) -> Path:
    path = fake_home.claude / "projects" / "-home-u-proj"
    path.mkdir(parents=True)
    return path


def art(root: Path, rel: str) -> Artifact:
    return Artifact(path=str(root / rel), kind="t", bytes=0, mtime=0.0, root=str(root))


def make_session(root: Path, sid: str) -> list[Artifact]:
    """A transcript file and a session directory with odd modes, a link, a
    read-only directory and an odd name; its artifacts."""
    (root / f"{sid}.jsonl").write_text(json.dumps({"sessionId": sid}) + "\n")
    base = root / sid
    (base / "tool-results" / "nested").mkdir(parents=True)
    (base / "tool-results" / "r1.txt").write_bytes(os.urandom(3000))
    (base / "tool-results" / "nested" / "r2.bin").write_bytes(os.urandom(100))
    script = base / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    readonly = base / "frozen"
    readonly.mkdir()
    (readonly / "kept.txt").write_text("frozen")
    (readonly / "kept.txt").chmod(0o444)
    readonly.chmod(0o555)
    os.symlink("/etc/hostname", base / "a-link")
    (base / "new\nline \udcff").write_text("odd")
    os.utime(base / "tool-results", ns=(1_000_000_000, 1_500_000_000_000_000_000))
    return [art(root, f"{sid}.jsonl"), art(root, sid)]


def trash_session(
    state: Path, root: Path, sid: str, *, parent: str | None = None, keep_for: float = WEEK
) -> SessionRemoval:
    artifacts = make_session(root, sid)
    with open_entry(state, "claude", sid, parent=parent, keep_for=keep_for, now=NOW) as writer:
        r = SessionRemoval("claude", sid, dry_run=False, trash=writer)
        for artifact in artifacts:
            r.remove_path(artifact)
    return r


def test_trash_keeps_inodes_and_restore_puts_back_modes_hashes_and_times(
    state: Path, root: Path
) -> None:
    sid = "0b7c0000-0000-4000-8000-000000000002"
    artifacts = make_session(root, sid)
    # The session's own entries (the root's mtime moves as they go and come).
    before = tree_state(root / sid, root / f"{sid}.jsonl")
    inode = os.stat(root / sid / "tool-results" / "r1.txt").st_ino

    with open_entry(state, "claude", sid, parent=None, keep_for=WEEK, now=NOW) as writer:
        r = SessionRemoval("claude", sid, dry_run=False, trash=writer)
        for artifact in artifacts:
            r.remove_path(artifact)
    assert os.listdir(root) == []
    assert r.removed == [a.path for a in artifacts] and not r.partial and r.residuals == []

    [entry] = list_entries(state)
    assert (entry.agent, entry.id, entry.partial, entry.parent) == ("claude", sid, False, None)
    assert (entry.trashed_at, entry.expires_at) == (NOW, NOW + WEEK)
    assert entry.roots == {0: str(root)}
    assert [i.rel for i in entry.items] == [f"{sid}.jsonl", sid]
    assert entry.bytes == r.bytes and r.bytes > 3100
    moved = entry.path / "roots" / "0" / sid / "tool-results" / "r1.txt"
    assert os.stat(moved).st_ino == inode, "a move into the trash is a rename, not a copy"

    result = restore(state, "claude", sid, now=NOW + 3600)
    assert tree_state(root / sid, root / f"{sid}.jsonl") == before
    assert [e.id for e in result.entries] == [sid]
    assert result.bytes == r.bytes
    assert list_entries(state) == []
    assert not entry.path.exists()
    assert restored_at(state) == {("claude", sid): NOW + 3600}


@pytest.mark.parametrize("where", ["under its root", "in directories it made"])
def test_a_removal_that_stops_before_its_entry_is_closed_is_restored_whole(
    state: Path, root: Path, where: str
) -> None:
    """entry.json is not written after each move: one that names the root
    and the directories made is enough for restore, which moves back each
    root's whole tree. The writer is never closed here, as in a prune that
    was killed."""
    sid = "0b7c0000-0000-4000-8000-000000000007"
    top = root if where == "under its root" else root.parent.parent
    artifacts = [Artifact(a.path, "t", 0, 0.0, root=str(top)) for a in make_session(root, sid)]
    made = set()
    if where == "in directories it made":
        # A second directory under the same root, made after the root is named.
        todo = top / "todos" / f"{sid}.json"
        todo.parent.mkdir()
        todo.write_text("[]")
        artifacts.append(Artifact(str(todo), "t", 0, 0.0, root=str(top)))
        made = {"0/projects", f"0/projects/{root.name}", "0/todos"}
    before = tree_state(root / sid, root / f"{sid}.jsonl")
    writer = open_entry(state, "claude", sid, parent=None, keep_for=WEEK, now=NOW)
    r = SessionRemoval("claude", sid, dry_run=False, trash=writer)
    for artifact in artifacts:
        r.remove_path(artifact)
    if os.listdir(root) != [] or r.removed != [a.path for a in artifacts]:
        pytest.fail("SETUP INVALID: the session was not moved")

    [entry] = list_entries(state)
    assert entry.roots == {0: str(top)}
    assert set(entry.dir_times) == made, "each directory made is named before a move into it"
    restore(state, "claude", sid, now=NOW)
    assert tree_state(root / sid, root / f"{sid}.jsonl") == before


def test_restore_refuses_to_overwrite_and_moves_nothing(state: Path, root: Path) -> None:
    sid = "0b7c0000-0000-4000-8000-000000000003"
    trash_session(state, root, sid)
    [entry] = list_entries(state)
    trash_before = tree_state(entry.path)
    # The agent wrote again where a trashed file would go back.
    (root / sid / "tool-results").mkdir(parents=True)
    (root / sid / "tool-results" / "r1.txt").write_text("new work")
    (root / f"{sid}.jsonl").write_text("new transcript")
    root_before = tree_state(root)

    with pytest.raises(RestoreConflict) as raised:
        restore(state, "claude", sid, now=NOW)
    assert set(raised.value.paths) == {
        str(root / sid / "tool-results" / "r1.txt"),
        str(root / f"{sid}.jsonl"),
    }
    assert tree_state(root) == root_before, "a refused restore changed the destination"
    assert tree_state(entry.path) == trash_before, "a refused restore changed the trash"
    assert restored_at(state) == {}


def test_restore_never_follows_a_link_in_the_destination(
    state: Path, root: Path, fake_home
) -> None:
    sid = "0b7c0000-0000-4000-8000-000000000004"
    trash_session(state, root, sid)
    elsewhere = fake_home.root / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, root / sid)
    with pytest.raises(RestoreConflict) as raised:
        restore(state, "claude", sid, now=NOW)
    assert raised.value.paths == [str(root / sid)]
    assert os.listdir(elsewhere) == []
    assert not (root / f"{sid}.jsonl").exists()


def test_restore_brings_back_trashed_ancestors(state: Path, root: Path) -> None:
    grand, parent, child = ("g" * 8, "p" * 8, "c" * 8)
    trash_session(state, root, grand)
    trash_session(state, root, parent, parent=grand)
    trash_session(state, root, child, parent=parent)
    other = "o" * 8
    trash_session(state, root, other, parent=grand)

    result = restore(state, "claude", parent, now=NOW + 5)
    assert [e.id for e in result.entries] == [parent, grand]
    assert (root / grand).is_dir() and (root / parent).is_dir()
    assert not (root / child).exists(), "descendants stay in the trash"
    assert {e.id for e in list_entries(state)} == {child, other}
    assert restored_at(state) == {("claude", parent): NOW + 5, ("claude", grand): NOW + 5}

    restore(state, "claude", child, now=NOW + 9)
    assert (root / child / "frozen" / "kept.txt").read_text() == "frozen"
    assert restored_at(state)[("claude", child)] == NOW + 9


def test_restore_is_refused_while_the_session_is_held(state: Path, root: Path, fake_home) -> None:
    sid = "held-session"
    trash_session(state, root, sid)
    path = lease_path(state, "claude", sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        ["flock", "-s", str(path), "sh", "-c", "echo ready; exec sleep 60"],
        env=fake_home.environ,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as holder:
        try:
            assert holder.stdout is not None
            ready, _, _ = select.select([holder.stdout], [], [], 15)
            assert ready and holder.stdout.readline().strip() == "ready", "SETUP INVALID"
            with pytest.raises(RestoreRefused):
                restore(state, "claude", sid, now=NOW)
            assert not (root / sid).exists()
            assert [e.id for e in list_entries(state)] == [sid]
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
    # flock's `sleep` holds the lock it inherited until it is gone too, which
    # can be after flock itself has been reaped.
    wait_until(lambda: not is_held(path), "the holder's lock released", 15)
    restore(state, "claude", sid, now=NOW)
    assert (root / sid).is_dir()


def test_restore_of_an_unknown_session(state: Path) -> None:
    with pytest.raises(NoSuchEntry):
        restore(state, "claude", "nothing-here", now=NOW)


def test_expire_removes_only_expired_entries_each_under_its_lease(state: Path, root: Path) -> None:
    trash_session(state, root, "old-one", keep_for=3600)
    trash_session(state, root, "held-old", keep_for=3600)
    trash_session(state, root, "young-one", keep_for=WEEK)
    _settle(state)
    expiry = Expiry(state)
    lease = try_exclusive(lease_path(state, "claude", "held-old"))
    assert lease is not None
    with lease:
        expired = expiry.run(NOW + 7200)
    assert [e.id for e in expired] == ["old-one"]
    assert {e.id for e in list_entries(state)} == {"held-old", "young-one"}
    assert sorted(os.listdir(state / "trash" / "claude")) == ["held-old", "young-one"]

    _settle(state)
    expired = expiry.run(NOW + 7200)
    assert [e.id for e in expired] == ["held-old"], "a held entry is due at the next run"
    assert expiry.run(NOW + 7200) == []
    assert [e.id for e in list_entries(state)] == ["young-one"]


def test_an_artifact_on_another_file_system_is_removed_at_once(
    state: Path, root: Path, fake_home, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_root = fake_home.system_tmp / f"claude-{os.getuid()}"
    (tmp_root / "-home-u-proj" / "sid" / "tasks").mkdir(parents=True)
    (tmp_root / "-home-u-proj" / "sid" / "tasks" / "out").write_text("scratch")
    (root / "sid.jsonl").write_text("transcript")
    looked: list[str] = []

    def tmpfs(path: str, mount_id: int) -> int:
        if path == str(tmp_root) or path.startswith(str(tmp_root) + "/"):
            looked.append(path)
            return mount_id + 1
        return mount_id

    monkeypatch.setattr(rmtree, "_mount_id_override", tmpfs)
    with open_entry(state, "claude", "sid", parent=None, keep_for=WEEK, now=NOW) as writer:
        r = SessionRemoval("claude", "sid", dry_run=False, trash=writer)
        r.remove_path(art(root, "sid.jsonl"))
        assert not r.partial
        r.remove_path(
            Artifact(str(tmp_root / "-home-u-proj" / "sid"), "t", 0, 0.0, root=str(tmp_root))
        )
    assert looked, "SETUP INVALID: the other file system was never looked at"
    assert not (tmp_root / "-home-u-proj" / "sid").exists()
    assert r.partial
    [entry] = list_entries(state)
    assert entry.partial and [i.rel for i in entry.items] == ["sid.jsonl"]

    restore(state, "claude", "sid", now=NOW)
    assert (root / "sid.jsonl").read_text() == "transcript"


def test_removed_at_once_marks_the_entry_partial(state: Path) -> None:
    with open_entry(state, "opencode", "ses_1", parent=None, keep_for=WEEK, now=NOW) as writer:
        r = SessionRemoval("opencode", "ses_1", dry_run=False, trash=writer)
        r.removed_at_once("opencode.db: session ses_1")
    assert r.partial and r.removed == ["opencode.db: session ses_1"]
    [entry] = list_entries(state)
    assert entry.partial and entry.items == []


def test_a_dry_run_writes_nothing_to_the_trash(state: Path, root: Path) -> None:
    artifacts = make_session(root, "dry")
    before = tree_state(root)
    with open_entry(state, "claude", "dry", parent=None, keep_for=WEEK, now=NOW) as writer:
        r = SessionRemoval("claude", "dry", dry_run=True, trash=writer)
        for artifact in artifacts:
            r.remove_path(artifact)
    assert tree_state(root) == before
    assert r.bytes > 3100 and not r.partial
    [entry] = list_entries(state)
    assert entry.items == [] and not (entry.path / "roots").exists()


def test_unreadable_entries_are_skipped_and_never_expired(state: Path, root: Path) -> None:
    trash_session(state, root, "good", keep_for=60)
    bad = state / "trash" / "claude" / "bad"
    bad.mkdir()
    (bad / "entry.json").write_text("{not json")
    mismatched = state / "trash" / "claude" / "mismatch"
    mismatched.mkdir()
    good = json.loads((state / "trash" / "claude" / "good" / "entry.json").read_text())
    (mismatched / "entry.json").write_text(json.dumps(good))
    (state / "trash" / "claude" / "no-entry-json").mkdir()

    assert [e.id for e in list_entries(state)] == ["good"]
    assert [e.id for e in Expiry(state).run(NOW + WEEK)] == ["good"]
    assert (bad / "entry.json").exists() and (mismatched / "entry.json").exists()
    with pytest.raises(TrashError):
        open_entry(state, "claude", "bad", parent=None, keep_for=60, now=NOW)


def test_restored_at_never_guesses(state: Path) -> None:
    assert restored_at(state) == {}
    (state / "restored.json").write_text('{"claude/a": "yesterday"}')
    with pytest.raises(TrashError):
        restored_at(state)


def test_a_deep_tree_goes_to_the_trash_and_back(state: Path, root: Path) -> None:
    depth = 3000  # deeper than PATH_MAX allows by name
    (root / "deep").mkdir()
    fd = os.open(root / "deep", os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("dd", dir_fd=fd)
        child = os.open("dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    leaf = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(leaf, b"deep")
    os.close(leaf)
    os.close(fd)

    with open_entry(state, "claude", "deep", parent=None, keep_for=WEEK, now=NOW) as writer:
        r = SessionRemoval("claude", "deep", dry_run=False, trash=writer)
        r.remove_path(art(root, "deep"))
    assert not (root / "deep").exists() and r.bytes == 4
    restore(state, "claude", "deep", now=NOW)
    fd = os.open(root / "deep", os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        child = os.open("dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    leaf = os.open("bottom", os.O_RDONLY, dir_fd=fd)
    assert os.read(leaf, 10) == b"deep"
    os.close(leaf)
    os.close(fd)
    rmtree.remove_tree_at(root, "deep")


UNREADABLE = "trash entry unreadable, skipped"


def _settle(state: Path) -> None:
    """The trash's directories last changed an hour ago."""
    an_hour_ago = time.time() - 3600
    for d in [state / "trash", *(state / "trash").iterdir()]:
        os.utime(d, (an_hour_ago, an_hour_ago))


@pytest.mark.parametrize("settled", [True, False])
def test_an_expiry_that_can_find_nothing_due_reads_no_entry(
    state: Path, root: Path, settled: bool
) -> None:
    """Unless its directories changed too lately to tell (their mtimes come
    from a coarse clock): then it reads them all again."""
    sid = "0b7c0000-0000-4000-8000-000000000010"
    trash_session(state, root, sid)
    if settled:
        _settle(state)
    expiry = Expiry(state)
    assert expiry.run(NOW + 60) == []
    [entry] = list_entries(state)
    (entry.path / "entry.json").write_text("{not json")  # in place: no directory moves

    with capture_logs() as logs:
        assert expiry.run(NOW + 120) == []
    read = UNREADABLE in [e["event"] for e in logs]
    assert read is not settled

    other = "0b7c0000-0000-4000-8000-000000000011"
    trash_session(state, root, other, keep_for=0)
    with capture_logs() as logs:
        assert [e.id for e in expiry.run(NOW + 180)] == [other], "a new entry is read"
    assert UNREADABLE in [e["event"] for e in logs]


def test_an_expiry_takes_the_soonest_entry_when_it_is_due(state: Path, root: Path) -> None:
    soon, late = "0b7c0000-0000-4000-8000-000000000012", "0b7c0000-0000-4000-8000-000000000013"
    trash_session(state, root, soon, keep_for=3600)
    trash_session(state, root, late)
    _settle(state)
    expiry = Expiry(state)
    assert expiry.run(NOW + 3599) == []
    assert [e.id for e in expiry.run(NOW + 3600)] == [soon]
    _settle(state)
    assert expiry.run(NOW + WEEK - 1) == []
    assert [e.id for e in expiry.run(NOW + WEEK)] == [late]


def test_a_prune_expires_the_trash_through_the_expiry_the_clock_runs(
    fake_home, state: Path, root: Path
) -> None:
    """What the daemon's hourly expiry read, a prune does not read again."""
    trash_session(state, root, "0b7c0000-0000-4000-8000-000000000014")
    _settle(state)
    ctx = Context.open(Env.from_environ(fake_home.environ))
    try:
        assert expire_trash(ctx) == []
        [entry] = list_entries(state)
        (entry.path / "entry.json").write_text("{not json")  # in place: no directory moves
        with capture_logs() as logs:
            report = prune(ctx, older_than="30d")
    finally:
        ctx.index.close()
    assert report is not None and not report.dry_run
    assert UNREADABLE not in [e["event"] for e in logs]


def test_a_restore_reads_no_entry_but_its_own_and_its_ancestors(state: Path, root: Path) -> None:
    parent, child, other = ("p" * 8, "c" * 8, "o" * 8)
    trash_session(state, root, parent)
    trash_session(state, root, child, parent=parent)
    trash_session(state, root, other)
    (entry_dir(state, "claude", other) / "entry.json").write_text("{not json")

    with capture_logs() as logs:
        result = restore(state, "claude", child, now=NOW + 5)
    assert [e.id for e in result.entries] == [child, parent]
    assert (root / child).is_dir() and (root / parent).is_dir()
    assert UNREADABLE not in [e["event"] for e in logs]


def test_an_expiry_handed_over_as_json_does_not_read_again(state: Path, root: Path) -> None:
    """A prune in a process of its own (daemon.child) starts from
    the daemon's last read, and hands its own back, as JSON."""
    sid = "0b7c0000-0000-4000-8000-000000000015"
    trash_session(state, root, sid, keep_for=3600)
    _settle(state)
    first = Expiry(state)
    assert first.run(NOW) == []
    [entry] = list_entries(state)
    (entry.path / "entry.json").write_text("{not json")  # in place: no directory moves
    handed = Expiry(state)
    handed.trust(json.loads(json.dumps(first.known())))
    with capture_logs() as logs:
        assert handed.run(NOW + 60) == []
    assert UNREADABLE not in [e["event"] for e in logs], "what the first read was read again"
    with capture_logs() as logs:
        assert handed.run(NOW + 3600) == []
    assert UNREADABLE in [e["event"] for e in logs], "the soonest expiry was not handed over"
