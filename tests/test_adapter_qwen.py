"""The Qwen Code adapter against real session trees in a fake home
(build_qwen.py writes them as Qwen Code 0.24 does), real processes and the
real CLI."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from structlog.testing import capture_logs

from agentkeep.adapters.base import load
from agentkeep.adapters.qwen import QwenAdapter
from agentkeep.model import HolderKind, Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.removal import SessionRemoval
from build_agents import mtimes, write
from build_qwen import QwenTree, proc_start, project_key
from fakehome import FakeHome, Spawn

DAY = 86400.0
SLEEPER = "import time; print('ready', flush=True); time.sleep(600)"


def adapter_for(fh: FakeHome, **env: str) -> QwenAdapter:
    return QwenAdapter(Env.from_environ({**fh.environ, **env}))


@pytest.fixture
def tree(fake_home: FakeHome) -> QwenTree:
    return QwenTree(fake_home.home / ".qwen")


@pytest.fixture
def split(fake_home: FakeHome) -> tuple[QwenTree, QwenAdapter]:
    """The runtime dir apart from the home, as `QWEN_RUNTIME_DIR` puts it."""
    runtime = fake_home.root / "qwen-runtime"
    return (
        QwenTree(fake_home.home / ".qwen", runtime),
        adapter_for(fake_home, QWEN_RUNTIME_DIR=str(runtime)),
    )


def scan(adapter: QwenAdapter) -> dict[str, Session]:
    return {s.id: s for s in adapter.sessions()}


def paths(s: Session) -> list[str]:
    return [a.path for a in s.artifacts]


def test_every_artifact_in_both_roots_is_found_and_shared_files_are_residual(
    fake_home: FakeHome, split: tuple[QwenTree, QwenAdapter]
) -> None:
    tree, adapter = split
    cwd = str(fake_home.home / "work" / "proj")
    s = tree.session(cwd, days=40, output=True, subagent=True, extras=True)
    other = tree.session(cwd, output=True)
    found = scan(adapter)
    assert set(found) == {s.id, other.id}
    got = found[s.id]
    assert sorted(paths(got)) == sorted(str(p) for p in s.artifacts)
    assert [a.path for a in got.primary] == [str(s.chat)] == [paths(got)[0]]
    assert got.workspace == cwd and got.parent is None
    assert sorted(got.residual) == sorted(str(p) for p in s.naming())
    # Only what its own transcript names of the project's outputs is its.
    assert str(other.outputs[0]) not in paths(got)
    assert {Path(a.root or "") for a in got.artifacts} == {tree.home, tree.runtime}
    assert [r.path for r in adapter.roots()] == [tree.home, tree.runtime]
    last = got.last_activity()
    assert last is not None and last > time.time() - DAY  # the builder's files are new
    assert load(adapter, s.id) == got
    watched = adapter.watch_dirs()
    assert tree.project(cwd) / "chats" in watched and tree.home / "plans" in watched


def test_the_default_runtime_dir_is_the_home_one_root(fake_home: FakeHome, tree: QwenTree) -> None:
    adapter = adapter_for(fake_home)
    s = tree.session("/work/x", extras=True)
    assert [r.path for r in adapter.roots()] == [fake_home.home / ".qwen"]
    assert sorted(paths(scan(adapter)[s.id])) == sorted(str(p) for p in s.artifacts)


def test_the_lossy_key_shares_a_dir_and_the_workspace_comes_from_the_records(
    fake_home: FakeHome, tree: QwenTree
) -> None:
    dotted = tree.session("/w/a.b", output=True)
    dashed = tree.session("/w/a-b", output=True)
    assert project_key("/w/a.b") == project_key("/w/a-b"), "SETUP INVALID: keys differ"
    found = scan(adapter_for(fake_home))
    assert found[dotted.id].workspace == "/w/a.b"
    assert found[dashed.id].workspace == "/w/a-b"
    # Each workspace's outputs lie in the tmp dir of its own path's hash.
    assert str(dotted.outputs[0]) in paths(found[dotted.id])
    assert str(dashed.outputs[0]) in paths(found[dashed.id])
    assert str(dashed.outputs[0]) not in paths(found[dotted.id])


def test_a_fork_names_its_parent_and_the_copied_records_outputs_stay_the_parents(
    fake_home: FakeHome, tree: QwenTree
) -> None:
    parent = tree.session("/w/p", output=True)
    fork = tree.session("/w/p", forked_from=parent.id, copy_output_of=parent, output=True)
    found = scan(adapter_for(fake_home))
    assert found[fork.id].parent == parent.id and found[parent.id].parent is None
    assert str(parent.outputs[0]) in paths(found[parent.id])
    assert str(parent.outputs[0]) not in paths(found[fork.id])
    assert str(fork.outputs[0]) in paths(found[fork.id])


def test_an_archived_chat_is_the_session_too(fake_home: FakeHome, tree: QwenTree) -> None:
    s = tree.session("/w/p", archived=True)
    got = load(adapter_for(fake_home), s.id)
    assert got is not None and [a.path for a in got.primary] == [str(s.chat)]
    assert "archive" in str(s.chat)


def test_bad_ids_reach_nothing_and_paths_map_to_their_session(
    fake_home: FakeHome, split: tuple[QwenTree, QwenAdapter]
) -> None:
    tree, adapter = split
    s = tree.session("/w/p", output=True, subagent=True, extras=True)
    registry = tree.register(s.id, "/w/p", 1, started_ms=1, start="x:1")
    lock = tree.writer_lock(s.id, 1, "x:1")
    for raw in ("", "..", "../x", s.id[:8], s.id + "x", "a" * 36):
        assert adapter.canonical_id(raw) is None, raw
        assert load(adapter, raw) is None, raw
    assert adapter.canonical_id(s.id.upper()) == s.id
    for path in [*s.artifacts, registry, lock, s.artifacts[2] / "d2a04fb71bb4fbcf@v2"]:
        if path not in s.outputs:  # only the transcript names an output
            assert adapter.session_for_path(str(path)) == s.id, path
    for path in (
        tree.project("/w/p"),
        tree.project("/w/p") / "chats",
        tree.project("/w/p") / "meta.json",
        tree.home / "usage_record.jsonl",
        tree.tmp("/w/p") / "logs.json",
        s.outputs[0],
        fake_home.root / "elsewhere" / f"{s.id}.jsonl",
    ):
        assert adapter.session_for_path(str(path)) is None, path


def test_malformed_chats_and_names_are_skipped_never_a_crash(
    fake_home: FakeHome, tree: QwenTree
) -> None:
    good = tree.session("/w/p", days=40)
    cut = tree.session("/w/p", days=40)
    cut.chat.write_text('{"sessionId": "' + cut.id[:10])
    chats = tree.project("/w/p") / "chats"
    write(chats / "not-an-id.jsonl", "{}\n")
    write(chats / f"{good.id}.jsonl.tmp", "{}\n")
    (chats / f"{uuid.uuid4()}.jsonl").mkdir()
    write(tree.home / "sessions" / "123.json", "{not json")
    found = scan(adapter_for(fake_home))
    assert set(found) == {good.id, cut.id}
    assert found[cut.id].workspace is None and not found[cut.id].undated
    assert found[good.id].workspace == "/w/p"


def test_a_linked_project_dir_is_reported_never_removed(
    fake_home: FakeHome, tree: QwenTree
) -> None:
    elsewhere = QwenTree(fake_home.root / "elsewhere")
    s = elsewhere.session("/w/l", days=40)
    (tree.home / "projects").mkdir(parents=True)
    (tree.home / "projects" / project_key("/w/l")).symlink_to(elsewhere.project("/w/l"))
    adapter = adapter_for(fake_home)
    got = load(adapter, s.id)
    assert got is not None and got.unsafe is not None
    removal = SessionRemoval("qwen", s.id, dry_run=False, trash=None)
    adapter.remove(got, removal)
    assert s.chat.exists() and removal.removed == []


def test_a_removal_takes_the_chat_first_and_leaves_what_is_shared(
    fake_home: FakeHome, split: tuple[QwenTree, QwenAdapter]
) -> None:
    tree, adapter = split
    s = tree.session("/w/p", days=40, output=True, subagent=True, extras=True)
    keep = tree.session("/w/p", output=True)
    got = load(adapter, s.id)
    assert got is not None
    removal = SessionRemoval("qwen", s.id, dry_run=False, trash=None)
    adapter.remove(got, removal)
    assert removal.removed[0] == str(s.chat)
    assert sorted(removal.removed) == sorted(str(p) for p in s.artifacts)
    assert not any(os.path.lexists(p) for p in s.artifacts)
    assert sorted(removal.residuals) == sorted(str(p) for p in s.naming())
    assert all(p.exists() for p in s.shared) and keep.outputs[0].exists()
    assert load(adapter, s.id) is None


# -- in use ------------------------------------------------------------------------------


def _sleeper(spawn: Spawn, *args: str) -> int:
    return spawn([sys.executable, "-c", SLEEPER, *args], ready=True).pid


def test_a_headless_run_naming_the_id_holds_it(
    fake_home: FakeHome, tree: QwenTree, spawn: Spawn
) -> None:
    """`qwen -o json --resume <id>` registers nothing: its command line is
    the only evidence."""
    s = tree.session("/w/p", days=40)
    pid = _sleeper(spawn, "-o", "json", "--resume", s.id, "go on")
    adapter = adapter_for(fake_home)
    got = load(adapter, s.id)
    assert got is not None
    holders = adapter.holders(got, ProcessTable.snapshot())
    assert [(h.pid, h.kind) for h in holders] == [(pid, HolderKind.PROCESS)]


def test_the_registry_of_a_live_tui_holds_its_session_and_a_reused_pid_does_not(
    fake_home: FakeHome, tree: QwenTree, spawn: Spawn
) -> None:
    live, stale, unsure = (tree.session(f"/w/{n}", days=40) for n in "abc")
    pid = _sleeper(spawn)
    created = psutil.Process(pid).create_time()
    registry = tree.register(live.id, "/w/a", pid, started_ms=created * 1000, start=proc_start(pid))
    adapter = adapter_for(fake_home)
    procs = ProcessTable.snapshot()

    got = load(adapter, live.id)
    assert got is not None and str(registry) in paths(got)
    assert [(h.pid, h.kind) for h in adapter.holders(got, procs)] == [(pid, HolderKind.REGISTRY)]

    # The same pid, recorded by a process that started an hour before this
    # one: a reused pid, stale.
    registry.unlink()
    boot = proc_start(pid).split(":")[0]
    tree.register(stale.id, "/w/b", pid, started_ms=(created - 3600) * 1000, start=f"{boot}:1")
    got = load(adapter, stale.id)
    assert got is not None and adapter.holders(got, procs) == []
    again = load(adapter, live.id)  # its record gone: nothing holds it
    assert again is not None and adapter.holders(again, procs) == []

    # A record whose start cannot be told holds it (cannot tell: in use).
    record = tree.register(unsure.id, "/w/c", pid, started_ms=0, start="")
    record.write_text(record.read_text().replace('"startedAt": 0', '"startedAt": "soon"'))
    got = load(adapter, unsure.id)
    assert got is not None
    [holder] = adapter.holders(got, procs)
    assert holder.pid == pid and "cannot be told" in holder.detail


def test_a_writer_lock_of_a_live_process_holds_the_session(
    fake_home: FakeHome, tree: QwenTree, spawn: Spawn
) -> None:
    s, cut = tree.session("/w/p", days=40), tree.session("/w/q", days=40)
    pid = _sleeper(spawn)
    tree.writer_lock(s.id, pid, proc_start(pid))
    write(tree.home / "tmp" / "session-writer-locks" / f"{cut.id}.lock", '{"session_id": "')
    adapter = adapter_for(fake_home)
    procs = ProcessTable.snapshot()
    got = load(adapter, s.id)
    assert got is not None
    assert [(h.pid, h.kind) for h in adapter.holders(got, procs)] == [(pid, HolderKind.REGISTRY)]
    # A lock that cannot be read: Qwen would not write over it either.
    got = load(adapter, cut.id)
    assert got is not None and [h.pid for h in adapter.holders(got, procs)] == [None]


def test_scans_change_no_timestamp(fake_home: FakeHome, tree: QwenTree) -> None:
    for n in range(3):
        tree.session(f"/w/p{n % 2}", days=40 + n, output=True, subagent=True, extras=True)
    before = mtimes(tree.home)
    adapter = adapter_for(fake_home)
    for s in scan(adapter).values():
        load(adapter, s.id)
        adapter.session_for_path(s.artifacts[0].path)
    adapter.watch_dirs()
    assert mtimes(tree.home) == before


# -- through the real CLI ----------------------------------------------------------------


def _cli(fh: FakeHome, *args: str) -> dict[str, object]:
    proc = fh.cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


def test_prune_purge_and_restore_through_the_cli(fake_home: FakeHome, tree: QwenTree) -> None:
    fake_home.write_config('trash = "7d"\n')
    old = tree.session("/w/p", days=40, output=True, subagent=True, extras=True)
    named = tree.session("/w/p", days=1, extras=True)
    recent = tree.session("/w/p", days=1)
    for p in old.artifacts:
        for q in [p, *(p.rglob("*") if p.is_dir() else [])]:
            os.utime(q, (time.time() - 40 * DAY,) * 2)
    before = {str(p): p.read_bytes() for p in old.artifacts if p.is_file()}

    report = _cli(fake_home, "prune", "--older-than", "30d")
    assert [r["id"] for r in report["removed"]] == [old.id]  # type: ignore[index]
    assert report["removed"][0]["paths"][0] == str(old.chat)  # type: ignore[index]
    residual = {r["path"] for r in report["residual"]}  # type: ignore[index]
    assert residual == {str(p) for p in old.naming()}
    assert not any(os.path.lexists(p) for p in old.artifacts)

    purged = _cli(fake_home, "purge", "qwen", named.id)
    assert [r["id"] for r in purged["removed"]] == [named.id]  # type: ignore[index]
    assert recent.chat.exists()

    restored = _cli(fake_home, "restore", "qwen", old.id)
    assert [r["id"] for r in restored["restored"]] == [old.id]  # type: ignore[index]
    assert {p: Path(p).read_bytes() for p in before} == before
    listed = {s["id"] for s in _cli_list(fake_home)}
    assert listed == {old.id, recent.id}


def _cli_list(fh: FakeHome) -> list[dict[str, object]]:
    proc = fh.cli("ls", "--agent", "qwen", "--json")
    assert proc.returncode == 0, proc.stderr
    found: list[dict[str, object]] = json.loads(proc.stdout)
    return found


def test_a_prefix_of_an_id_is_no_session_for_the_cli(fake_home: FakeHome, tree: QwenTree) -> None:
    s = tree.session("/w/p", days=40)
    proc = fake_home.cli("purge", "qwen", s.id[:13], "--json")
    assert proc.returncode == 5, proc.stderr
    assert s.chat.exists()


def test_a_scan_logs_nothing_for_a_clean_tree(fake_home: FakeHome, tree: QwenTree) -> None:
    tree.session("/w/p", extras=True)
    with capture_logs() as logs:
        scan(adapter_for(fake_home))
    assert [e for e in logs if e["log_level"] != "debug"] == []
