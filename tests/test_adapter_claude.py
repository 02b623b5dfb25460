"""The Claude Code adapter against real trees built by build_claude in a fake home."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from agentkeep import rmtree
from agentkeep.adapters import claude
from agentkeep.adapters.base import Known, listed, load
from agentkeep.adapters.claude import TRANSCRIPT_HEAD, ClaudeAdapter
from agentkeep.model import HolderKind, Session
from agentkeep.paths import Env
from agentkeep.processes import Proc, ProcessTable
from agentkeep.removal import SessionRemoval
from build_claude import (
    ALL_KINDS,
    DEBUG_LOG,
    FILE_HISTORY,
    JOB,
    REGISTRY,
    REGISTRY_KEY,
    TMP,
    TODOS,
    TRANSCRIPT,
    USAGE_DATA,
    ClaudeLayout,
    ClaudeSessionPaths,
    jsonl,
    make_session,
    make_shared,
    new_id,
    transcript_records,
    write_registry,
)
from fakehome import FakeHome

UID = os.getuid()


def adapter_for(environ: dict[str, str]) -> ClaudeAdapter:
    return ClaudeAdapter(Env.from_environ(environ))


@pytest.fixture
def adapter(fake_home: FakeHome) -> ClaudeAdapter:
    return adapter_for(fake_home.environ)


def scan(adapter: ClaudeAdapter) -> dict[str, Session]:
    return {s.id: s for s in adapter.sessions()}


def artifact_set(session: Session) -> set[tuple[str, str]]:
    return {(a.kind, a.path) for a in session.artifacts}


def linked(session: Session) -> dict[str, bool]:
    return {a.path: a.linked for a in session.artifacts}


def in_projects(made: ClaudeSessionPaths) -> set[str]:
    """The paths of the session's artifacts under `<config>/projects`."""
    below = str(made.layout.projects) + "/"
    return {str(p) for _, p in made.artifact_set() if str(p).startswith(below)}


def move_behind_link(path: Path, elsewhere: Path) -> Path:
    """Move `path` to `elsewhere` and leave a link to it in its place."""
    elsewhere.parent.mkdir(parents=True, exist_ok=True)
    path.rename(elsewhere)
    path.symlink_to(elsewhere, target_is_directory=elsewhere.is_dir())
    assert path.is_symlink(), "SETUP INVALID: no link made"
    return elsewhere


# -- what belongs to a session ---------------------------------------------


