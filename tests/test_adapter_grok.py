"""The grok adapter against real session trees in a fake home."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentkeep.adapters.base import load
from agentkeep.adapters.grok import GrokAdapter
from agentkeep.model import Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.removal import SessionRemoval
from build_agents import DAY, grok_root, make_grok_session, mtimes, write
from fakehome import FakeHome

BAD_IDS = ["", ".", "..", "a/b", "../x", "-lead", "a.b", "x" * 129]


@pytest.fixture
def adapter(fake_home: FakeHome) -> GrokAdapter:
    return GrokAdapter(Env.from_environ(fake_home.environ))


@pytest.fixture
def root(fake_home: FakeHome) -> Path:
    return grok_root(fake_home.home)


def scan(adapter: GrokAdapter) -> dict[str, Session]:
    return {s.id: s for s in adapter.sessions()}


def remover(sid: str) -> SessionRemoval:
    return SessionRemoval("grok", sid, dry_run=False, trash=None)


def test_idle_session_every_artifact_found_memory_only_residual(
    adapter: GrokAdapter, root: Path
) -> None:
    idle = make_grok_session(root, "abc", workspace="/work/my proj%", memory=2, days=40)
    other = make_grok_session(root, "abcd", workspace="/work/other", days=1)
    sessions = scan(adapter)
    assert set(sessions) == {"abc", "abcd"}
    s = sessions["abc"]
    assert {a.path for a in s.artifacts} == {str(p) for p in idle.artifacts}
    assert [a.path for a in s.primary] == [str(idle.chat)]
    assert s.artifacts[-1].path == str(idle.dir)
    assert s.workspace == "/work/my proj%"  # percent-decoding is exact
    # The user's memory names the session but is never its artifact.
    assert sorted(s.residual) == sorted(str(p) for p in idle.memory)
    assert not any("memory-v2" in a.path for a in s.artifacts)
    assert sessions["abcd"].residual == [str(other.memory[0])]
    assert not any(a.path.startswith(str(other.dir)) for a in s.artifacts)
    assert s.bytes == sum(p.stat().st_size for p in idle.dir.iterdir())
    last = s.last_activity()
    assert last is not None and abs(last - (time.time() - 40 * DAY)) < 60
    assert load(adapter, "abc") == s
    ws = root / "sessions" / urllib.parse.quote("/work/my proj%", safe="")
    assert root / "sessions" in adapter.watch_dirs() and ws in adapter.watch_dirs()


def test_bad_ids_reach_nothing(adapter: GrokAdapter, root: Path) -> None:
    s = make_grok_session(root, "ok_1")
    for raw in BAD_IDS:
        assert adapter.canonical_id(raw) is None, raw
        assert load(adapter, raw) is None, raw
    assert adapter.session_for_path(str(s.chat)) == "ok_1"
    assert adapter.session_for_path(str(s.dir)) == "ok_1"
    for path in (
        s.dir.parent,
        root / "sessions",
        s.dir.parent / ".." / "ok_1",
        s.memory[0],
        root / "sessions2" / "w" / "ok_1",
    ):
        assert adapter.session_for_path(str(path)) is None, path


def test_malformed_entries_are_skipped_with_a_log_line(adapter: GrokAdapter, root: Path) -> None:
    make_grok_session(root, "good")
    truncated = make_grok_session(root, "trunc")
    truncated.chat.write_text('{"session_id": "tru')
    make_grok_session(root, "liar", named="../x")
    make_grok_session(root, "plain-ws", workspace="relative/path")
    sessions_dir = root / "sessions"
    os.mkdir(os.fsencode(sessions_dir / urllib.parse.quote("/work/proj", safe="")) + b"/bad\xff")
    (sessions_dir / "%2Fwork%2Fproj" / "dotted.name").mkdir()
    write(sessions_dir / "stray-file", "")
    with capture_logs() as logs:
        sessions = scan(adapter)
    assert set(sessions) == {"good", "trunc", "liar", "plain-ws"}
    # A chat naming another session is not what it seems: kept, undated.
    assert sessions["liar"].undated and sessions["liar"].last_activity() is None
    # A truncated head names nothing; the directory still says whose it is.
    assert not sessions["trunc"].undated
    assert sessions["plain-ws"].workspace is None
    events = " ".join(e["event"] for e in logs)
    for expected in ("names another session", "not an absolute path", "malformed"):
        assert expected in events, expected
    assert any(e.get("path", "").endswith("bad\udcff") for e in logs), "not an id: skipped"
    assert any(e.get("path", "").endswith("dotted.name") for e in logs)
    assert any(e.get("path", "").endswith("stray-file") for e in logs)


def test_removal_leaves_memory_and_reports_it(adapter: GrokAdapter, root: Path) -> None:
    g = make_grok_session(root, "gone", memory=2, days=40)
    keep = make_grok_session(root, "kept", days=40)
    s = load(adapter, "gone")
    assert s is not None
    r = remover("gone")
    adapter.remove(s, r)
    assert r.removed[0] == str(g.chat) and r.removed[-1] == str(g.dir)
    assert not g.dir.exists()
    assert all(p.exists() for p in g.memory)
    assert sorted(r.residuals) == sorted(str(p) for p in g.memory)
    assert keep.chat.exists()
    # What is left names the session but is not a session.
    assert load(adapter, "gone") is None and set(scan(adapter)) == {"kept"}


def test_half_removed_session_is_finishable(adapter: GrokAdapter, root: Path) -> None:
    g = make_grok_session(root, "half", memory=0, days=40)
    g.chat.unlink()
    s = load(adapter, "half")
    assert s is not None and s.primary == [] and not s.undated
    adapter.remove(s, remover("half"))
    assert not g.dir.exists() and load(adapter, "half") is None


def test_linked_workspace_dir_is_not_followed(
    adapter: GrokAdapter, root: Path, fake_home: FakeHome
) -> None:
    elsewhere = make_grok_session(fake_home.root / "elsewhere", "linked", memory=0, days=40)
    (root / "sessions").mkdir(parents=True)
    (root / "sessions" / "%2Fwork%2Flinked").symlink_to(elsewhere.dir.parent)
    s = scan(adapter)["linked"]
    assert s.unsafe is not None and all(a.linked for a in s.artifacts)
    assert s.workspace == "/work/linked"
    r = remover("linked")
    adapter.remove(s, r)
    assert all(p.exists() for p in elsewhere.artifacts)
    assert (
        str(root / "sessions" / "%2Fwork%2Flinked" / "linked" / "chat_history.jsonl") in r.residuals
    )


def test_same_id_in_two_workspaces_is_one_session(adapter: GrokAdapter, root: Path) -> None:
    a = make_grok_session(root, "twice", workspace="/work/a", memory=0)
    b = make_grok_session(root, "twice", workspace="/work/b", memory=0)
    s = load(adapter, "twice")
    assert s is not None
    assert {x.path for x in s.primary} == {str(a.chat), str(b.chat)}
    # Both chats go before either directory (invariant 5).
    assert [x.primary for x in s.artifacts[:2]] == [True, True]


def test_a_process_naming_the_id_is_a_holder(
    adapter: GrokAdapter, root: Path, fake_home: FakeHome
) -> None:
    make_grok_session(root, "held-1")
    code = "import time; print('ready', flush=True); time.sleep(60)"
    argv = [sys.executable, "-c", code, "--resume", "held-1"]
    proc = subprocess.Popen(argv, env=fake_home.environ, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        s = load(adapter, "held-1")
        assert s is not None
        assert proc.pid in [h.pid for h in adapter.holders(s, ProcessTable.snapshot())]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_scans_change_no_timestamp(adapter: GrokAdapter, root: Path) -> None:
    for i in range(3):
        make_grok_session(root, f"s{i}", workspace=f"/work/p{i % 2}", days=40 + i)
    before = mtimes(root)
    for s in scan(adapter).values():
        load(adapter, s.id)
        adapter.session_for_path(s.artifacts[0].path)
    adapter.watch_dirs()
    assert mtimes(root) == before
