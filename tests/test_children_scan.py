"""A big scan spread over child processes indexes exactly what a scan in one
process does, survives a child that dies, logs where logs belong, and when
it is stopped half way leaves the index as it was.

The threshold (children.PARALLEL_FROM) and Claude's part size are lowered so
that a small home takes the children's path; every test checks that it did.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import multiprocessing.spawn
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import psutil
import pytest
from structlog.testing import capture_logs

from agentkeep import index, logs
from agentkeep.adapters import claude
from agentkeep.adapters.base import Known, WholeScan
from agentkeep.adapters.zero import ZeroAdapter
from agentkeep.children import scan as children
from agentkeep.core import indexing
from agentkeep.core.context import Context
from agentkeep.core.indexing import scan
from agentkeep.model import Session
from agentkeep.paths import Env
from agentkeep.progress import Progress
from build_agents import (
    gemini_root,
    grok_root,
    make_gemini_session,
    make_grok_session,
    make_zero_session,
    zero_root,
)
from build_claude import make_many
from build_codex import build_codex
from build_opencode import build_opencode
from fakehome import FakeHome, Spawn
from waiting import wait_until

pytestmark = pytest.mark.slow

SPREAD = "scan spread over child processes"
DIED = "a scan's children failed; the rest is measured here"


@pytest.fixture
def home(fake_home: FakeHome) -> FakeHome:
    """Every agent, with forks, jobs and a session of each kind, and names
    that must cross to a child process intact."""
    made = make_many(fake_home, 40, projects=4, forks_every=5)
    odd = os.fsencode(made[0].file_history) + b"/bad-\xff-utf8\nnewline"
    with open(odd, "wb") as f:
        f.write(b"x" * 10)
    os.symlink("/etc/passwd", made[1].file_history / "a-link")
    codex = build_codex(fake_home)
    for _ in range(4):
        codex.full_session()
    opencode = build_opencode(fake_home)
    opencode.create_db()
    parent = opencode.full_session()
    opencode.full_session(parent=parent)
    for i in range(3):
        make_gemini_session(gemini_root(fake_home.home), f"gem-{i}")
        make_grok_session(grok_root(fake_home.home), f"grok-{i}")
        make_zero_session(zero_root(fake_home.data), f"zero-{i}")
    return fake_home


def _context() -> Context:
    return Context.open(Env.from_environ())


def _indexed(ctx: Context) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every session and artifact row, in a fixed order."""
    db = sqlite3.connect(ctx.index.path)
    try:
        sessions = db.execute("SELECT * FROM sessions ORDER BY agent, id").fetchall()
        artifacts = db.execute(
            "SELECT * FROM artifacts ORDER BY agent, session_id, path"
        ).fetchall()
        return sessions, artifacts
    finally:
        db.close()


