"""Stores named in config against real directory trees in a fake home."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentkeep.adapters import build
from agentkeep.adapters.base import load
from agentkeep.adapters.stores import StoreAdapter
from agentkeep.agents import agent_roots
from agentkeep.config import StoreConfig, load_config
from agentkeep.model import Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.removal import SessionRemoval
from build_agents import DAY, Store, make_store_session, mtimes, write
from fakehome import FakeHome


def store(fake_home: FakeHome, name: str, root: Path, depth: int) -> StoreAdapter:
    return StoreAdapter(Env.from_environ(fake_home.environ), Store(name, root, depth))


def scan(adapter: StoreAdapter) -> dict[str, Session]:
    return {s.id: s for s in adapter.sessions()}


def remover(adapter: StoreAdapter, sid: str) -> SessionRemoval:
    return SessionRemoval(adapter.name, sid, dry_run=False, trash=None)


@pytest.fixture
def root(fake_home: FakeHome) -> Path:
    return fake_home.home / "stores" / "issues"


def test_sessions_are_exactly_depth_deep(fake_home: FakeHome, root: Path) -> None:
    adapter = store(fake_home, "issues", root, 2)
    s1 = make_store_session(root, "repo-a/issue-1", days=40)
    make_store_session(root, "repo-a/issue-2", days=1)
    make_store_session(root, "repo-b/issue-1/deeper", days=1)  # repo-b/issue-1 is the session
    write(root / "stray.txt", "")  # files above the session level are not sessions
    write(root / "repo-c" / "file.txt", "")
    (root / "empty").mkdir()
    sessions = scan(adapter)
    assert set(sessions) == {"repo-a/issue-1", "repo-a/issue-2", "repo-b/issue-1"}
    s = sessions["repo-a/issue-1"]
    assert s.agent == "issues" and adapter.name == "issues"
    assert [(a.path, a.kind, a.primary) for a in s.artifacts] == [(str(s1), "store-dir", True)]
    assert s.bytes == sum(p.stat().st_size for p in s1.rglob("*") if p.is_file())
    last = s.last_activity()
    assert last is not None and abs(last - (time.time() - 40 * DAY)) < 60
    assert load(adapter, "repo-a/issue-1") == s
    assert sorted(adapter.watch_dirs()) == sorted(
        [root, root / "empty", root / "repo-a", root / "repo-b", root / "repo-c"]
    )


def test_activity_is_the_newest_mtime_in_the_tree(fake_home: FakeHome, root: Path) -> None:
    adapter = store(fake_home, "issues", root, 1)
    s1 = make_store_session(root, "one", days=40)
    recent = time.time() - 2 * DAY
    os.utime(s1 / "work" / "notes.txt", (recent, recent))
    s = load(adapter, "one")
    assert s is not None and s.last_activity() == pytest.approx(recent)


def test_canonical_ids_are_depth_components_each_valid(fake_home: FakeHome, root: Path) -> None:
    adapter = store(fake_home, "issues", root, 2)
    make_store_session(root, "a/b")
    assert adapter.canonical_id("a/b") == "a/b"
    bad = ["", "a", "a/b/c", "../b", "a/..", "./b", "/a", "a/", "a//b", "a/b\0", "a/\udcff"]
    for raw in bad:
        assert adapter.canonical_id(raw) is None, raw
        assert load(adapter, raw) is None, raw
    assert adapter.session_for_path(str(root / "a" / "b" / "issue.md")) == "a/b"
    for path in (root, root / "a", root / "a" / ".." / "a" / "b", root.parent / "a" / "b"):
        assert adapter.session_for_path(str(path)) is None, path


def test_two_stores_with_a_shared_prefix_never_cross(fake_home: FakeHome) -> None:
    base = fake_home.home / "x"
    ab = store(fake_home, "ab", base / "ab", 1)
    abc = store(fake_home, "abc", base / "abc", 1)
    in_ab = make_store_session(base / "ab", "s1", days=40)
    in_abc = make_store_session(base / "abc", "s1", days=40)
    assert [a.path for s in ab.sessions() for a in s.artifacts] == [str(in_ab)]
    assert [a.path for s in abc.sessions() for a in s.artifacts] == [str(in_abc)]
    assert ab.session_for_path(str(in_abc / "issue.md")) is None
    assert ab.session_for_path(str(base) + "/abc") is None
    assert abc.session_for_path(str(in_abc / "issue.md")) == "s1"
    s = load(ab, "s1")
    assert s is not None
    ab.remove(s, remover(ab, "s1"))
    assert not in_ab.exists() and (in_abc / "issue.md").exists()


def test_links_are_never_followed(fake_home: FakeHome, root: Path) -> None:
    adapter = store(fake_home, "issues", root, 2)
    elsewhere = fake_home.root / "elsewhere"
    make_store_session(elsewhere, "repo/issue", days=40)
    root.mkdir(parents=True)
    (root / "linked-repo").symlink_to(elsewhere / "repo")  # a level above sessions
    (root / "real").mkdir()
    (root / "real" / "linked-issue").symlink_to(elsewhere / "repo" / "issue")
    with capture_logs() as logs:
        sessions = scan(adapter)
    assert set(sessions) == {"real/linked-issue"}
    assert any(e.get("path") == str(root / "linked-repo") for e in logs)
    assert load(adapter, "linked-repo/issue") is None
    assert adapter.session_for_path(str(root / "linked-repo" / "issue")) == "linked-repo/issue"
    s = sessions["real/linked-issue"]
    assert s.unsafe is not None and s.artifacts[0].linked
    r = remover(adapter, s.id)
    adapter.remove(s, r)
    assert (elsewhere / "repo" / "issue" / "issue.md").exists()
    assert r.residuals == [str(root / "real" / "linked-issue")]


def test_removal_takes_the_whole_directory(fake_home: FakeHome, root: Path) -> None:
    adapter = store(fake_home, "issues", root, 2)
    gone = make_store_session(root, "r/gone", days=40)
    kept = make_store_session(root, "r/kept", days=40)
    s = load(adapter, "r/gone")
    assert s is not None
    r = remover(adapter, "r/gone")
    adapter.remove(s, r)
    assert r.removed == [str(gone)] and not gone.exists() and kept.exists()
    assert load(adapter, "r/gone") is None and set(scan(adapter)) == {"r/kept"}


def test_real_store_config_builds_the_adapter(fake_home: FakeHome, root: Path) -> None:
    make_store_session(root, "r/one")
    fake_home.write_config(f'[[stores]]\nname = "issue-stores"\nroot = "{root}"\ndepth = 2\n')
    env = Env.from_environ(fake_home.environ)
    config = load_config(
        env.config_path, home=env.home, state_dir=env.state_dir, agent_roots=agent_roots(env)
    )
    adapters = build(env, config)
    adapter = adapters["issue-stores"]
    assert isinstance(adapter, StoreAdapter)
    assert [s.id for s in adapter.sessions()] == ["r/one"]
    direct = StoreAdapter(env, StoreConfig("other", root, 2))
    assert direct.name == "other" and adapter.name == "issue-stores"


def test_a_process_naming_the_directory_is_a_holder(fake_home: FakeHome, root: Path) -> None:
    adapter = store(fake_home, "issues", root, 2)
    held = make_store_session(root, "r/held")
    make_store_session(root, "r/held2")
    code = "import time; print('ready', flush=True); time.sleep(60)"
    argv = [sys.executable, "-c", code, f"--workdir={held}/work"]
    proc = subprocess.Popen(argv, env=fake_home.environ, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        procs = ProcessTable.snapshot()
        named, other = load(adapter, "r/held"), load(adapter, "r/held2")
        assert named is not None and other is not None
        assert proc.pid in [h.pid for h in adapter.holders(named, procs)]
        assert proc.pid not in [h.pid for h in adapter.holders(other, procs)]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_scans_change_no_timestamp(fake_home: FakeHome, root: Path) -> None:
    adapter = store(fake_home, "issues", root, 2)
    for i in range(3):
        make_store_session(root, f"r{i % 2}/s{i}", days=40 + i)
    before = mtimes(root)
    for s in scan(adapter).values():
        load(adapter, s.id)
        adapter.session_for_path(s.artifacts[0].path)
    adapter.watch_dirs()
    assert mtimes(root) == before
