"""The pi adapter against real session trees in a fake home (build_pi.py
writes them as pi 0.73 does), real processes and the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentkeep.adapters.base import load
from agentkeep.adapters.pi import PiAdapter
from agentkeep.model import HolderKind, Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.removal import SessionRemoval
from build_agents import mtimes
from build_pi import PiSession, PiTree, uuid7
from fakehome import FakeHome, kill_group

DAY = 86400.0
# pi sets its process title to `pi`: Node writes it over the arguments.
TITLED = "process.title = 'pi'; console.log('ready'); setInterval(() => {}, 1e6)"


def adapter_for(fh: FakeHome, **env: str) -> PiAdapter:
    return PiAdapter(Env.from_environ({**fh.environ, **env}))


@pytest.fixture
def tree(fake_home: FakeHome) -> PiTree:
    return PiTree(fake_home.home / ".pi" / "agent" / "sessions", Path(fake_home.environ["TMPDIR"]))


def scan(adapter: PiAdapter) -> dict[str, Session]:
    return {s.id: s for s in adapter.sessions()}


def paths(s: Session) -> list[str]:
    return [a.path for a in s.artifacts]


def test_every_session_file_and_its_bash_logs_are_found(fake_home: FakeHome, tree: PiTree) -> None:
    s = tree.session("/w/proj", days=40, log=True)
    other = tree.session("/w/other", log=True)
    adapter = adapter_for(fake_home)
    found = scan(adapter)
    assert set(found) == {s.id, other.id}
    got = found[s.id]
    assert paths(got) == [str(s.file), str(s.logs[0])]
    assert [a.path for a in got.primary] == [str(s.file)]
    assert got.workspace == "/w/proj" and got.parent is None and not got.undated
    last = got.last_activity()
    assert last is not None and abs(last - (time.time() - 40 * DAY)) < 60
    assert load(adapter, s.id) == got
    assert [r.path for r in adapter.roots()] == [tree.root]
    assert tree.directory("/w/proj") in adapter.watch_dirs()


def test_a_named_session_dir_is_flat_and_followed(fake_home: FakeHome, tmp_path: Path) -> None:
    root = tmp_path / "pi-sessions"
    flat = PiTree(root, Path(fake_home.environ["TMPDIR"]), flat=True)
    s = flat.session("/w/proj", log=True)
    adapter = adapter_for(fake_home, PI_CODING_AGENT_SESSION_DIR=str(root))
    assert s.file.parent == root
    assert paths(scan(adapter)[s.id]) == [str(s.file), str(s.logs[0])]
    assert adapter.session_for_path(str(s.file)) == s.id
    nested = adapter_for(fake_home, PI_CODING_AGENT_DIR=str(tmp_path / "agent"))
    assert [r.path for r in nested.roots()] == [tmp_path / "agent" / "sessions"]


def test_a_fork_names_its_parent_by_path_and_the_copied_logs_stay_the_parents(
    fake_home: FakeHome, tree: PiTree
) -> None:
    parent = tree.session("/w/proj", log=True)
    fork = tree.session("/w/proj", parent=parent, log=True)
    assert str(parent.logs[0]) in fork.file.read_text(), "SETUP INVALID: nothing copied"
    found = scan(adapter_for(fake_home))
    assert found[fork.id].parent == parent.id
    assert paths(found[fork.id]) == [str(fork.file), str(fork.logs[0])]
    assert paths(found[parent.id]) == [str(parent.file), str(parent.logs[0])]


def test_ids_sharing_a_long_prefix_are_told_apart_and_a_prefix_is_no_id(
    fake_home: FakeHome, tree: PiTree
) -> None:
    ms = int(time.time() * 1000)
    a, b = tree.session("/w/p", sid=uuid7(ms)), tree.session("/w/p", sid=uuid7(ms))
    assert a.id[:14] == b.id[:14] and a.id != b.id, "SETUP INVALID: no shared prefix"
    adapter = adapter_for(fake_home)
    assert set(scan(adapter)) == {a.id, b.id}
    for prefix in (a.id[:8], a.id[:14], a.id[:-1]):
        assert adapter.canonical_id(prefix) is None and load(adapter, prefix) is None
    got = load(adapter, b.id)
    assert got is not None and paths(got) == [str(b.file)]
    assert adapter.session_for_path(str(a.file)) == a.id
    proc = fake_home.cli("purge", "pi", a.id[:14], "--json")
    assert proc.returncode == 5 and a.file.exists() and b.file.exists()


def test_a_malformed_header_keeps_the_session_undated(fake_home: FakeHome, tree: PiTree) -> None:
    cut = tree.session("/w/p", days=40, header='{"type": "session", "id": "01')
    liar = tree.session("/w/p", days=40, header=json.dumps({"type": "session", "id": uuid7()}))
    good = tree.session("/w/p", days=40)
    odd = tree.directory("/w/p") / "notes.jsonl"
    odd.write_text("{}\n")
    with capture_logs() as logs:
        found = scan(adapter_for(fake_home))
    assert set(found) == {cut.id, liar.id, good.id}
    for s in (cut, liar):
        assert found[s.id].undated and found[s.id].last_activity() is None
    assert not found[good.id].undated
    events = {e["event"] for e in logs}
    assert {"malformed session header", "session header names another id"} <= events


def test_a_removal_takes_the_file_first_then_its_logs(fake_home: FakeHome, tree: PiTree) -> None:
    s = tree.session("/w/p", days=40, log=True)
    keep = tree.session("/w/p", parent=s, log=True)
    adapter = adapter_for(fake_home)
    got = load(adapter, s.id)
    assert got is not None
    removal = SessionRemoval("pi", s.id, dry_run=False, trash=None)
    adapter.remove(got, removal)
    assert removal.removed == [str(s.file), str(s.logs[0])]
    assert not s.file.exists() and not s.logs[0].exists() and keep.file.exists()
    # The fork whose parent is gone: its parent is still named by the path.
    kept = load(adapter, keep.id)
    assert kept is not None and kept.parent == s.id
    assert paths(kept) == [str(keep.file), str(keep.logs[0])]


def test_logs_in_a_tmp_dir_of_another_user_are_reported_never_removed(
    fake_home: FakeHome, tree: PiTree, tmp_path: Path
) -> None:
    shared_tmp = tmp_path / "shared-tmp"
    shared_tmp.mkdir()
    shared_tmp.chmod(0o1777)
    s = PiTree(tree.root, shared_tmp).session("/w/p", days=40, log=True)
    adapter = adapter_for(fake_home, TMPDIR=str(shared_tmp))
    got = load(adapter, s.id)
    assert got is not None
    [log] = [a for a in got.artifacts if a.kind == "bash-log"]
    assert log.linked and log.foreign
    removal = SessionRemoval("pi", s.id, dry_run=False, trash=None)
    adapter.remove(got, removal)
    assert not s.file.exists() and s.logs[0].exists()
    assert removal.residuals == [str(s.logs[0])]


def test_leftover_bash_logs_a_session_names_stay_and_the_rest_may_go(
    fake_home: FakeHome, tree: PiTree
) -> None:
    s = tree.session("/w/p", days=40, log=True)
    fork = tree.session("/w/p", parent=s)  # names the parent's log too
    free = tree.tmp / "pi-bash-0123456789abcdef.log"
    free.write_text("not named\n")
    adapter = adapter_for(fake_home)
    logs = [str(s.logs[0]), str(free)]
    assert adapter.names_leftovers(logs) == {str(s.logs[0])}
    # Named in another spelling of the tmp dir: still named.
    other = f"/elsewhere/{s.logs[0].name}"
    assert adapter.names_leftovers([other]) == {other}
    s.file.unlink()
    assert adapter.names_leftovers(logs) == {str(s.logs[0])}, "the fork still names it"
    fork.file.unlink()
    assert adapter.names_leftovers(logs) == set()


def test_a_session_file_that_cannot_be_read_keeps_every_leftover_log(
    fake_home: FakeHome, tree: PiTree
) -> None:
    s = tree.session("/w/p", days=40)
    free = tree.tmp / "pi-bash-0123456789abcdef.log"
    free.write_text("not named\n")
    adapter = adapter_for(fake_home)
    assert adapter.names_leftovers([str(free)]) == set(), "SETUP INVALID: named already"
    s.file.unlink()
    os.mkfifo(s.file)  # listed as a session file, never opened
    assert adapter.names_leftovers([str(free)]) == {str(free)}


# -- in use ------------------------------------------------------------------------------


@pytest.fixture
def titled(fake_home: FakeHome) -> Iterator[PiTitled]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is needed to set a process title as pi does")
    started = PiTitled(node, fake_home.environ, [])
    yield started
    for proc in started.procs:
        kill_group(proc)


class PiTitled:
    """Processes that set their title to `pi` as pi does (their arguments,
    the session among them, hidden)."""

    def __init__(self, node: str, environ: dict[str, str], procs: list[subprocess.Popen[str]]):
        self.node, self.environ, self.procs = node, environ, procs

    def start(self, cwd: Path, *args: str) -> int:
        cwd.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            [self.node, "-e", TITLED, "--", *args],
            cwd=cwd,
            env=self.environ,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert f.read().rstrip(b"\0") == b"pi", "SETUP INVALID: the arguments show"
        return proc.pid


def test_a_pi_process_with_hidden_arguments_holds_the_sessions_of_its_workspace(
    fake_home: FakeHome, tree: PiTree, titled: PiTitled
) -> None:
    workspace = fake_home.home / "w" / "proj"
    mine = tree.session(str(workspace), days=40)
    elsewhere = tree.session("/w/elsewhere", days=40)
    unknown = tree.session("/w/x", days=40, header='{"type": "session", "id": "01')
    pid = titled.start(workspace, "--session", mine.id)
    adapter = adapter_for(fake_home)
    procs = ProcessTable.snapshot()
    found = scan(adapter)
    assert [(h.pid, h.kind) for h in adapter.holders(found[mine.id], procs)] == [
        (pid, HolderKind.PROCESS)
    ]
    assert adapter.holders(found[elsewhere.id], procs) == []
    # A session whose workspace cannot be read could be that process's.
    assert [h.pid for h in adapter.holders(found[unknown.id], procs)] == [pid]
    # Written since the process started: it may be the one writing it.
    os.utime(elsewhere.file)
    again = load(adapter, elsewhere.id)
    assert again is not None and [h.pid for h in adapter.holders(again, procs)] == [pid]


def test_no_pi_process_no_holder_and_another_program_in_the_workspace_is_none(
    fake_home: FakeHome, tree: PiTree
) -> None:
    workspace = fake_home.home / "w" / "proj"
    workspace.mkdir(parents=True)
    s = tree.session(str(workspace), days=40)
    sleeper = subprocess.Popen(["sleep", "600"], cwd=workspace, start_new_session=True)
    try:
        got = load(adapter_for(fake_home), s.id)
        assert got is not None
        assert adapter_for(fake_home).holders(got, ProcessTable.snapshot()) == []
    finally:
        kill_group(sleeper)


def test_scans_change_no_timestamp(fake_home: FakeHome, tree: PiTree) -> None:
    parent = tree.session("/w/a", days=41, log=True)
    tree.session("/w/a", days=40, parent=parent, log=True)
    tree.session("/w/b", days=42, log=True)
    before = {**mtimes(tree.root), **mtimes(tree.tmp)}
    adapter = adapter_for(fake_home)
    for s in scan(adapter).values():
        load(adapter, s.id)
        adapter.session_for_path(s.artifacts[0].path)
    adapter.watch_dirs()
    assert {**mtimes(tree.root), **mtimes(tree.tmp)} == before


# -- through the real CLI ----------------------------------------------------------------


def _cli(fh: FakeHome, *args: str) -> dict[str, object]:
    proc = fh.cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


def _age(s: PiSession, days: float) -> None:
    when = time.time() - days * DAY
    for p in s.artifacts:
        os.utime(p, (when, when))


def test_prune_purge_and_restore_through_the_cli(fake_home: FakeHome, tree: PiTree) -> None:
    fake_home.write_config('trash = "7d"\n')
    parent = tree.session("/w/p", log=True)
    fork = tree.session("/w/p", parent=parent, log=True)
    lone = tree.session("/w/q", log=True)
    for s in (parent, fork, lone):
        _age(s, 40)
    before = {str(p): p.read_bytes() for s in (parent, fork) for p in s.artifacts}

    report = _cli(fake_home, "prune", "--older-than", "30d")
    removed = [r["id"] for r in report["removed"]]  # type: ignore[index]
    assert sorted(removed) == sorted([fork.id, parent.id, lone.id])
    assert removed.index(fork.id) < removed.index(parent.id), "the child goes first"
    assert not any(p.exists() for s in (parent, fork) for p in s.artifacts)

    restored = _cli(fake_home, "restore", "pi", fork.id)
    # The fork is restored with its parent, which was in the trash too.
    assert {r["id"] for r in restored["restored"]} == {fork.id, parent.id}  # type: ignore[index]
    assert {p: Path(p).read_bytes() for p in before} == before

    fresh = tree.session("/w/q")
    purged = _cli(fake_home, "purge", "pi", fresh.id)
    assert [r["id"] for r in purged["removed"]] == [fresh.id]  # type: ignore[index]
    assert not fresh.file.exists()