def test_every_kind_is_found_and_attributed_to_its_session(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    a = make_session(fake_home, cwd="/home/u/alpha")
    b = make_session(fake_home, cwd="/home/u/alpha")  # same key dir, same tmp key
    c = make_session(fake_home, cwd="/home/u/beta", age_days=3)
    assert {k for k, _ in a.artifact_set()} == set(ALL_KINDS), "SETUP INVALID"
    sessions = scan(adapter)
    assert set(sessions) == {a.id, b.id, c.id}
    for made in (a, b, c):
        s = sessions[made.id]
        assert artifact_set(s) == made.artifact_set()
        assert [x.path for x in s.primary] == [str(made.transcript)]
        assert s.workspace == made.cwd
        assert s.parent is None
        assert not any(x.linked for x in s.artifacts)
        assert s.unsafe is None
        assert s.bytes == sum(x.bytes for x in s.artifacts) > 0
        assert s.artifacts[0].primary, "the transcript is listed (and removed) first"
        loaded = load(adapter, made.id)
        assert loaded is not None and loaded.artifacts == s.artifacts
        assert (loaded.workspace, loaded.parent, loaded.bytes) == (s.workspace, s.parent, s.bytes)


def test_a_scan_is_handed_out_in_parts_of_scan_part_sessions(
    fake_home: FakeHome, adapter: ClaudeAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SCAN_PART, set on the package, is what split() reads (tests of
    spread scans set it there)."""
    made = {make_session(fake_home).id for _ in range(7)}
    monkeypatch.setattr(claude, "SCAN_PART", 3)
    parts = [[s.id for s in part()] for part in adapter.split().parts()]
    assert [len(ids) for ids in parts] == [3, 3, 1]
    assert {sid for ids in parts for sid in ids} == made


def test_shared_files_belong_to_no_session(fake_home: FakeHome, adapter: ClaudeAdapter) -> None:
    a = make_session(fake_home)
    orphan_named_only_in_shared = new_id()
    shared = make_shared(fake_home, cwd=a.cwd, session_ids=[a.id, orphan_named_only_in_shared])
    sessions = scan(adapter)
    assert set(sessions) == {a.id}, "an id named only in shared files is not a session"
    assert artifact_set(sessions[a.id]) == a.artifact_set()
    shared_paths = shared.all_paths()
    assert len(shared_paths) > 9, "SETUP INVALID: shared dirs are empty"
    for path in shared_paths:
        assert adapter.session_for_path(str(path)) is None, path
    assert not {str(p) for p in shared_paths} & {x.path for x in sessions[a.id].artifacts}


def test_a_job_sharing_only_the_prefix_is_not_the_sessions(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    a = make_session(fake_home)
    b_id = a.id[:8] + new_id()[8:]
    b = make_session(fake_home, id=b_id, full=False)
    assert b.id != a.id and b.id[:8] == a.id[:8], "SETUP INVALID"
    sessions = scan(adapter)
    assert (JOB, str(a.job)) in artifact_set(sessions[a.id])
    assert JOB not in {x.kind for x in sessions[b.id].artifacts}
    loaded_b = load(adapter, b.id)
    assert loaded_b is not None and JOB not in {x.kind for x in loaded_b.artifacts}
    assert adapter.session_for_path(str(a.job / "output.log")) == a.id

    # state.json alone decides whose the job dir is.
    (a.job / "state.json").write_text(json.dumps({"sessionId": b.id}))
    sessions = scan(adapter)
    assert (JOB, str(a.job)) in artifact_set(sessions[b.id])
    assert JOB not in {x.kind for x in sessions[a.id].artifacts}
    assert adapter.session_for_path(str(a.job)) == b.id

    for bad in ("{not json", "[]", json.dumps({"sessionId": "x"}), ""):
        (a.job / "state.json").write_text(bad)
        assert all(JOB not in {x.kind for x in s.artifacts} for s in adapter.sessions())
        assert adapter.session_for_path(str(a.job / "output.log")) is None


def test_names_that_only_share_a_prefix_are_not_the_sessions(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    a = make_session(fake_home)
    layout = ClaudeLayout.of(fake_home)
    c, sid = layout.config, a.id
    decoys = [
        c / "debug" / f"{sid}.txt.old",
        c / "debug" / f"{sid}x.txt",
        c / "debug" / f"{sid}",
        c / "todos" / f"{sid}x-agent-{sid}.json",
        c / "todos" / f"{sid}-agentx.json",
        c / "todos" / f"{sid}-agent-.json",
        c / "todos" / f"{sid}-agent-{sid}.json.bak",
        c / "file-history" / f"{sid}-old" / "f@v1",
        c / "file-history" / f"{sid}x" / "f@v1",
        c / "session-env" / f"x{sid}" / "hook.sh",
        c / "tasks" / f"{sid}x" / "1.json",
        c / "uploads" / f"{sid}.bak" / "notes.txt",
        c / "usage-data" / "session-meta" / f"{sid}.json.bak",
        c / "usage-data" / "facets" / f"{sid}x.json",
        c / "usage-data" / f"{sid}.json",
        layout.projects / a.key / f"{sid}.ccr-tip.json.tmp.4242",
        layout.projects / a.key / f"{sid}-.cast",
        layout.projects / a.key / f"{sid}-12ab.cast",
        layout.projects / a.key / f"{sid}x-1700000000000.cast",
        layout.projects / a.key / f"{sid}.jsonl.bak",
        layout.projects / a.key / f"{sid}x.jsonl",
        layout.projects / a.key / f"{sid}.json",
        layout.tmp_root / a.key / f"{sid}.old" / "tasks" / "t.output",
        c / "sessions" / "12x.json",
        c / "sessions" / "notapid.json",
    ]
    for path in decoys:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"sessionId": sid}))
    other_prefix = "0123abcd" if not sid.startswith("0123abcd") else "fedc9876"
    job_decoys = [c / "jobs" / f"{sid[:8]}x", c / "jobs" / other_prefix]
    for job in job_decoys:  # state.json names the session, the dir name does not
        job.mkdir()
        (job / "state.json").write_text(json.dumps({"sessionId": sid}))
    sessions = scan(adapter)
    assert set(sessions) == {sid}
    assert artifact_set(sessions[sid]) == a.artifact_set()
    for path in [*decoys, *job_decoys]:
        assert adapter.session_for_path(str(path)) is None, path


BAD_IDS = [
    "",
    ".",
    "..",
    "*",
    "../x",
    "a/b",
    "memory",
    "notes",
    "0b7c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2g",  # a g
    "0b7c1d2e-3f40-4a5b-8c6d-7e8f9a0b 1c2",  # a space
    "x0b7c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d",  # a prefix
    "0b7c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2dx",  # a suffix
    "0b7c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d\n",  # a newline
    "0b7c1d2e3f404a5b8c6d7e8f9a0b1c2d",  # no dashes
    "{0b7c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d}",
    "０b7c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d",  # a full-width digit
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_malformed_ids_reach_nothing(fake_home: FakeHome, adapter: ClaudeAdapter, bad: str) -> None:
    a = make_session(fake_home)  # something real that a bad id must not reach
    layout = ClaudeLayout.of(fake_home)
    assert adapter.canonical_id(bad) is None
    assert load(adapter, bad) is None
    for path in (
        layout.projects / a.key / f"{bad}.jsonl",
        layout.projects / a.key / bad / "x",
        layout.config / "file-history" / bad,
        layout.config / "debug" / f"{bad}.txt",
        layout.tmp_root / a.key / bad,
    ):
        assert adapter.session_for_path(str(path)) is None, path
    if bad and "/" not in bad and bad not in (".", ".."):
        # The same name on disk is no session either.
        (layout.projects / a.key / f"{bad}.jsonl").write_text(
            jsonl(transcript_records(bad, "/home/u/x"))
        )
        (layout.config / "file-history" / bad).mkdir()
        (layout.tmp_root / a.key / bad).mkdir()
        sessions = scan(adapter)
        assert set(sessions) == {a.id}
        assert artifact_set(sessions[a.id]) == a.artifact_set()


def test_an_uppercase_uuid_on_disk_is_canonicalised(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    upper = new_id().upper()
    s = make_session(fake_home, id=upper)
    child = make_session(fake_home, parent=upper, full=False)
    assert adapter.canonical_id(upper) == upper.lower()
    sessions = scan(adapter)
    assert set(sessions) == {upper.lower(), child.id}
    assert artifact_set(sessions[upper.lower()]) == s.artifact_set()
    assert sessions[child.id].parent == upper.lower()
    for asked in (upper, upper.lower()):
        loaded = load(adapter, asked)
        assert loaded is not None and loaded.id == upper.lower()
        assert artifact_set(loaded) == s.artifact_set()
    for path in s.all_paths():
        assert adapter.session_for_path(str(path)) == upper.lower(), path


# -- links and unsafe roots --------------------------------------------------


def test_a_linked_tmp_key_is_not_followed_and_is_marked_linked(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home)
    key_dir = s.layout.tmp_root / s.key
    move_behind_link(key_dir, fake_home.root / "elsewhere" / "tmpkey")
    for session in (scan(adapter)[s.id], load(adapter, s.id)):
        assert session is not None
        assert artifact_set(session) == s.artifact_set()
        assert linked(session) == {x: x == str(s.tmp) for x in linked(session)}
        assert session.unsafe is None, "only a linked transcript makes a session unsafe"


def test_a_linked_projects_key_makes_the_session_unsafe(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home, cwd="/home/u/linked")
    other = make_session(fake_home, cwd="/home/u/plain")
    move_behind_link(s.layout.projects / s.key, fake_home.root / "elsewhere" / "key")
    sessions = scan(adapter)
    got = sessions[s.id]
    assert artifact_set(got) == s.artifact_set()
    assert {p for p, is_linked in linked(got).items() if is_linked} == in_projects(s)
    assert got.unsafe is not None
    assert got.workspace == "/home/u/linked", "what is behind the link is still reported"
    assert sessions[other.id].unsafe is None
    loaded = load(adapter, s.id)
    assert loaded is not None and loaded.unsafe is not None


def test_a_linked_projects_dir_inside_the_config_root_makes_sessions_unsafe(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home)
    move_behind_link(s.layout.projects, fake_home.root / "elsewhere" / "projects")
    got = scan(adapter)[s.id]
    assert artifact_set(got) == s.artifact_set()
    assert {p for p, is_linked in linked(got).items() if is_linked} == in_projects(s)
    assert got.unsafe is not None


def test_linked_file_history_is_marked_linked(fake_home: FakeHome, adapter: ClaudeAdapter) -> None:
    a = make_session(fake_home)
    b = make_session(fake_home)
    # file-history/<id> itself a link: the artifact is the link, removed as
    # the link alone; what it points to is never walked or measured.
    move_behind_link(a.file_history, fake_home.root / "elsewhere" / "fh-a")
    got = scan(adapter)[a.id]
    assert linked(got)[str(a.file_history)] is False
    fh_artifact = next(x for x in got.artifacts if x.kind == FILE_HISTORY)
    assert fh_artifact.bytes == len(os.readlink(a.file_history)), "measured as the link"
    assert not linked(scan(adapter)[b.id])[str(b.file_history)]

    # file-history itself a link: everything in it is linked.
    fh = a.layout.config / "file-history"
    move_behind_link(fh, fake_home.root / "elsewhere" / "file-history")
    sessions = scan(adapter)
    assert linked(sessions[b.id])[str(b.file_history)] is True
    assert linked(sessions[a.id])[str(a.file_history)] is True
    assert load(adapter, b.id).artifacts == sessions[b.id].artifacts  # type: ignore[union-attr]


def test_a_link_that_is_itself_the_artifact_is_an_artifact(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home)
    target = fake_home.root / "elsewhere" / "debug.txt"
    target.parent.mkdir()
    target.write_text("x" * 5000)
    s.debug_log.unlink()
    s.debug_log.symlink_to(target)
    got = scan(adapter)[s.id]
    debug = next(x for x in got.artifacts if x.kind == DEBUG_LOG)
    assert debug.path == str(s.debug_log)
    assert debug.linked is False, "removed as the link alone"
    assert debug.bytes == len(str(target)), "measured as the link, not its target"


def test_a_root_that_is_itself_a_link_works(fake_home: FakeHome) -> None:
    real_config = fake_home.root / "real" / "claude-config"
    real_tmp = fake_home.root / "real" / "tmp"
    real_config.mkdir(parents=True)
    real_tmp.mkdir(mode=0o700)
    (fake_home.root / "cfg-link").symlink_to(real_config)
    (fake_home.root / "tmp-link").symlink_to(real_tmp)
    environ = {
        **fake_home.environ,
        "CLAUDE_CONFIG_DIR": str(fake_home.root / "cfg-link"),
        "TMPDIR": str(fake_home.root / "tmp-link"),
    }
    s = make_session(environ)
    adapter = adapter_for(environ)
    roots = adapter.roots()
    assert str(fake_home.root / "cfg-link") in {str(r.path) for r in roots}
    assert all(r.problem is None for r in roots)
    got = scan(adapter)[s.id]
    assert artifact_set(got) == s.artifact_set()
    assert not any(x.linked for x in got.artifacts)
    assert adapter.session_for_path(str(s.tmp / "tasks")) == s.id


def test_a_linked_job_dir_is_the_link_itself(fake_home: FakeHome, adapter: ClaudeAdapter) -> None:
    s = make_session(fake_home)
    move_behind_link(s.job, fake_home.root / "elsewhere" / "job")
    got = scan(adapter)[s.id]
    assert artifact_set(got) == s.artifact_set(), "state.json behind the link names it"
    # The artifact is the link (removed as the link alone), not what it points to.
    assert not any(linked(got).values())
    job = next(x for x in got.artifacts if x.kind == "job")
    assert not job.is_dir and job.bytes == len(os.readlink(s.job))


@pytest.mark.parametrize("where", ["config", "projects"])
def test_a_config_or_projects_root_others_can_write_to_makes_sessions_unsafe(
    fake_home: FakeHome, where: str
) -> None:
    environ = dict(fake_home.environ)
    s = make_session(environ)
    layout = ClaudeLayout.of(environ)
    os.chmod(layout.config if where == "config" else layout.projects, 0o777)
    adapter = adapter_for(environ)
    problems = {r.kind: r.problem for r in adapter.roots()}
    assert problems[where] is not None
    got = scan(adapter)[s.id]
    assert got.unsafe is not None
    everything = {str(p) for _, p in s.artifact_set()}
    expected = in_projects(s) if where == "projects" else everything
    expected -= {str(s.tmp)}
    assert {p for p, is_linked in linked(got).items() if is_linked} == expected


def test_a_tmp_root_others_can_write_to_makes_its_artifacts_linked(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home)
    os.chmod(s.layout.tmp_root, 0o777)
    tmp_roots = {str(r.path): r.problem for r in adapter.roots() if r.kind == "tmp"}
    assert tmp_roots[str(s.layout.tmp_root)] is not None
    got = scan(adapter)[s.id]
    assert {p for p, is_linked in linked(got).items() if is_linked} == {str(s.tmp)}
    assert got.unsafe is None


# -- in use -----------------------------------------------------------------


@pytest.fixture
def sleeper(fake_home: FakeHome) -> Iterator[Callable[..., psutil.Process]]:
    """Start real stand-in agent processes (killed in teardown)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> psutil.Process:
        cmd = [sys.executable, "-c", "import time; time.sleep(60)", *args]
        popen = subprocess.Popen(cmd, env=fake_home.environ)
        started.append(popen)
        proc = psutil.Process(popen.pid)
        deadline = time.monotonic() + 10
        while proc.cmdline() != cmd:  # until it has exec'd
            assert time.monotonic() < deadline, "SETUP INVALID: process never started"
            time.sleep(0.01)
        return proc

    yield start
    for popen in started:
        popen.kill()
        popen.wait()


def table_of(*procs: psutil.Process) -> ProcessTable:
    """A process table of exactly these real processes."""
    table = ProcessTable()
    for p in procs:
        table.add(Proc(p.pid, p.create_time(), tuple(p.cmdline())))
    return table


def test_a_process_naming_the_id_holds_it(
    fake_home: FakeHome, adapter: ClaudeAdapter, sleeper: Callable[..., psutil.Process]
) -> None:
    s = make_session(fake_home, full=False)
    t = make_session(fake_home, full=False)
    lower = sleeper("--resume", s.id)
    upper = sleeper(f"--resume={t.id.upper()}")
    sessions = scan(adapter)
    procs = ProcessTable.snapshot()
    holders = adapter.holders(sessions[s.id], procs)
    assert (lower.pid, HolderKind.PROCESS) in {(h.pid, h.kind) for h in holders}
    assert upper.pid not in {h.pid for h in holders}
    holders = adapter.holders(sessions[t.id], procs)
    assert (upper.pid, HolderKind.PROCESS) in {(h.pid, h.kind) for h in holders}


def registry_session(
    fake_home: FakeHome, adapter: ClaudeAdapter, pid: int, **registry: object
) -> tuple[ClaudeSessionPaths, Session]:
    s = make_session(fake_home, full=False)
    write_registry(fake_home, pid, s.id, **registry)  # type: ignore[arg-type]
    got = load(adapter, s.id)
    assert got is not None and REGISTRY in {x.kind for x in got.artifacts}, "SETUP INVALID"
    return s, got


def test_a_registry_file_with_a_live_pid_and_a_good_start_holds_it(
    fake_home: FakeHome, adapter: ClaudeAdapter, sleeper: Callable[..., psutil.Process]
) -> None:
    proc = sleeper()
    _, got = registry_session(
        fake_home, adapter, proc.pid, started_at=int(proc.create_time() * 1000)
    )
    holders = adapter.holders(got, table_of(proc))
    assert [(h.pid, h.kind) for h in holders] == [(proc.pid, HolderKind.REGISTRY)]


def test_a_registry_file_of_a_reused_pid_does_not_hold(
    fake_home: FakeHome, adapter: ClaudeAdapter, sleeper: Callable[..., psutil.Process]
) -> None:
    proc = sleeper()
    started = int((proc.create_time() - 60) * 1000)
    _, got = registry_session(fake_home, adapter, proc.pid, started_at=started)
    assert adapter.holders(got, table_of(proc)) == []


def test_a_registry_file_of_a_dead_pid_does_not_hold(
    fake_home: FakeHome, adapter: ClaudeAdapter, sleeper: Callable[..., psutil.Process]
) -> None:
    s = make_session(fake_home)  # its registry names a pid that cannot be alive
    got = scan(adapter)[s.id]
    assert adapter.holders(got, table_of(sleeper())) == []


@pytest.mark.parametrize(
    "registry",
    [
        {"started_at": None},  # missing
        {"started_at": float("nan")},  # written as NaN
        {"raw_started_at": "NaN"},
        {"started_at": "NaN"},
        {"started_at": True},
        {"started_at": -1},
        {"started_at": 0},
        {"raw_started_at": "1e400"},
        {"raw_started_at": "-Infinity"},
        {"raw_started_at": "1" + "0" * 400},  # too large to convert
        {"started_at": "abc"},
        {"started_at": [1]},
    ],
    ids=lambda r: repr(next(iter(r.values()))),
)
def test_a_start_time_that_cannot_be_told_holds(
    fake_home: FakeHome,
    adapter: ClaudeAdapter,
    sleeper: Callable[..., psutil.Process],
    registry: dict[str, object],
) -> None:
    proc = sleeper()
    _, got = registry_session(fake_home, adapter, proc.pid, **registry)
    holders = adapter.holders(got, table_of(proc))
    assert [(h.pid, h.kind) for h in holders] == [(proc.pid, HolderKind.REGISTRY)]


def proc_start_ticks(pid: int) -> str:
    fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    return fields[19].decode()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="procStart is Linux's /proc field")
def test_proc_start_is_preferred_but_never_alone_makes_a_registry_stale(
    fake_home: FakeHome, adapter: ClaudeAdapter, sleeper: Callable[..., psutil.Process]
) -> None:
    proc = sleeper()
    table = table_of(proc)
    ticks = proc_start_ticks(proc.pid)
    stale_ms = int((proc.create_time() - 60) * 1000)
    good_ms = int(proc.create_time() * 1000)
    # A matching procStart holds even when startedAt looks stale (a clock step).
    _, got = registry_session(fake_home, adapter, proc.pid, started_at=stale_ms, proc_start=ticks)
    assert [h.pid for h in adapter.holders(got, table)] == [proc.pid]
    # A different procStart leaves startedAt to decide.
    other = str(int(ticks) + 12345)
    _, got = registry_session(fake_home, adapter, proc.pid, started_at=stale_ms, proc_start=other)
    assert adapter.holders(got, table) == []
    _, got = registry_session(fake_home, adapter, proc.pid, started_at=good_ms, proc_start=other)
    assert [h.pid for h in adapter.holders(got, table)] == [proc.pid]


def test_a_registry_pid_that_cannot_be_read_holds(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    _, got = registry_session(fake_home, adapter, 4_199_999, started_at=1)
    table = ProcessTable(unreadable=[4_199_999])
    kinds = {(h.pid, h.kind) for h in adapter.holders(got, table)}
    assert (4_199_999, HolderKind.REGISTRY) in kinds


def test_a_registry_file_spoiled_after_the_scan_still_holds_through_its_pid(
    fake_home: FakeHome, adapter: ClaudeAdapter, sleeper: Callable[..., psutil.Process]
) -> None:
    proc = sleeper()
    s, got = registry_session(fake_home, adapter, proc.pid, started_at=int(time.time() * 1000))
    registry = next(Path(x.path) for x in got.artifacts if x.kind == REGISTRY)
    registry.write_text("{garbage")
    assert [h.pid for h in adapter.holders(got, table_of(proc))] == [proc.pid]
    now_ms = int(time.time() * 1000)
    registry.write_text(json.dumps({"pid": proc.pid, "sessionId": new_id(), "startedAt": now_ms}))
    assert adapter.holders(got, table_of(proc)) == [], "it names another session now"
    registry.unlink()
    assert adapter.holders(got, table_of(proc)) == []


def test_registry_files_are_attributed_by_their_content(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home, full=False)
    layout = ClaudeLayout.of(fake_home)
    reg, key = write_registry(fake_home, 4_199_001, s.id)
    lonely_key = layout.config / "sessions" / "4199002.abcdef.key"
    lonely_key.write_text("x")
    bad_reg = layout.config / "sessions" / "4199003.json"
    bad_reg.write_text("{")
    got = scan(adapter)
    assert set(got) == {s.id}
    assert {(REGISTRY, str(reg)), (REGISTRY_KEY, str(key))} <= artifact_set(got[s.id])
    assert adapter.session_for_path(str(key)) == s.id
    for path in (lonely_key, bad_reg):
        assert adapter.session_for_path(str(path)) is None
        assert str(path) not in {x.path for x in got[s.id].artifacts}


# -- where: the environment -------------------------------------------------


def test_claude_config_dir_moves_every_path(fake_home: FakeHome) -> None:
    moved = {**fake_home.environ, "CLAUDE_CONFIG_DIR": str(fake_home.root / "moved-claude")}
    default = {**fake_home.environ, "CLAUDE_CONFIG_DIR": ""}
    s = make_session(moved)
    make_session(default, kinds=set(ALL_KINDS) - {TMP})  # a decoy under ~/.claude
    assert (fake_home.home / ".claude" / "projects").is_dir(), "SETUP INVALID"
    adapter = adapter_for(moved)
    sessions = scan(adapter)
    assert set(sessions) == {s.id}
    assert artifact_set(sessions[s.id]) == s.artifact_set()
    config = str(fake_home.root / "moved-claude") + "/"
    assert all(x.path.startswith(config) for x in sessions[s.id].artifacts if x.kind != TMP)
    assert adapter_for(default).roots()[0].path == fake_home.home / ".claude"


def test_claude_project_dir_is_never_a_root(fake_home: FakeHome) -> None:
    """Claude sets $CLAUDE_PROJECT_DIR to the workspace for its hooks: a tool
    a hook starts must not read the user's code as a projects dir."""
    workspace = fake_home.root / "my-code"
    made = make_session(fake_home, cwd=str(workspace))
    mine = _code_like_a_projects_dir(workspace)
    environ = {**fake_home.environ, "CLAUDE_PROJECT_DIR": str(workspace)}
    adapter = adapter_for(environ)
    assert str(workspace) not in {str(r.path) for r in adapter.roots()}
    assert not any(d == workspace or d.is_relative_to(workspace) for d in adapter.watch_dirs())
    sessions = scan(adapter)
    assert set(sessions) == {made.id}
    assert artifact_set(sessions[made.id]) == made.artifact_set()
    assert load(adapter, mine) is None
    for path in workspace.rglob("*"):
        assert adapter.session_for_path(str(path)) is None, path


def _code_like_a_projects_dir(workspace: Path) -> str:
    """A workspace whose files look like a key dir of transcripts: a
    `<uuid>.jsonl` of the user's own (test data, say) and a `<uuid>/` dir.
    Returns the uuid."""
    mine = new_id()
    key = workspace / "fixtures"
    key.mkdir(parents=True)
    (key / f"{mine}.jsonl").write_text(jsonl(transcript_records(mine, str(workspace))))
    (key / mine).mkdir()
    (key / mine / "data.txt").write_text("the user's own data\n")
    for path in [key / mine / "data.txt", key / mine, key / f"{mine}.jsonl", key]:
        old = time.time() - 50 * 86400
        os.utime(path, (old, old))
    return mine


def test_prune_and_purge_from_a_claude_hook_leave_the_workspace_alone(
    fake_home: FakeHome,
) -> None:
    """`agentkeep prune` in a SessionEnd hook: $CLAUDE_PROJECT_DIR names the
    workspace. Its 50-day-old `<uuid>.jsonl` is the user's, never a session;
    the real old session under <config>/projects goes as it would anyway."""
    workspace = fake_home.root / "my-code"
    old = make_session(fake_home, cwd=str(workspace), age_days=50)
    other = make_session(fake_home, cwd=str(workspace), age_days=50)
    mine = _code_like_a_projects_dir(workspace)
    before = {p: (p.read_bytes() if p.is_file() else None) for p in workspace.rglob("*")}
    times = {p: os.lstat(p).st_mtime_ns for p in before}
    hook = {**fake_home.environ, "CLAUDE_PROJECT_DIR": str(workspace)}

    listed = json.loads(fake_home.cli("scan", "--json", env=hook, check=True).stdout)
    assert listed["sessions"]["claude"] == 2
    ls = json.loads(fake_home.cli("ls", "--json", env=hook, check=True).stdout)
    assert {s["id"] for s in ls} == {old.id, other.id}
    purged = fake_home.cli("purge", "claude", mine, "--json", env=hook)
    assert purged.returncode == 5, purged.stdout + purged.stderr

    report = json.loads(
        fake_home.cli("prune", "--older-than", "30d", "--json", env=hook, check=True).stdout
    )
    assert {r["id"] for r in report["removed"]} == {old.id, other.id}
    assert not [p for r in report["removed"] for p in r["paths"] if p.startswith(str(workspace))]
    assert report["residual"] == []
    for made in (old, other):
        assert not any(os.path.lexists(p) for p in made.all_paths()), made.id
    assert {p: (p.read_bytes() if p.is_file() else None) for p in workspace.rglob("*")} == before
    assert {p: os.lstat(p).st_mtime_ns for p in before} == times


TMP_VARS = ["CLAUDE_CODE_TMPDIR", "CLAUDE_CODE_TMPDIR=per-uid", "TMPDIR", "TMP", "TEMP"]


@pytest.mark.parametrize("var", [*TMP_VARS, "AGENTKEEP_SYSTEM_TMP"])
def test_each_tmp_variable_gives_a_tmp_root(fake_home: FakeHome, var: str) -> None:
    empty = fake_home.root / "empty-tmp"
    mine = fake_home.root / "my-tmp"
    empty.mkdir()
    mine.mkdir(mode=0o700)
    environ = {**fake_home.environ}
    for name in ("TMPDIR", "TMP", "TEMP", "AGENTKEEP_SYSTEM_TMP"):
        environ[name] = str(empty)
    name, _, form = var.partition("=")
    # Claude appends claude-<uid> to whatever the variable names, a
    # `claude-<uid>` of its own too (it sets CLAUDE_CODE_TMPDIR so for the
    # commands it runs).
    given = mine / f"claude-{UID}" if form else mine
    environ[name] = str(given)
    per_uid = given / f"claude-{UID}"
    layout = dataclasses.replace(ClaudeLayout.of(environ), tmp_root=per_uid)
    s = make_session(layout, kinds={TMP})
    adapter = adapter_for(environ)
    tmp_roots = [r.path for r in adapter.roots() if r.kind == "tmp"]
    assert per_uid in tmp_roots
    assert tmp_roots.count(per_uid) == 1
    sessions = scan(adapter)
    assert artifact_set(sessions[s.id]) == {(TMP, str(s.tmp))}
    assert adapter.session_for_path(str(s.tmp / "tasks" / "bwdin25xx.output")) == s.id


def test_tmp_roots_are_deduplicated_by_real_path(fake_home: FakeHome) -> None:
    tmp = Path(fake_home.environ["TMPDIR"])
    (fake_home.root / "tmp-alias").symlink_to(tmp)
    environ = {
        **fake_home.environ,
        "TMP": str(fake_home.root / "tmp-alias"),
        "TEMP": str(tmp) + "/",
        "CLAUDE_CODE_TMPDIR": str(tmp) + "/.",
    }
    s = make_session(environ, kinds={TMP})
    adapter = adapter_for(environ)
    tmp_roots = [r.path for r in adapter.roots() if r.kind == "tmp"]
    assert tmp_roots == [tmp / f"claude-{UID}", fake_home.system_tmp / f"claude-{UID}"]
    assert [x.path for x in scan(adapter)[s.id].artifacts] == [str(s.tmp)]


def test_a_relative_directory_variable_is_ignored(fake_home: FakeHome) -> None:
    environ = {**fake_home.environ, "CLAUDE_CONFIG_DIR": "relative/claude", "TMPDIR": "rel"}
    adapter = adapter_for(environ)
    assert adapter.roots()[0].path == fake_home.home / ".claude"
    assert all(r.path.is_absolute() for r in adapter.roots())


def test_roots_that_do_not_exist_find_nothing(fake_home: FakeHome, adapter: ClaudeAdapter) -> None:
    roots = adapter.roots()
    assert not any(r.path.exists() for r in roots), "SETUP INVALID"
    assert all(r.problem is None for r in roots)
    assert list(adapter.sessions()) == []
    assert adapter.watch_dirs() == []


# -- workspace, parent, activity ----------------------------------------------


def test_the_workspace_comes_from_cwd_never_from_the_key(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    cwd = "/home/u/my-proj.v2/sub dir"
    s = make_session(fake_home, cwd=cwd, full=False)
    assert s.key == "-home-u-my-proj-v2-sub-dir", "SETUP INVALID: the key decodes wrongly"
    assert scan(adapter)[s.id].workspace == cwd


def test_malformed_transcript_lines_are_tolerated(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home, full=False)
    parent = new_id()
    good = transcript_records(s.id, "/home/u/good", parent=parent)
    s.transcript.write_text(
        "\x00\xff garbage\n"
        '{"cwd": "/home/u/trunc\n'
        "[1, 2, 3]\n"
        '"just a string with \\"cwd\\""\n'
        + json.dumps({"cwd": 42, "forkedFrom": "nope"})
        + "\n"
        + json.dumps({"cwd": "", "forkedFrom": {"sessionId": "not-a-uuid"}})
        + "\n"
        + json.dumps({"forkedFrom": {"sessionId": s.id}})  # itself: ignored
        + "\n"
        + jsonl(good[1:])
    )
    got = scan(adapter)[s.id]
    assert (got.workspace, got.parent) == ("/home/u/good", parent)


@pytest.mark.parametrize(
    "content",
    [b"", b"\n\n", b"{" * 100_000, b"x" * (TRANSCRIPT_HEAD * 3)],
    # Short ids: pytest puts the id in PYTEST_CURRENT_TEST, and an
    # environment string over 128 KiB makes every exec fail (E2BIG).
    ids=["empty", "blank-lines", "braces", "past-the-head"],
)
def test_odd_transcripts_give_no_workspace_and_no_crash(
    fake_home: FakeHome, adapter: ClaudeAdapter, content: bytes
) -> None:
    s = make_session(fake_home, full=False)
    s.transcript.write_bytes(content)
    got = scan(adapter)[s.id]
    assert (got.workspace, got.parent) == (None, None)
    assert got.bytes == len(content)


def test_a_fifo_named_like_a_transcript_does_not_block_the_scan(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home, full=False)
    s.transcript.unlink()
    os.mkfifo(s.transcript)
    result: list[dict[str, Session]] = []
    worker = threading.Thread(target=lambda: result.append(scan(adapter)), daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert result, "scan blocked on a FIFO"
    assert result[0][s.id].workspace is None


def test_the_parent_comes_from_forked_from(fake_home: FakeHome, adapter: ClaudeAdapter) -> None:
    parent = make_session(fake_home)
    fork = make_session(fake_home, parent=parent.id, job_parent=new_id())
    sessions = scan(adapter)
    assert sessions[fork.id].parent == parent.id, "forkedFrom wins over the job's"
    assert sessions[parent.id].parent is None
    assert load(adapter, fork.id).parent == parent.id  # type: ignore[union-attr]


def test_the_parent_comes_from_a_jobs_fork_parent(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    parent = new_id().upper()
    s = make_session(fake_home, job_parent=parent)
    itself = make_session(fake_home, full=False)
    itself_job = make_session(fake_home, kinds={JOB}, id=itself.id, job_parent=itself.id)
    assert itself_job.job.exists(), "SETUP INVALID"
    sessions = scan(adapter)
    assert sessions[s.id].parent == parent.lower()
    assert sessions[itself.id].parent is None


def test_a_fork_record_past_the_head_is_not_read(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    """The documented bound: only the first TRANSCRIPT_HEAD bytes are read."""
    s = make_session(fake_home, full=False)
    early = transcript_records(s.id, "/home/u/early", messages=1, pad=TRANSCRIPT_HEAD)
    late = transcript_records(s.id, "/home/u/late", parent=new_id(), messages=1)
    s.transcript.write_text(jsonl(early) + jsonl(late))
    assert s.transcript.stat().st_size > TRANSCRIPT_HEAD, "SETUP INVALID"
    got = scan(adapter)[s.id]
    assert (got.workspace, got.parent) == ("/home/u/early", None)


def test_activity_is_the_newest_mtime_and_bytes_count_each_inode_once(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home, age_days=40)
    recent = time.time() - 2 * 86400
    nested = s.session_dir / "tool-results" / "bwdin25xx.txt"
    os.utime(nested, (recent, recent))
    got = scan(adapter)[s.id]
    assert got.last_activity() == pytest.approx(recent)
    files = {(st.st_dev, st.st_ino): st.st_size for st in map(os.lstat, s.files)}
    assert got.bytes == sum(files.values())
    os.link(nested, s.file_history / "hardlinked@v3")
    os.utime(s.file_history, (recent - 10, recent - 10))
    assert scan(adapter)[s.id].bytes == got.bytes, "a hard link is one inode"


def test_orphaned_artifacts_are_sessions_too(fake_home: FakeHome, adapter: ClaudeAdapter) -> None:
    orphans = [
        make_session(fake_home, kinds={kind})
        for kind in set(ALL_KINDS) - {TRANSCRIPT, REGISTRY_KEY}
    ]
    sessions = scan(adapter)
    for made in orphans:
        assert artifact_set(sessions[made.id]) == made.artifact_set()
        assert sessions[made.id].workspace is None
        assert sessions[made.id].primary == []


def test_a_subtree_deeper_than_path_max_is_still_measured(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    """A tree deeper than PATH_MAX cannot be listed by path (ENAMETOOLONG);
    it is walked by descriptors instead, so the session keeps its date."""
    s = make_session(fake_home)
    fd = os.open(s.file_history, os.O_RDONLY | os.O_DIRECTORY)
    depth = 0
    try:
        while depth < 24:
            depth += 1
            os.mkdir("d" * 250, dir_fd=fd)
            child = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    assert len(str(s.file_history)) + depth * 251 > 4096, "SETUP INVALID: not past PATH_MAX"
    got = scan(adapter)[s.id]
    deep = next(x for x in got.artifacts if x.kind == FILE_HISTORY)
    assert deep.mtime is not None and deep.mtime > s.mtime, "the new deep dirs count"
    assert got.last_activity() is not None
    other = make_session(fake_home)
    assert scan(adapter)[other.id].last_activity() is not None


@pytest.mark.skipif(os.getuid() == 0, reason="root reads a mode-000 directory anyway")
def test_a_mode_000_directory_makes_the_session_undated(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    s = make_session(fake_home)
    os.chmod(s.session_dir / "tool-results", 0)
    try:
        assert scan(adapter)[s.id].last_activity() is None
    finally:
        os.chmod(s.session_dir / "tool-results", 0o755)


# -- the watcher's view, and reading without changing ------------------------------


def test_session_for_path_maps_every_path_of_a_session(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    a = make_session(fake_home)
    b = make_session(fake_home, cwd=a.cwd)
    layout = ClaudeLayout.of(fake_home)
    for made in (a, b):
        for path in made.all_paths():
            assert adapter.session_for_path(str(path)) == made.id, path
    nobody = [
        layout.config,
        layout.projects,
        layout.projects / a.key,
        layout.tmp_root,
        layout.tmp_root / a.key,
        layout.config / "file-history",
        layout.config / "jobs",
        fake_home.home,
        fake_home.root / "elsewhere" / f"{a.id}.jsonl",
        Path(str(layout.projects / a.key) + "/../x"),
    ]
    for path in nobody:
        assert adapter.session_for_path(str(path)) is None, path


def test_watch_dirs_are_the_dirs_whose_entries_name_sessions(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    a = make_session(fake_home, cwd="/home/u/one")
    b = make_session(fake_home, cwd="/home/u/two")
    c = a.layout.config
    expected = {
        c,
        a.layout.projects,
        a.layout.projects / a.key,
        a.layout.projects / b.key,
        *(
            c / area
            for area in (
                "file-history",
                "session-env",
                "tasks",
                "uploads",
                "todos",
                "debug",
                "usage-data/session-meta",
                "usage-data/facets",
                "jobs",
                "sessions",
            )
        ),
        a.layout.tmp_root,
        a.layout.tmp_root / a.key,
        a.layout.tmp_root / b.key,
    }
    assert set(adapter.watch_dirs()) == expected
    assert len(adapter.watch_dirs()) == len(expected)


def _times(paths: list[Path]) -> dict[Path, tuple[int, int]]:
    return {p: (os.lstat(p).st_atime_ns, os.lstat(p).st_mtime_ns) for p in paths}


def _atime_moves_on_plain_reads(root: Path) -> bool:
    control = root / "atime-control"
    control.mkdir()
    (control / "f").write_text("x")
    old = time.time() - 10 * 86400
    for p in (control / "f", control):
        os.utime(p, (old, old))
    (control / "f").read_text()
    os.listdir(control)
    return all(os.lstat(p).st_atime > old + 1 for p in (control / "f", control))


def test_reading_changes_no_atime_or_mtime(
    fake_home: FakeHome, adapter: ClaudeAdapter, sleeper: Callable[..., psutil.Process]
) -> None:
    proc = sleeper()
    made = [make_session(fake_home, cwd=f"/home/u/p{i % 2}", age_days=40 + i) for i in range(3)]
    made.append(make_session(fake_home, parent=made[0].id, job_parent=made[1].id))
    write_registry(fake_home, proc.pid, made[0].id, started_at=1)
    shared = make_shared(fake_home, session_ids=[m.id for m in made])
    paths = [p for m in made for p in m.all_paths()] + shared.all_paths()
    for p in list(paths):
        while p.parent != fake_home.root:
            p = p.parent
            paths.append(p)
    paths = sorted(set(paths))
    # Older than now and not after the mtime: relatime would update any of them.
    old = time.time() - 100 * 86400
    for p in sorted(paths, key=lambda p: len(p.parts), reverse=True):
        st = os.lstat(p)
        os.utime(p, ns=(int(old * 1e9), st.st_mtime_ns), follow_symlinks=False)
    before = _times(paths)

    sessions = list(adapter.sessions())
    for s in sessions:
        load(adapter, s.id)
        adapter.holders(s, table_of(proc))
    for p in paths:
        adapter.session_for_path(str(p))
    adapter.watch_dirs()
    adapter.roots()
    assert len(sessions) == 4

    after = _times(paths)
    mtimes_changed = [p for p in paths if before[p][1] != after[p][1]]
    assert mtimes_changed == []
    if not _atime_moves_on_plain_reads(fake_home.root):
        pytest.skip("this file system does not update atimes: the atime half cannot fail")
    atimes_changed = [p for p in paths if before[p][0] != after[p][0]]
    assert atimes_changed == []


def _registry_paths_of(session: Session | None) -> set[str]:
    kinds = {REGISTRY, REGISTRY_KEY}
    return set() if session is None else {a.path for a in session.artifacts if a.kind in kinds}


def test_listing_one_session_again_follows_every_registry_change(
    fake_home: FakeHome, adapter: ClaudeAdapter, sleeper: Callable[..., psutil.Process]
) -> None:
    """load() keeps what it read of sessions/ between calls: a live
    process's record rewritten in place, a new file and a removed one must
    each show at the next load, and a dead process's file is not re-read."""
    a = make_session(fake_home, full=False)
    b = make_session(fake_home, full=False)
    proc = sleeper()
    live_reg, live_key = write_registry(fake_home, proc.pid, a.id)
    dead_reg, dead_key = write_registry(fake_home, 4_199_011, b.id)
    assert _registry_paths_of(load(adapter, a.id)) == {str(live_reg), str(live_key)}
    assert _registry_paths_of(load(adapter, b.id)) == {str(dead_reg), str(dead_key)}

    # /clear inside the live claude: its record now names b, in place (the
    # directory's mtime does not move).
    sessions_dir = live_reg.parent
    before = sessions_dir.stat().st_mtime_ns
    live_reg.write_text(live_reg.read_text().replace(a.id, b.id) + " ")
    assert sessions_dir.stat().st_mtime_ns == before, "SETUP INVALID: the directory changed"
    assert _registry_paths_of(load(adapter, a.id)) == set()
    expected_b = {str(live_reg), str(live_key), str(dead_reg), str(dead_key)}
    assert _registry_paths_of(load(adapter, b.id)) == expected_b

    # A new process registers a: a new file moves the directory's mtime.
    new_reg, new_key = write_registry(fake_home, 4_199_012, a.id)
    assert _registry_paths_of(load(adapter, a.id)) == {str(new_reg), str(new_key)}

    # Removed by hand: gone from the next load.
    dead_reg.unlink()
    dead_key.unlink()
    assert _registry_paths_of(load(adapter, b.id)) == {str(live_reg), str(live_key)}

    # agentkeep's own removal of a's files patches what load() kept.
    got_a = load(adapter, a.id)
    assert got_a is not None, "SETUP INVALID"
    adapter.remove(got_a, SessionRemoval("claude", a.id, dry_run=False, trash=None))
    assert not new_reg.exists() and not new_key.exists(), "SETUP INVALID: not removed"
    assert load(adapter, a.id) is None
    assert _registry_paths_of(load(adapter, b.id)) == {str(live_reg), str(live_key)}


def test_listing_many_sessions_at_once_equals_listing_each(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    """Listing a batch (a prune's: the shared directories' listings kept)
    finds exactly what listing each finds for each (an event's few: probed, or
    filtered by name as listed) and what a scan finds: every kind,
    registry files, jobs, sessions sharing key dirs, an id spelled
    uppercase on disk."""
    sessions = [make_session(fake_home, cwd=f"/home/user/p{i % 2}") for i in range(9)]
    sessions.append(make_session(fake_home, id=new_id().upper(), cwd="/home/user/p0"))
    write_registry(fake_home, 4_199_021, sessions[1].id)
    missing = "0b7c0000-0000-4000-8000-000000000000"
    wanted = [s.id for s in sessions] + [missing, "not-an-id", sessions[2].id.upper()]
    assert len(sessions) > claude.finding.PROBE_AT_MOST, "SETUP INVALID: not a batch"

    together = listed(adapter_for(fake_home.environ), wanted)
    alone = {sid: load(adapter_for(fake_home.environ), sid) for sid in wanted}
    scanned = scan(adapter_for(fake_home.environ))

    assert set(together) == set(wanted)
    assert together[missing] is None and together["not-an-id"] is None
    for sid in wanted:
        assert together[sid] == alone[sid], sid
    for s in sessions:
        assert artifact_set(alone[s.id]) == artifact_set(scanned[s.id.lower()]), s.id
        assert artifact_set(alone[s.id]) >= s.artifact_set(), s.id
    assert {a.kind for a in together[sessions[0].id].artifacts} >= set(ALL_KINDS) - {REGISTRY}
    assert REGISTRY in {a.kind for a in together[sessions[1].id].artifacts}


def test_a_batch_listed_again_after_others_changed_its_directories_finds_them_now(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    """The same batch listed again (with the same Known) after others
    changed the shared directories its first listing kept (a second prune process removing
    its sessions' entries, a claude writing a new one): what a fresh
    adapter finds, the new entry included, nothing removed returned."""
    sessions = [make_session(fake_home, cwd=f"/home/user/p{i % 2}") for i in range(12)]
    ids = [s.id for s in sessions]
    assert len(ids) > claude.finding.PROBE_AT_MOST, "SETUP INVALID: not a batch"
    known = Known()
    before = listed(adapter, ids, known)
    gone = [p for s in sessions[:4] for kind in (DEBUG_LOG, TODOS) for p in s.artifacts[kind]]
    for path in gone:
        path.unlink()
    new_todo = sessions[5].layout.config / "todos" / f"{ids[5]}-agent-{new_id()}.json"
    new_todo.write_text("[]")
    assert all(before[sid] is not None for sid in ids), "SETUP INVALID: a session not found"

    again = listed(adapter, ids, known)
    fresh = listed(adapter_for(fake_home.environ), ids)

    for sid in ids:
        assert again[sid] == fresh[sid], sid
    paths = {a.path for s in again.values() if s is not None for a in s.artifacts}
    assert str(new_todo) in paths
    assert not paths & {str(p) for p in gone}


def test_a_registry_file_written_as_agentkeep_removes_is_found_by_the_next_batch(
    fake_home: FakeHome, adapter: ClaudeAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claude that starts (its sessions/<pid>.json written) as agentkeep's
    removal in sessions/ goes on: the next batch's listing, with the
    listings of the first kept (Known.memo), finds its record (it is
    evidence of use). Taking the directory's new mtime for agentkeep's own
    change hid it."""
    sessions = [make_session(fake_home, cwd=f"/home/user/p{i % 2}") for i in range(12)]
    ids = [s.id for s in sessions]
    stale, _ = write_registry(fake_home, 4_199_021, ids[0])
    # Listed an hour "ago": no change below falls in the listing's mtime tick.
    old = time.time() - 3600
    os.utime(stale.parent, (old, old))
    assert len(ids) > claude.finding.PROBE_AT_MOST, "SETUP INVALID: not a batch"
    known = Known()
    first = listed(adapter, ids, known)
    got = first[ids[0]]
    assert got is not None and REGISTRY in {a.kind for a in got.artifacts}, "SETUP INVALID"
    started: list[Path] = []

    def another_starts(path: str) -> None:
        if path == str(stale) and not started:
            started.append(write_registry(fake_home, 4_199_022, ids[5])[0])

    monkeypatch.setattr(rmtree, "_before_leaf", another_starts)
    adapter.remove(got, SessionRemoval("claude", ids[0], dry_run=False, trash=None))
    assert started and not stale.exists(), "SETUP INVALID: the removal and the start did not meet"

    again = listed(adapter, ids[1:], known)[ids[5]]
    assert again is not None
    assert str(started[0]) in {a.path for a in again.artifacts if a.kind == REGISTRY}


def test_ids_in_names_are_found_in_either_spelling(adapter: ClaudeAdapter) -> None:
    """For looking again after a removal: any canonical UUID in a name."""
    sid = new_id()
    pattern = ClaudeAdapter.id_in_name
    assert pattern is not None
    names = [f"{sid}.jsonl", f"{sid.upper()}-1700000000000.cast", f"agent-{sid}.meta.json"]
    for name in names:
        found = {adapter.canonical_id(m.group(0)) for m in pattern.finditer(name)}
        assert found == {sid}, name
    assert not list(pattern.finditer(sid.replace("-", ""))), "no dashes, no id"
    assert adapter.databases() == [], "Claude keeps no database"


def test_an_area_below_a_linked_directory_is_linked(
    fake_home: FakeHome, adapter: ClaudeAdapter
) -> None:
    """usage-data/ a link: what its session-meta/ and facets/ hold is reached
    through it (never removed), though neither is a link itself."""
    s = make_session(fake_home)
    usage = s.layout.config / "usage-data"
    move_behind_link(usage, fake_home.root / "elsewhere" / "usage-data")
    for got in (scan(adapter)[s.id], load(adapter, s.id)):
        assert got is not None
        assert artifact_set(got) == s.artifact_set()
        meta = {p for p, is_linked in linked(got).items() if is_linked}
        assert meta == {str(p) for p in s.artifacts[USAGE_DATA]}
