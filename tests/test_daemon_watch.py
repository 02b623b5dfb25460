"""The watcher with the real Claude adapter and real watchdog inotify watches:
events reach sessions, new directories get watched, the inotify budget is
read from /proc and respected."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from watchdog.events import FileModifiedEvent, FileSystemEventHandler
from watchdog.observers import Observer

from agentkeep import watchplan
from agentkeep.adapters.claude import ClaudeAdapter
from agentkeep.daemon import watch
from agentkeep.daemon.events import WatchesFactory
from agentkeep.daemon.observer import ObserverWatches, native_watches
from agentkeep.daemon.watch import Watcher
from agentkeep.paths import Env
from agentkeep.watchplan import POLLING, RootWatch, group_by_root, plan
from waiting import wait_until

pytestmark = pytest.mark.slow


class Seen:
    def __init__(self) -> None:
        self.sessions: list[tuple[str, str]] = []
        self.vanished: set[tuple[str, str]] = set()
        self.lock = threading.Lock()

    def __call__(self, agent: str, session_ids: list[str], vanished: set[str]) -> None:
        with self.lock:
            self.sessions.extend((agent, sid) for sid in session_ids)
            self.vanished |= {(agent, sid) for sid in vanished}

    def has(self, session_id: str) -> Callable[[], bool]:
        return lambda: any(sid == session_id for _, sid in list(self.sessions))


def transcript(projects: Path, key: str, session_id: str) -> Path:
    path = projects / key / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"type": "user", "sessionId": session_id, "cwd": "/work/proj"}
    path.write_text(json.dumps(record) + "\n")
    return path


@pytest.fixture
def claude(fake_home) -> ClaudeAdapter:
    return ClaudeAdapter(Env.from_environ(fake_home.environ))


@pytest.fixture
def watching(claude: ClaudeAdapter) -> Iterator[tuple[Watcher, Seen]]:
    seen = Seen()
    watcher = Watcher(lambda: {"claude": claude}, seen)
    watcher.start()
    yield watcher, seen
    watcher.stop()


def roots_by_path(watcher: Watcher) -> dict[str, dict[str, object]]:
    return {r["path"]: r for r in watcher.status()["roots"]}  # type: ignore[index,union-attr]


# Both ways of watching: one inotify instance (Linux), and watchdog's own
# observer (what macOS uses; inotify-backed here).
@pytest.mark.parametrize("watches", [native_watches, ObserverWatches])
def test_an_append_reaches_its_session(
    fake_home, claude: ClaudeAdapter, watches: WatchesFactory
) -> None:
    sid = str(uuid.uuid4())
    path = transcript(fake_home.claude / "projects", "-work-proj", sid)
    seen = Seen()
    watcher = Watcher(lambda: {"claude": claude}, seen, watches=watches)
    watcher.start()
    try:
        assert watcher.status()["mode"] == "inotify"
        with path.open("a") as f:
            f.write('{"type": "assistant"}\n')
        wait_until(seen.has(sid), "the append to reach the session", 2.0, setup=False)
        assert ("claude", sid) not in seen.vanished, "an appended transcript is there"
    finally:
        watcher.stop()


def test_sessions_changed_together_are_handed_over_together(
    fake_home, claude: ClaudeAdapter
) -> None:
    """One agent's sessions changed in one debounce window go to the handler
    in one call: listing them again then costs about one listing."""
    ids = [str(uuid.uuid4()) for _ in range(3)]
    paths = [transcript(fake_home.claude / "projects", "-work-proj", sid) for sid in ids]
    calls: list[tuple[str, list[str]]] = []
    watcher = Watcher(
        lambda: {"claude": claude}, lambda agent, sids, vanished: calls.append((agent, sids))
    )
    watcher.start()
    try:
        for path in paths:
            with path.open("a") as f:
                f.write('{"type": "assistant"}\n')
        wait_until(
            lambda: {sid for _, sids in calls for sid in sids} >= set(ids),
            "every append to reach its session",
            3.0,
            setup=False,
        )
    finally:
        watcher.stop()
    assert all(agent == "claude" for agent, _ in calls)
    assert any(len(sids) > 1 for _, sids in calls), calls


def test_a_project_dir_made_after_start_is_watched(fake_home, watching) -> None:
    watcher, seen = watching
    projects = fake_home.claude / "projects"
    key_dir = projects / "-new-proj"
    assert str(key_dir) not in json.dumps(watcher.status())
    sid = str(uuid.uuid4())
    transcript(projects, "-new-proj", sid)  # makes .claude, projects and the key dir
    wait_until(seen.has(sid), "a session in a new project dir", 3.0, setup=False)
    # The key dir is now watched itself: a second session there is seen too.
    wait_until(
        lambda: key_dir in watcher._watches, "the new key dir to be watched", 3.0, setup=False
    )
    later = str(uuid.uuid4())
    transcript(projects, "-new-proj", later)
    wait_until(seen.has(later), "a second session in the new dir", 2.0, setup=False)


def test_the_first_tmp_root_is_watched_when_it_appears(fake_home, watching) -> None:
    watcher, seen = watching
    tmp_root = fake_home.system_tmp / f"claude-{os.getuid()}"
    assert roots_by_path(watcher)[str(tmp_root)]["mode"] == "inotify"
    sid = str(uuid.uuid4())
    key = tmp_root / "-work-proj"
    key.mkdir(parents=True, mode=0o700)
    wait_until(
        lambda: key in watcher._watches, "the new tmp key dir to be watched", 3.0, setup=False
    )
    (key / sid).mkdir()
    wait_until(seen.has(sid), "a scratch dir in the first tmp root", 2.0, setup=False)


def test_a_deleted_session_is_reported_and_a_deleted_dir_unwatched(fake_home, claude) -> None:
    sid = str(uuid.uuid4())
    path = transcript(fake_home.claude / "projects", "-gone", sid)
    seen = Seen()
    watcher = Watcher(lambda: {"claude": claude}, seen)
    watcher.start()
    try:
        assert path.parent in watcher._watches
        path.unlink()
        wait_until(seen.has(sid), "the deletion to reach the session", 2.0, setup=False)
        assert ("claude", sid) in seen.vanished, "its one path is gone"
        path.parent.rmdir()
        wait_until(
            lambda: path.parent not in watcher._watches,
            "the gone dir to be unwatched",
            3.0,
            setup=False,
        )
    finally:
        watcher.stop()


def test_over_the_budget_everything_polls(fake_home, claude) -> None:
    transcript(fake_home.claude / "projects", "-p", str(uuid.uuid4()))
    watcher = Watcher(lambda: {"claude": claude}, Seen(), budget=lambda: (1000, 1000))
    watcher.start()
    try:
        status = watcher.status()
        assert status["mode"] == "polling"
        assert watcher.polling
        assert all("free" in r["reason"] for r in status["roots"])  # type: ignore[union-attr]
        assert watcher._watches == set()
    finally:
        watcher.stop()


def test_a_partial_budget_is_mixed(fake_home, claude) -> None:
    transcript(fake_home.claude / "projects", "-p", str(uuid.uuid4()))
    groups = group_by_root("claude", claude)
    first = len(groups[0].targets)
    assert first >= 1 and len(groups) >= 2, "SETUP INVALID: need two roots to share a budget"
    limit = 1000
    # available = limit - used - 10% of limit: room for exactly the first root.
    budget = (limit, limit - 100 - first)
    watcher = Watcher(lambda: {"claude": claude}, Seen(), budget=lambda: budget)
    watcher.start()
    try:
        status = watcher.status()
        assert status["mode"] == "mixed"
        modes = [r["mode"] for r in status["roots"]]  # type: ignore[union-attr]
        assert modes[0] == "inotify" and POLLING in modes[1:]
    finally:
        watcher.stop()


def test_plan_gives_inotify_while_it_fits() -> None:
    groups = [
        RootWatch("a", Path("/a"), targets={Path("/a"), Path("/a/1")}),
        RootWatch("a", Path("/b"), targets={Path("/b")}),
        RootWatch("b", Path("/c"), targets={Path("/c"), Path("/c/1"), Path("/c/2")}),
    ]
    plan(groups, 3)
    assert [g.mode for g in groups] == ["inotify", "inotify", "polling"]
    assert groups[2].reason == "needs 3 inotify watches, 0 free"
    unlimited = [RootWatch("a", Path("/a"), targets={Path(f"/a/{i}") for i in range(50)})]
    plan(unlimited, None)
    assert unlimited[0].mode == "inotify"


def test_inotify_budget_counts_real_watches(tmp_path: Path) -> None:
    budget = watchplan.inotify_budget()
    if budget is None:
        pytest.skip("no inotify here")
    limit, used = budget
    assert limit == int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    me = Path(f"/proc/{os.getpid()}")
    before = watchplan.process_watches(me)
    dirs = [tmp_path / str(i) for i in range(3)]
    observer = Observer()
    observer.start()
    try:
        for d in dirs:
            d.mkdir()
            observer.schedule(FileSystemEventHandler(), str(d), recursive=False)
        assert watchplan.process_watches(me) == before + 3
        assert watchplan.inotify_budget()[1] >= 3  # type: ignore[index]
    finally:
        observer.stop()
        observer.join()
    assert used >= 0


def test_unrelated_directories_under_a_waiting_parent_cause_no_resync(
    fake_home, claude, monkeypatch
) -> None:
    # The system tmp dir is watched only to see claude-<uid> appear in it.
    seen = Seen()
    watcher = Watcher(lambda: {"claude": claude}, seen)
    resyncs: list[float] = []
    real = watcher.resync

    def counting(**kw: bool) -> set[Path]:
        resyncs.append(time.monotonic())
        return real(**kw)

    monkeypatch.setattr(watcher, "resync", counting)
    watcher.start()
    try:
        assert fake_home.system_tmp in watcher._watches, "SETUP INVALID: tmp is not watched"
        for n in range(20):
            (fake_home.system_tmp / f"pytest-{n}").mkdir()
        tmp_root = fake_home.system_tmp / f"claude-{os.getuid()}"
        tmp_root.mkdir(mode=0o700)  # a marker that does cause one
        wait_until(
            lambda: tmp_root in watcher._watches, "the tmp root to be watched", 3.0, setup=False
        )
        assert len(resyncs) == 2  # the start, and claude-<uid>
    finally:
        watcher.stop()


def test_a_linked_config_dir_is_watched_through_its_link(fake_home, claude) -> None:
    real = fake_home.root / "dotfiles" / "claude"
    (real / "projects").mkdir(parents=True)
    fake_home.claude.symlink_to(real)
    seen = Seen()
    watcher = Watcher(lambda: {"claude": claude}, seen)
    watcher.start()
    try:
        assert fake_home.claude in watcher._watches
        # A new config area made directly in the linked root is seen.
        (real / "file-history").mkdir()
        wait_until(
            lambda: fake_home.claude / "file-history" in watcher._watches,
            "file-history",
            3.0,
            setup=False,
        )
        sid = str(uuid.uuid4())
        (real / "file-history" / sid).mkdir()
        wait_until(seen.has(sid), "a session under the linked root", 2.0, setup=False)
    finally:
        watcher.stop()


def test_sqlite_side_files_are_ignored(fake_home, watching) -> None:
    watcher, seen = watching
    key_dir = fake_home.claude / "projects" / "-p"
    quiet, loud = str(uuid.uuid4()), str(uuid.uuid4())
    # A read-only open of a database makes these beside it; they never count.
    for suffix in ("-wal", "-shm", "-journal"):
        watcher.queue(FileModifiedEvent(str(key_dir / quiet / f"state.db{suffix}")))
    watcher.queue(FileModifiedEvent(str(key_dir / loud / "state.db")))
    wait_until(seen.has(loud), "the plain file's event", 2.0, setup=False)
    assert not seen.has(quiet)()


def test_agentkeep_inotify_max_replaces_the_limit() -> None:
    real = watchplan.inotify_budget()
    if real is None:
        pytest.skip("no inotify here")
    forced = watchplan.budget_for({"AGENTKEEP_INOTIFY_MAX": "7"})
    assert forced is not None and forced[0] == 7 and forced[1] >= 0
    assert watchplan.budget_for({"AGENTKEEP_INOTIFY_MAX": "lots"})[0] == real[0]  # type: ignore[index]
    assert watchplan.budget_for({})[0] == real[0]  # type: ignore[index]


def test_events_wait_while_held_and_come_after(fake_home, claude) -> None:
    """Around the daemon's own prunes (Watcher.held)."""
    sid = str(uuid.uuid4())
    path = transcript(fake_home.claude / "projects", "-held", sid)
    seen = Seen()
    watcher = Watcher(lambda: {"claude": claude}, seen)
    watcher.start()
    try:
        with watcher.held():
            with path.open("a") as f:
                f.write('{"type": "assistant"}\n')
            wait_until(lambda: str(path) in watcher._pending, "the append's event", 5)
            with watcher._wake:
                assert not watcher._due(), "an event was due while held"
            assert not seen.has(sid)()
        wait_until(seen.has(sid), "the held event to reach its session", 5, setup=False)
    finally:
        watcher.stop()


def test_a_flood_of_events_is_left_to_a_reconcile(
    fake_home, claude, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "PENDING_MAX", 5)
    projects = fake_home.claude / "projects"
    transcript(projects, "-flood", str(uuid.uuid4()))
    seen = Seen()
    floods: list[list[tuple[str, str]]] = []
    watcher = Watcher(
        lambda: {"claude": claude}, seen, on_flood=lambda: floods.append(list(seen.sessions))
    )
    watcher.start()
    try:
        with watcher.held():
            for _ in range(8):
                transcript(projects, "-flood", str(uuid.uuid4()))
            wait_until(lambda: watcher._flooded, "more events than PENDING_MAX", 5)
        wait_until(lambda: floods, "the reconcile for the dropped events", 5, setup=False)
        assert floods == [[]], "a dropped event was handed over"
    finally:
        watcher.stop()
