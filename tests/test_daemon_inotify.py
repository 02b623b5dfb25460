"""One inotify instance for every watched directory: the thread count stays
flat however many directories are watched, events in any of them still
reach their sessions, the same changes name the same paths as through
watchdog's own observer, and a failed watch still sends its root (and only
that root) to polling.

What this leans on in watchdog (`InotifyFD` and its callback API, pinned
here so that a watchdog upgrade that changes it fails loudly): one reader
thread per `InotifyFD`, callbacks called on it, `remove_callbacks` quiet
for a watch the kernel already dropped."""

from __future__ import annotations

import errno
import os
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from watchdog.events import FileSystemEvent

from agentkeep import watchplan
from agentkeep.adapters.claude import ClaudeAdapter
from agentkeep.daemon.events import DirWatches, Sink
from agentkeep.daemon.inotify import InotifyWatches
from agentkeep.daemon.observer import ObserverWatches
from agentkeep.daemon.watch import Watcher
from agentkeep.paths import Env
from agentkeep.watchplan import POLLING
from build_claude import make_session
from test_daemon_serve import start_daemon, stop_daemons
from test_daemon_watch import Seen, transcript
from waiting import wait_until

pytestmark = pytest.mark.slow

MANY = 220
# Imported for its effect: every daemon a test here starts is killed after it.
__all__ = ["stop_daemons"]


class Events:
    """A sink that keeps every path it is given."""

    def __init__(self) -> None:
        self.paths: set[tuple[str, bool]] = set()
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, event: FileSystemEvent) -> None:
        with self.lock:
            self.threads.add(threading.current_thread().name)
            for path in (event.src_path, event.dest_path):
                if path:
                    self.paths.add((os.fsdecode(path), event.is_directory))

    def has(self, *expected: tuple[str, bool]) -> Callable[[], bool]:
        return lambda: set(expected) <= set(self.paths)


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.fixture
def inotify_only() -> None:
    if watchplan.inotify_budget() is None:
        pytest.skip("no inotify here")


@pytest.fixture
def area(fake_home) -> Path:
    """Where the backend tests make their directories (inside the fake home)."""
    path = fake_home.root / "area"
    path.mkdir()
    return path


@pytest.fixture
def watching(inotify_only: None) -> Iterator[tuple[InotifyWatches, Events]]:
    events = Events()
    dirs = InotifyWatches(events, lambda: None)
    dirs.start()
    yield dirs, events
    dirs.stop()