def _serial(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.setattr(children, "PARALLEL_FROM", 10**9)
    return scan(ctx)


@pytest.fixture
def spread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claude's parts of 3 sessions, so that there are many."""
    if children.cpus() < 2:
        pytest.skip("one CPU: a scan never spreads")
    monkeypatch.setattr(claude, "SCAN_PART", 3)


def _spread_scan(
    ctx: Context, monkeypatch: pytest.MonkeyPatch, progress: Progress | None = None
) -> tuple[dict[str, object], list[dict]]:
    """A scan that takes the children's path whatever the size: its result and its log events."""
    monkeypatch.setattr(children, "PARALLEL_FROM", 0)
    with capture_logs() as captured:
        done = scan(ctx, progress)
    return done, captured


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_spread_scan_indexes_what_one_process_indexes(
    home: FakeHome, spread: None, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    monkeypatch.setattr(children, "START_METHOD", method)
    ctx = _context()
    one = _serial(ctx, monkeypatch)
    alone = _indexed(ctx)
    assert {a for a, n in one["sessions"].items() if n} == {  # type: ignore[attr-defined]
        "claude",
        "codex",
        "opencode",
        "gemini",
        "grok",
        "zero",
    }
    many, captured = _spread_scan(ctx, monkeypatch)
    started = [e["start"] for e in captured if e["event"] == SPREAD]
    assert started == [method], "SETUP INVALID: the scan never spread"
    assert {k: v for k, v in many.items() if k != "seconds"} == {
        k: v for k, v in one.items() if k != "seconds"
    }
    assert _indexed(ctx) == alone
    assert not multiprocessing.active_children(), "children left running after the scan"


def test_a_child_that_dies_costs_time_not_the_scan(
    home: FakeHome, spread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _context()
    _serial(ctx, monkeypatch)
    alone = _indexed(ctx)
    killed: list[int] = []

    def kill_a_child(what: str, done: int, total: int | None) -> None:
        if killed:
            return
        for child in multiprocessing.active_children():
            os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
            killed.append(child.pid)  # type: ignore[arg-type]
            break

    _, captured = _spread_scan(ctx, monkeypatch, kill_a_child)
    assert killed and any(e["event"] == DIED for e in captured), (
        "SETUP INVALID: no child was killed while parts were left"
    )
    assert _indexed(ctx) == alone


def test_a_childs_log_lines_go_to_stderr_as_configured(
    home: FakeHome, spread: None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # A file name that is not an opencode id: its adapter logs a warning,
    # from inside a child (a whole agent's scan is one part).
    bad = home.data / "opencode" / "storage" / "session" / "global" / "not an id.json"
    bad.write_text("{}")
    logs.configure(json=True, level="info")
    ctx = _context()
    monkeypatch.setattr(children, "PARALLEL_FROM", 0)
    scan(ctx)
    out, err = capfd.readouterr()
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    events = {(line["event"], line.get("logger")) for line in lines}
    assert (SPREAD, "agentkeep.children.scan") in events, "SETUP INVALID: the scan never spread"
    warned = [line for line in lines if line.get("path") == str(bad)]
    assert warned and warned[0]["level"] == "warning"
    assert warned[0]["logger"] == "agentkeep.adapters.opencode"
    assert out == ""


def test_a_scan_stopped_half_way_leaves_the_index_as_it_was(
    home: FakeHome, spread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _context()
    _serial(ctx, monkeypatch)
    before = _indexed(ctx)
    (home.claude / "projects").rename(home.claude / "projects-moved")
    calls: list[int] = []

    def interrupt(what: str, done: int, total: int | None) -> None:
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _spread_scan(ctx, monkeypatch, interrupt)
    assert len(calls) == 2, "SETUP INVALID: the scan ended before it was stopped"
    assert _indexed(ctx) == before
    wait_until(
        lambda: not multiprocessing.active_children(), "the children to stop", 10, setup=False
    )


def test_one_agent_spreads_only_when_its_scan_splits(
    home: FakeHome, spread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _context()
    monkeypatch.setattr(children, "PARALLEL_FROM", 0)
    with capture_logs() as whole:
        indexing._scan(ctx, ["codex"])
    with capture_logs() as parted:
        indexing._scan(ctx, ["claude"])
    assert any(e["event"] == SPREAD for e in parted), "SETUP INVALID: Claude alone never spread"
    assert not any(e["event"] == SPREAD for e in whole), "one part went to the children"
    assert ctx.index.count("codex") == 4 and ctx.index.count("claude") == 40


# A scan spread over children that stops in its first progress report.
STOPS_HALF_WAY = """
import sys
import time
from agentkeep import logs
from agentkeep.children import scan as children
from agentkeep.core.context import Context
from agentkeep.core.indexing import scan
from agentkeep.adapters import claude
from agentkeep.paths import Env

def stop_here(what, done, total):
    if done == 0:
        return  # the first report comes before any child starts
    print("ready", flush=True)
    time.sleep(60)

if __name__ == "__main__":
    logs.configure(json=True)
    children.START_METHOD = sys.argv[1]
    children.PARALLEL_FROM = 0
    claude.SCAN_PART = 3
    scan(Context.open(Env.from_environ()), stop_here)
"""


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("watching", ["kernel", "polling"])
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_killed_scan_leaves_no_child_behind(
    home: FakeHome, spawn: Spawn, method: str, watching: str
) -> None:
    """The kernel tells each child its scan is gone (or, as off Linux, the
    child sees its parent change), and the child ends."""
    if children.cpus() < 2:
        pytest.skip("one CPU: a scan never spreads")
    env = dict(home.environ)
    if watching == "polling":
        site = home.root / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "import agentkeep.children\nagentkeep.children.KERNEL_TELLS = False\n"
        )
        env["PYTHONPATH"] = str(site)
    scan = spawn([sys.executable, "-c", STOPS_HALF_WAY, method], env, ready=True)
    started = psutil.Process(scan.pid).children(recursive=True)
    assert len(started) >= 2, "SETUP INVALID: the scan started no children"
    os.kill(scan.pid, signal.SIGKILL)  # the scan alone, as the OOM killer would
    scan.wait()
    wait_until(
        lambda: all(_gone(child) for child in started), "its children to exit", 15, setup=False
    )


@pytest.fixture
def no_interpreter(fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Worker processes cannot start: multiprocessing's interpreter is a path
    that does not exist (as in a sandbox that forbids it). Spawned children
    only: a forked one needs no interpreter."""
    monkeypatch.setattr(children, "START_METHOD", "spawn")
    before = multiprocessing.spawn.get_executable()
    multiprocessing.set_executable(str(fake_home.root / "no-python"))
    yield
    multiprocessing.set_executable(before)


def test_children_that_cannot_start_cost_time_not_the_scan(
    home: FakeHome, spread: None, monkeypatch: pytest.MonkeyPatch, no_interpreter: None
) -> None:
    ctx = _context()
    _serial(ctx, monkeypatch)
    alone = _indexed(ctx)
    _, captured = _spread_scan(ctx, monkeypatch)
    assert any(e["event"] == DIED for e in captured), "SETUP INVALID: the children started"
    assert _indexed(ctx) == alone


def test_the_cycle_collector_rests_during_a_scan_and_comes_back(
    home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _context()
    monkeypatch.setattr(children, "PARALLEL_FROM", 10**9)
    seen: list[bool] = []

    def stop_half_way(what: str, done: int, total: int | None) -> None:
        seen.append(gc.isenabled())
        raise KeyboardInterrupt

    scan(ctx, lambda what, done, total: seen.append(gc.isenabled()))
    assert gc.isenabled()
    with pytest.raises(KeyboardInterrupt):
        scan(ctx, stop_half_way)
    assert gc.isenabled()
    # Another scan (a daemon thread) still running keeps it off.
    with indexing.collector_paused():
        scan(ctx)
        assert not gc.isenabled()
    assert gc.isenabled()
    assert len(seen) > 2, "SETUP INVALID: the scans reported no progress"
    assert not any(seen)

    gc.disable()  # someone else's choice stands
    try:
        scan(ctx)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_child_imports_structlog_without_rich(fake_home: FakeHome) -> None:
    """What a child imports is paid once per child on every spread scan:
    rich (some 40 ms) is the CLI's, not a child's."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        1,
        mp_context=spawn,
        initializer=children._start_child,
        initargs=(os.getpid(), *logs.settings()),
    ) as pool:
        loaded = pool.submit(eval, "sorted(__import__('sys').modules)").result(timeout=60)
    assert "structlog" in loaded and "agentkeep.children.scan" in loaded, "SETUP INVALID"
    assert not [m for m in loaded if m.split(".")[0] == "rich"]


@pytest.mark.skipif(sys.platform != "linux", reason="children are only forked on Linux")
def test_children_are_forked_only_from_a_process_without_threads() -> None:
    if threading.active_count() != 1:
        pytest.fail(f"SETUP INVALID: {threading.active_count()} threads before the test")
    assert children.start_method() == "fork"
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert children.start_method() == "spawn"
    finally:
        release.set()
        other.join()
    assert children.start_method() == "fork"


def test_forked_children_pay_sooner_than_spawned_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked child is ready at once; a spawned one starts an interpreter
    first: a scan spreads over forked ones from fewer sessions."""
    if children.cpus() < 2:
        pytest.skip("one CPU: a scan never spreads")
    least = children.PARALLEL_FROM
    monkeypatch.setattr(children, "START_METHOD", "fork")
    assert children.worth_spreading(least) and not children.worth_spreading(least - 1)
    monkeypatch.setattr(children, "START_METHOD", "spawn")
    assert not children.worth_spreading(least)
    assert children.worth_spreading(round(least * children.SPAWNED))


def _rows_files() -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob("agentkeep-rows-*"))


def test_a_big_part_comes_back_through_a_file_that_is_then_removed(
    home: FakeHome, spread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows past one batch (index.rows.BATCH, lowered: forked children see it)
    are read back from the part's file a batch at a time."""
    monkeypatch.setattr(children, "START_METHOD", "fork")
    monkeypatch.setattr(index.rows, "BATCH", 2)
    read: list[int] = []
    batches_in = children._batches_in

    def reading(path: str, count: int) -> Iterator[index.Rows]:
        read.append(count)
        return batches_in(path, count)

    monkeypatch.setattr(children, "_batches_in", reading)
    ctx = _context()
    _serial(ctx, monkeypatch)
    alone = _indexed(ctx)
    _spread_scan(ctx, monkeypatch)
    if not read:
        pytest.fail("SETUP INVALID: no part came back through a file")
    assert _indexed(ctx) == alone
    assert _rows_files() == []


def _whole(agent: str) -> WholeScan:
    return WholeScan(_context().adapters[agent])


def test_a_part_whose_file_cannot_be_written_comes_back_whole(
    home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/dev/full fails the first write, as a full disk does."""
    monkeypatch.setattr(index.rows, "BATCH", 1)
    expected = list(index.batches(_whole("codex")(), {}))
    if len(expected) < 3:
        pytest.fail(f"SETUP INVALID: {len(expected)} batches")
    assert children._measure(_whole("codex"), {}, "/dev/full") == expected
    assert children._measure(_whole("codex"), {}, None) == expected


_FILLS_UP = """
import pickle, resource, signal, sys
from agentkeep import index
from agentkeep.children import scan as children
from agentkeep.core.context import Context
from agentkeep.paths import Env
index.rows.BATCH = 1
# Listed before the limit (it would hold back SQLite's own files too).
sessions = list(Context.open(Env.from_environ()).adapters["codex"].sessions())
expected = list(index.batches(sessions, {}))
size = len(pickle.dumps(expected[0], pickle.HIGHEST_PROTOCOL))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (size * 2 + size // 2, resource.RLIM_INFINITY))
got = children._measure(lambda: iter(sessions), {}, sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(len(expected), got == expected, type(got).__name__)
"""


def test_a_part_whose_file_fills_up_half_way_comes_back_whole(
    home: FakeHome, tmp_path: Path
) -> None:
    """The file takes two batches and half of the third (a file size limit
    in a process of its own): all of them come back, in order."""
    path = tmp_path / "rows"
    path.touch()
    child = subprocess.run(
        [sys.executable, "-c", _FILLS_UP, str(path)],
        env=home.environ,
        capture_output=True,
        text=True,
        check=True,
    )
    out = child.stdout.splitlines()[-1].split()
    if int(out[0]) < 4 or path.stat().st_size == 0:
        pytest.fail(f"SETUP INVALID: {out[0]} batches, {path.stat().st_size} bytes written")
    assert out[1:] == ["True", "list"]


class _HeldZero(ZeroAdapter):
    """Zero's scan, held in its child (which says it began) until the scan's
    own process has begun the listing that comes after it, or until 10 s
    have passed (then it says it gave up)."""

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        marks = Path(self.env.environ["HELD_MARKS"])
        (marks / f"began-{os.getpid()}-{time.monotonic_ns()}").touch()
        deadline = time.monotonic() + 10
        while not (marks / "listing").exists():
            if time.monotonic() > deadline:
                (marks / f"gave-up-{os.getpid()}-{time.monotonic_ns()}").touch()
                break
            time.sleep(0.01)
        return super().sessions(names, known)


@pytest.mark.skipif(sys.platform != "linux", reason="children are only forked on Linux")
def test_whole_parts_never_hold_back_a_listing_here(
    fake_home: FakeHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More agents that scan whole than IN_FLIGHT allows split parts in
    hand: the scan's own process hands them all out and goes on to the
    listing that comes after them while they run, never waiting for one to
    finish first (nine agents' eight whole parts once held Claude's listing
    back on a machine of two CPUs)."""
    if children.cpus() < 2:
        pytest.skip("one CPU: a scan never spreads")
    monkeypatch.setattr(children, "START_METHOD", "fork")
    marks = tmp_path / "marks"
    marks.mkdir()
    env = Env.from_environ({**os.environ, "HELD_MARKS": str(marks)})
    count = children.IN_FLIGHT * min(children.cpus(), 8) + 1

    def parts() -> Iterator[tuple[str, WholeScan]]:
        for _ in range(count):
            yield "zero", WholeScan(_HeldZero(env))
        wait_until(lambda: list(marks.glob("began-*")), "a whole part running in a child")
        (marks / "listing").touch()

    done = [agent for agent, _ in children.run_parts(parts(), {}, spread=True)]
    assert len(done) == count
    assert list(marks.glob("gave-up-*")) == []