def test_many_directories_run_on_one_reader_thread(fake_home, inotify_only) -> None:
    projects = fake_home.claude / "projects"
    sessions = [
        transcript(projects, f"-work-p{n}", f"{n:08x}-0000-4000-8000-000000000000")
        for n in range(MANY)
    ]
    claude = ClaudeAdapter(Env.from_environ(fake_home.environ))
    seen = Seen()
    before = threads_of(os.getpid())
    watcher = Watcher(lambda: {"claude": claude}, seen)
    watcher.start()
    try:
        assert len(watcher._watches) > MANY, "SETUP INVALID: the key dirs are not all watched"
        # watchdog's reader and dispatcher, the watcher's debounce worker and
        # the thread waiting on the reader, whatever the number of dirs.
        assert threads_of(os.getpid()) - before <= 4
        path = sessions[MANY // 2]
        with path.open("a") as f:
            f.write('{"type": "assistant"}\n')
        wait_until(seen.has(path.stem), "an append in one of many dirs", 3.0, setup=False)
    finally:
        watcher.stop()
    wait_until(
        lambda: threads_of(os.getpid()) <= before, "the watch threads to end", 3.0, setup=False
    )


def changes(root: Path) -> list[tuple[str, bool]]:
    """Make one change of each kind in `root`; the (path, is_dir) each names."""
    (root / "moved-away").write_text("x")
    (root / "renamed").write_text("x")
    outside = root.parent / "outside"
    outside.write_text("x")
    (root / "kept").write_text("x")
    (root / "created").write_text("x")
    with (root / "kept").open("a") as f:
        f.write("more")
    (root / "doomed").write_text("x")
    (root / "doomed").unlink()
    (root / "moved-away").rename(root.parent / "moved-away")
    outside.rename(root / "moved-in")
    (root / "renamed").rename(root / "renamed-2")
    (root / "subdir").mkdir()
    (root / "gone-dir").mkdir()
    (root / "gone-dir").rmdir()
    return [
        (str(root / name), False)
        for name in ("created", "kept", "doomed", "moved-away", "moved-in", "renamed", "renamed-2")
    ] + [(str(root / "subdir"), True), (str(root / "gone-dir"), True)]


@pytest.mark.parametrize("kind", ["inotify", "observer"])
def test_the_same_changes_name_the_same_paths(area: Path, inotify_only, kind: str) -> None:
    root = area / "watched"
    root.mkdir()
    events = Events()
    dirs: DirWatches = (
        InotifyWatches(events, lambda: None) if kind == "inotify" else ObserverWatches(events)
    )
    dirs.start()
    try:
        dirs.add(root)
        expected = changes(root)
        wait_until(events.has(*expected), f"every change seen by {kind}", 3.0, setup=False)
        empty_and_remove(root)
        # Its entries' deletions name paths already seen; then its own.
        expected.append((str(root), True))
        wait_until(
            lambda: events.paths == set(expected),
            f"exactly these paths by {kind}",
            3.0,
            setup=False,
        )
    finally:
        dirs.stop()


def empty_and_remove(root: Path) -> None:
    for entry in root.iterdir():
        entry.rmdir() if entry.is_dir() else entry.unlink()
    root.rmdir()


def test_events_come_on_the_one_reader_thread(watching, area: Path) -> None:
    dirs, events = watching
    made = [area / f"d{n}" for n in range(20)]
    for d in made:
        d.mkdir()
        dirs.add(d)
    for d in made:
        (d / "f").write_text("x")
    wait_until(
        events.has(*[(str(d / "f"), False) for d in made]),
        "an event from each dir",
        3.0,
        setup=False,
    )
    assert len(events.threads) == 1


def test_a_deleted_dir_can_be_removed_quietly(watching, area: Path) -> None:
    dirs, events = watching
    gone, kept = area / "gone", area / "kept"
    for d in (gone, kept):
        d.mkdir()
        dirs.add(d)
    gone.rmdir()
    wait_until(events.has((str(gone), True)), "the deletion of the watched dir", 3.0, setup=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # watchdog warns on a callback it does not know
        dirs.remove(gone)
        dirs.remove(gone)  # twice: the watcher may drop a path it already dropped
    (kept / "f").write_text("x")
    wait_until(
        events.has((str(kept / "f"), False)), "the other dir still watched", 3.0, setup=False
    )


def test_watches_are_counted_against_the_budget(watching, area: Path) -> None:
    dirs, _ = watching
    me = Path(f"/proc/{os.getpid()}")
    before = watchplan.process_watches(me)
    made = [area / str(n) for n in range(3)]
    for d in made:
        d.mkdir()
        dirs.add(d)
    assert watchplan.process_watches(me) == before + 3
    dirs.remove(made[0])
    assert watchplan.process_watches(me) == before + 2


def test_a_missing_dir_fails_with_enoent(watching, area: Path) -> None:
    dirs, _ = watching
    with pytest.raises(OSError) as raised:
        dirs.add(area / "not-there")
    assert raised.value.errno == errno.ENOENT


def test_an_unreadable_dir_fails_instead_of_watching_nothing(watching, area: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every directory")
    dirs, _ = watching
    closed = area / "closed"
    closed.mkdir(mode=0o000)
    try:
        with pytest.raises(PermissionError):
            dirs.add(closed)
    finally:
        closed.chmod(0o700)


class FullAfter:
    """The real inotify watches, with the kernel's ENOSPC forced for every
    directory under `refused` (a test cannot lower max_user_watches)."""

    def __init__(self, sink: Sink, refused: Path) -> None:
        self.real = InotifyWatches(sink, lambda: None)
        self.refused = refused
        self.refusals = 0

    def start(self) -> None:
        self.real.start()

    def stop(self, timeout: float = 1.0) -> None:
        self.real.stop(timeout)

    def add(self, path: Path) -> None:
        if path == self.refused or path.is_relative_to(self.refused):
            self.refusals += 1
            raise OSError(errno.ENOSPC, "inotify watch limit reached")
        self.real.add(path)

    def remove(self, path: Path) -> None:
        self.real.remove(path)

    def wait(self) -> str:
        return self.real.wait()


def test_a_failed_watch_sends_only_its_root_to_polling(fake_home, inotify_only) -> None:
    projects = fake_home.claude / "projects"
    transcript(projects, "-work-p", "00000000-0000-4000-8000-000000000001")
    claude = ClaudeAdapter(Env.from_environ(fake_home.environ))
    tmp_root = fake_home.system_tmp / f"claude-{os.getuid()}"
    tmp_root.mkdir(mode=0o700)
    made: list[FullAfter] = []

    def watches(sink: Sink, on_lost: Callable[[], None]) -> FullAfter:
        made.append(FullAfter(sink, tmp_root))
        return made[0]

    watcher = Watcher(lambda: {"claude": claude}, Seen(), watches=watches)
    watcher.start()
    try:
        assert made[0].refusals >= 1, "SETUP INVALID: no watch was refused"
        roots = {r["path"]: r for r in watcher.status()["roots"]}  # type: ignore[union-attr]
        assert watcher.status()["mode"] == "mixed"
        assert roots[str(tmp_root)]["mode"] == POLLING
        assert "inotify watch limit reached" in str(roots[str(tmp_root)]["reason"])
        assert roots[str(fake_home.claude)]["mode"] == "inotify"
        assert projects / "-work-p" in watcher._watches
        assert not any(p.is_relative_to(tmp_root) for p in watcher._watches)
    finally:
        watcher.stop()


# -- the protocol this module leans on, and the faults it must survive -------


def test_watchdog_s_callback_protocol_is_the_one_relied_on() -> None:
    """The members of watchdog's WatchCallback that InotifyWatches
    implements: a member added or renamed upstream fails here first."""
    from watchdog.observers.inotify_c import WatchCallback

    wanted = {"on_event", "on_watch_deleted", "on_queue_overflow", "on_events_lost"}
    members = {name for name in vars(WatchCallback) if name.startswith("on_")}
    assert members == wanted


def test_an_overflow_is_told_once_and_the_watches_go_on(area: Path, inotify_only) -> None:
    """A queue overflow as watchdog's reader hands it to every callback
    (on_queue_overflow, then on_events_lost): the watcher is told once, and
    events still come after it."""
    from watchdog.observers.inotify_c import InotifyConstants, InotifyEvent

    events = Events()
    lost: list[float] = []
    dirs = InotifyWatches(events, lambda: lost.append(1.0))
    dirs.start()
    try:
        for name in ("a", "b", "c"):
            (area / name).mkdir()
            dirs.add(area / name)
        fd = dirs._fd
        assert fd is not None
        fd.handle_event(InotifyEvent(-1, InotifyConstants.IN_Q_OVERFLOW, 0, b""))
        assert lost == [1.0]
        (area / "b" / "after").write_text("x")
        wait_until(events.has((str(area / "b" / "after"), False)), "an event after", 3.0)
        assert fd.is_alive()
    finally:
        dirs.stop()


def _project_dir(fake_home) -> Path:
    make_session(fake_home, age_days=3)
    projects = fake_home.claude / "projects"
    (project,) = [p for p in projects.iterdir() if p.is_dir()]
    return project


def _listed(daemon, sid: str) -> bool:
    return any(row["id"] == sid for row in daemon.call("ls"))


def test_a_real_overflow_is_reconciled_and_watching_goes_on(fake_home, inotify_only) -> None:
    """The daemon stopped (SIGSTOP) while a burst of 12,000 files made and
    removed overflows the kernel's queue: once it runs again it says events
    were lost, reconciles, and a session made afterwards is listed within
    seconds; status still says inotify, truthfully."""
    project = _project_dir(fake_home)
    daemon = start_daemon(fake_home)
    daemon.wait(lambda: daemon.status()["sessions"] == 1, 10, "the first session indexed")
    queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    burst = project / "burst"
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        for n in range(max(12_000, queued)):
            path = burst.with_name(f"burst-{n}")
            path.touch()
            path.unlink()
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    try:
        wait_until(lambda: "Inotify queue overflowed" in daemon.stderr(), "an overflow", 15.0)
    except AssertionError:
        pytest.fail(f"SETUP INVALID: the queue did not overflow\n{daemon.stderr()}")
    daemon.wait(
        lambda: "the inotify queue overflowed: events were lost" in daemon.stderr(),
        5,
        "the daemon to say events were lost",
    )
    new = make_session(fake_home, age_days=2)
    daemon.wait(lambda: _listed(daemon, new.id), 10, "a session made after the overflow")
    assert daemon.status()["watch"]["mode"] == "inotify"
    assert "Traceback (most recent call last)" not in daemon.stderr()


# Inside the daemon: watchdog's reader dies (its dispatch raises, as a bug
# in it would) at the first event for a file named `kill-the-reader`.
KILL_READER = """
from watchdog.observers import inotify_c
_real = inotify_c.InotifyFD.handle_event
def _dies(self, event):
    if event.name == b"kill-the-reader":
        raise RuntimeError("the reader is killed (test seam)")
    return _real(self, event)
inotify_c.InotifyFD.handle_event = _dies
"""


def test_a_watch_thread_that_dies_is_replaced(fake_home, inotify_only) -> None:
    project = _project_dir(fake_home)
    daemon = start_daemon(fake_home, seams=KILL_READER)
    daemon.wait(lambda: daemon.status()["sessions"] == 1, 10, "the first session indexed")
    assert daemon.status()["watch"]["ended"] is None
    (project / "kill-the-reader").write_text("x")
    try:
        wait_until(lambda: daemon.status()["watch"]["ended"], "the reader to end", 10.0)
    except AssertionError:
        pytest.fail(f"SETUP INVALID: the reader did not die\n{daemon.stderr()}")
    watch = daemon.status()["watch"]
    assert "ended" in watch["ended"] and watch["mode"] == "inotify", watch
    new = make_session(fake_home, age_days=2)
    daemon.wait(lambda: _listed(daemon, new.id), 10, "a session made after the reader died")
    # The reader's own error is one log line, not a bare traceback.
    assert "Traceback (most recent call last)" not in daemon.stderr()
    assert "a thread ended with an error" in daemon.stderr()
    doctor = fake_home.cli("doctor")
    assert "its watching ended and was started again" in doctor.stdout, doctor.stdout
