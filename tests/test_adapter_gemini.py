"""The Gemini CLI adapter against real session trees in a fake home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentkeep.adapters.base import listed, load
from agentkeep.adapters.gemini import CHAT_HEAD, TAIL_LIMIT, GeminiAdapter
from agentkeep.model import Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.removal import SessionRemoval
from build_agents import (
    DAY,
    gemini_project_hash,
    gemini_root,
    gemini_time,
    make_gemini_session,
    mtimes,
    write,
    write_gemini_projects,
)
from fakehome import FakeHome

A = "0b7c1d2e-1111-4aaa-8bbb-000000000001"
B = "0b7c1d2e-1111-4aaa-8bbb-000000000002"  # shares A's 8-char file-name prefix
SUB = "0b7c1d2e-2222-4aaa-8bbb-000000000003"
BAD_IDS = ["", ".", "..", "a/b", "../x", "-lead", "a.b", "x" * 129]


@pytest.fixture
def adapter(fake_home: FakeHome) -> GeminiAdapter:
    return GeminiAdapter(Env.from_environ(fake_home.environ))


@pytest.fixture
def root(fake_home: FakeHome) -> Path:
    return gemini_root(fake_home.home)


def scan(adapter: GeminiAdapter) -> dict[str, Session]:
    return {s.id: s for s in adapter.sessions()}


def remover(sid: str) -> SessionRemoval:
    return SessionRemoval("gemini", sid, dry_run=False, trash=None)


def test_root_follows_gemini_cli_home(fake_home: FakeHome, tmp_path: Path) -> None:
    environ = dict(fake_home.environ, GEMINI_CLI_HOME=str(tmp_path / "gh"))
    assert GeminiAdapter(Env.from_environ(environ)).root == tmp_path / "gh" / ".gemini"
    environ["GEMINI_CLI_HOME"] = "relative"
    assert GeminiAdapter(Env.from_environ(environ)).root == fake_home.home / ".gemini"


def test_idle_session_every_artifact_found_and_nothing_shared(
    adapter: GeminiAdapter, root: Path
) -> None:
    idle = make_gemini_session(root, A, subagents=(SUB,), days=40)
    other = make_gemini_session(root, B, days=1)
    sessions = scan(adapter)
    assert set(sessions) == {A, B}  # the subagent belongs to its parent
    s = sessions[A]
    assert {a.path for a in s.artifacts} == {str(p) for p in idle.artifacts}
    assert [a.path for a in s.primary] == [str(idle.chat)]
    assert s.artifacts[0].primary
    assert {a.path for a in sessions[B].artifacts} == {str(p) for p in other.artifacts}
    # Project-wide files (checkpoint history, logs.json, shell history) are
    # never a session's, not even residual.
    every = {a.path for x in sessions.values() for a in x.artifacts} | set(s.residual)
    for shared in idle.shared:
        assert not any(p == str(shared) or p.startswith(str(shared) + "/") for p in every)
    assert s.workspace == "/work/proj"
    last = s.last_activity()
    assert last is not None and abs(last - (time.time() - 40 * DAY)) < 60
    assert s.bytes == sum(a.bytes for a in s.artifacts) > 0
    assert load(adapter, A) == s
    watched = adapter.watch_dirs()
    for d in ("tmp", "tmp/proj", "tmp/proj/chats", "tmp/proj/logs", "tmp/proj/tool-outputs"):
        assert root / d in watched, d


def test_legacy_json_chat_beyond_the_head_and_last_updated(
    adapter: GeminiAdapter, root: Path
) -> None:
    g = make_gemini_session(root, A, fmt="json", last_updated="2026-01-01T00:00:00Z", days=3000)
    record = json.loads(g.chat.read_text())
    record["messages"] = [{"id": f"m{i}", "content": "x" * 1000} for i in range(200)]
    g.chat.write_text(json.dumps(record))
    assert g.chat.stat().st_size > 2 * CHAT_HEAD
    os.utime(g.chat, (time.time() - 3000 * DAY,) * 2)
    s = load(adapter, A)
    assert s is not None and [a.path for a in s.primary] == [str(g.chat)]
    # lastUpdated is Gemini's own update time: it counts toward activity.
    assert s.updated == 1767225600.0 and s.last_activity() == 1767225600.0


def test_unreadable_last_updated_makes_the_session_undated(
    adapter: GeminiAdapter, root: Path
) -> None:
    make_gemini_session(root, A, last_updated="last tuesday", days=3000)
    s = load(adapter, A)
    assert s is not None and s.undated and s.last_activity() is None


def test_uuid_ids_are_lowercased_everywhere(adapter: GeminiAdapter, root: Path) -> None:
    upper = A.upper()
    g = make_gemini_session(root, upper)
    assert adapter.canonical_id(upper) == A
    s = load(adapter, upper)
    assert s is not None and s.id == A
    assert {a.path for a in s.artifacts} == {str(p) for p in g.artifacts}
    assert adapter.session_for_path(str(g.project / upper / "plans" / "plan.md")) == A


def test_bad_ids_reach_nothing(adapter: GeminiAdapter, root: Path) -> None:
    g = make_gemini_session(root, A, subagents=(SUB,))
    for raw in BAD_IDS:
        assert adapter.canonical_id(raw) is None, raw
        assert load(adapter, raw) is None, raw
    p = g.project
    assert adapter.session_for_path(str(g.chat)) == A
    assert adapter.session_for_path(str(p / "logs" / f"session-{SUB}.jsonl")) == A
    assert adapter.session_for_path(str(p / "tool-outputs" / f"session-{A}" / "x")) == A
    assert adapter.session_for_path(str(p / SUB / "tasks" / "t.json")) == A
    assert adapter.session_for_path(str(p / "chats" / A / f"{SUB}.jsonl")) == A
    for path in (
        p / "logs.json",
        p / "shell_history",
        p / "checkpoints" / f"checkpoint-{A}.json",
        p / "chats",
        p / ".." / "proj" / A,
        root / "history" / "proj" / "HEAD",
        root / "tmp" / "bin" / A,
        root / "tmp",
    ):
        assert adapter.session_for_path(str(path)) is None, path


def test_malformed_chats_are_skipped_with_a_log_line(
    adapter: GeminiAdapter, root: Path, fake_home: FakeHome
) -> None:
    make_gemini_session(root, A)
    chats = root / "tmp" / "proj" / "chats"
    write(chats / "session-x-trunc.jsonl", '{"sessionId": "0b7c1d2e-1111-4aaa-8bbb-00000000')
    write(chats / "session-x-walk.jsonl", json.dumps({"sessionId": "../x"}) + "\n")
    write(chats / "session-x-slash.json", json.dumps({"sessionId": "a/b", "messages": []}))
    write(chats / "session-x-none.json", "[]")
    os.close(os.open(os.fsencode(chats) + b"/session-\xff.jsonl", os.O_CREAT | os.O_WRONLY))
    target = write(fake_home.root / "outside.jsonl", json.dumps({"sessionId": B}) + "\n")
    (chats / "session-x-link.jsonl").symlink_to(target)
    # A dir no session names, with an id-like name, is a newer Gemini's, not ours.
    write(root / "tmp" / "proj" / "newshared" / "f", "")
    with capture_logs() as logs:
        sessions = scan(adapter)
    assert set(sessions) == {A}
    assert not any("newshared" in a.path for a in sessions[A].artifacts)
    events = [(e["event"], e.get("path", "") + e.get("name", "")) for e in logs]
    for name in ("trunc", "walk", "slash", "none", "link", "newshared"):
        assert any(name in where for _, where in events), name
    # A name that is not UTF-8 is read like any other: this one names nothing.
    assert any(e.get("path", "").endswith("session-\udcff.jsonl") for e in logs)


def test_removal_takes_the_chat_first_and_leaves_shared_files(
    adapter: GeminiAdapter, root: Path
) -> None:
    g = make_gemini_session(root, A, subagents=(SUB,), days=40)
    other = make_gemini_session(root, B, days=40)
    s = load(adapter, A)
    assert s is not None
    r = remover(A)
    adapter.remove(s, r)
    assert r.removed[0] == str(g.chat)
    assert set(r.removed) == {str(p) for p in g.artifacts}
    assert not any(p.exists() for p in g.artifacts)
    assert all(p.exists() for p in g.shared) and r.residuals == []
    assert all(p.exists() for p in other.artifacts)
    assert load(adapter, A) is None and set(scan(adapter)) == {B}


def test_half_removed_session_is_finishable(adapter: GeminiAdapter, root: Path) -> None:
    g = make_gemini_session(root, A, days=40)
    g.chat.unlink()
    s = load(adapter, A)
    assert s is not None and s.primary == []
    assert {a.path for a in s.artifacts} == {str(p) for p in g.artifacts[1:]}
    adapter.remove(s, remover(A))
    assert load(adapter, A) is None


def test_linked_project_dir_is_not_followed(
    adapter: GeminiAdapter, root: Path, fake_home: FakeHome
) -> None:
    elsewhere = make_gemini_session(fake_home.root / "elsewhere", A, days=40)
    (root / "tmp").mkdir(parents=True)
    (root / "tmp" / "linked").symlink_to(elsewhere.project)
    s = scan(adapter)[A]
    assert s.unsafe is not None and all(a.linked for a in s.artifacts)
    r = remover(A)
    adapter.remove(s, r)
    assert all(p.exists() for p in elsewhere.artifacts)
    assert len(r.residuals) == len(elsewhere.artifacts)


def test_a_process_naming_the_id_is_a_holder(
    adapter: GeminiAdapter, root: Path, fake_home: FakeHome
) -> None:
    make_gemini_session(root, A)
    make_gemini_session(root, B)
    code = "import time; print('ready', flush=True); time.sleep(60)"
    argv = [sys.executable, "-c", code, "--resume", A.upper()]
    proc = subprocess.Popen(argv, env=fake_home.environ, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        procs = ProcessTable.snapshot()
        named, other = load(adapter, A), load(adapter, B)
        assert named is not None and other is not None
        assert proc.pid in [h.pid for h in adapter.holders(named, procs)]
        assert proc.pid not in [h.pid for h in adapter.holders(other, procs)]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_scans_change_no_timestamp(adapter: GeminiAdapter, root: Path) -> None:
    make_gemini_session(root, A, subagents=(SUB,), days=40)
    make_gemini_session(root, B, project="other", fmt="json", days=50)
    before = mtimes(root)
    for s in scan(adapter).values():
        load(adapter, s.id)
        for a in s.artifacts:
            adapter.session_for_path(a.path)
    adapter.watch_dirs()
    assert mtimes(root) == before


def test_listing_many_at_once_equals_listing_each(adapter: GeminiAdapter, root: Path) -> None:
    """listed() goes over the projects once, and finds exactly what
    load() finds for each, subagents' chats included."""
    make_gemini_session(root, A, subagents=(SUB,), days=40)
    make_gemini_session(root, B, project="other", days=3)
    wanted = [A, B, SUB, "0b7c1d2e-9999-4aaa-8bbb-000000000009", "not-an-id"]

    many = listed(adapter, wanted)

    assert set(many) == set(wanted)
    assert many[A] is not None and many[B] is not None
    for sid in wanted:
        assert many[sid] == load(adapter, sid), sid


# -- Gemini 0.61: what a session's update time is -------------------------


def _append(chat: Path, *records: object, raw: str = "") -> None:
    with chat.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records) + raw)


def _backdate(paths: list[Path], days: float) -> float:
    when = time.time() - days * DAY
    for p in paths:
        for q in [p, *(p.rglob("*") if p.is_dir() else [])]:
            os.utime(q, (when, when))
    return when


def test_activity_is_the_last_last_updated_not_the_first_records(
    adapter: GeminiAdapter, root: Path
) -> None:
    """0.61 appends `{"$set": {"lastUpdated"}}` after every message: a
    session started 60 days ago and written to yesterday, whose files'
    times were set back (restored, copied with their times, another clock),
    was updated yesterday."""
    g = make_gemini_session(root, A, days=60)
    yesterday = time.time() - DAY
    _append(
        g.chat,
        {"id": "m3", "type": "user", "content": [{"text": "later"}]},
        {"$set": {"lastUpdated": gemini_time(yesterday)}},
        {"$set": {"summary": "a summary sets no time"}},
    )
    _backdate(g.artifacts, 60)
    s = load(adapter, A)
    assert s is not None and not s.undated
    assert s.updated is not None and abs(s.updated - yesterday) < 1
    last = s.last_activity()
    assert last is not None and abs(last - yesterday) < 1


def test_torn_and_garbage_tail_lines_are_passed_over(adapter: GeminiAdapter, root: Path) -> None:
    """Lines Gemini itself cannot parse (garbage, a last line cut by a
    crash) carry no time: the last one it can read is the update time."""
    g = make_gemini_session(root, A, days=60)
    yesterday = time.time() - DAY
    _append(
        g.chat,
        {"$set": {"lastUpdated": gemini_time(yesterday)}},
        raw='not json at all\n{"lastUpdated": "2099-01-01T00:00:00Z"\n{"$set": {"lastUpd',
    )
    _backdate(g.artifacts, 60)
    s = load(adapter, A)
    assert s is not None and not s.undated
    assert s.updated is not None and abs(s.updated - yesterday) < 1


def test_an_unreadable_last_last_updated_makes_the_session_undated(
    adapter: GeminiAdapter, root: Path
) -> None:
    g = make_gemini_session(root, A, days=60)
    _append(g.chat, {"$set": {"lastUpdated": "soon"}})
    _backdate(g.artifacts, 60)
    s = load(adapter, A)
    assert s is not None and s.undated and s.last_activity() is None


def _long_tail(chat: Path, last: str) -> None:
    """A resume's `$set` of every message, longer than the tail ever read,
    with its lastUpdated at the very end (where JSON.stringify puts it)."""
    big = [{"id": f"m{i}", "type": "user", "content": "x" * 1000} for i in range(TAIL_LIMIT // 900)]
    _append(chat, {"$set": {"messages": big, "lastUpdated": last}})
    assert chat.stat().st_size > TAIL_LIMIT + 64 * 1024


def test_a_tail_too_long_to_read_is_dated_by_the_mtime_when_it_can_be(
    adapter: GeminiAdapter, root: Path
) -> None:
    """The last lastUpdated lies beyond what a scan reads: every line Gemini
    appends moves the mtime, by the clock that stamps lastUpdated, so an
    mtime not older than the head's lastUpdated stands for the lines unread."""
    g = make_gemini_session(root, A, days=60)
    _long_tail(g.chat, gemini_time(time.time() - 40 * DAY))
    when = _backdate(g.artifacts, 40)
    s = load(adapter, A)
    assert s is not None and not s.undated
    last = s.last_activity()
    assert last is not None and abs(last - when) < 1


def test_a_tail_too_long_to_read_with_an_mtime_set_back_is_undated(
    adapter: GeminiAdapter, root: Path
) -> None:
    """An mtime older than the chat's own first lastUpdated was set back
    and says nothing of the lines not read: undated, never older."""
    g = make_gemini_session(root, A, days=30)
    _long_tail(g.chat, gemini_time(time.time() - DAY))
    _backdate(g.artifacts, 60)
    s = load(adapter, A)
    assert s is not None and s.undated and s.last_activity() is None


def test_a_resume_in_the_same_minute_appends_a_first_record_again(
    adapter: GeminiAdapter, root: Path
) -> None:
    """A resume whose chat name (by the minute) is the chat's own appends to
    it, first record included; with nothing after it, that is the last."""
    g = make_gemini_session(root, A, days=60)
    yesterday = gemini_time(time.time() - DAY)
    _append(g.chat, {"sessionId": A, "projectHash": "0" * 64, "lastUpdated": yesterday})
    _backdate(g.artifacts, 60)
    s = load(adapter, A)
    assert s is not None and s.updated is not None
    assert abs(s.updated - (time.time() - DAY)) < 2


# -- Gemini 0.61: where a session's workspace and artifacts are ----------


def test_the_workspace_comes_from_projects_json_when_no_project_root_says(
    adapter: GeminiAdapter, root: Path
) -> None:
    """0.61 names a project dir by the workspace's base name (`alpha`, then
    `alpha-1`); a legacy dir is named by the sha256 of its path, and every
    chat names that hash. projects.json maps workspaces to their dirs."""
    named = make_gemini_session(root, A, project="alpha-1", project_root=None)
    make_gemini_session(root, B, project=gemini_project_hash("/work/old"), project_root=None)
    by_chat = make_gemini_session(root, SUB, project="moved", project_root="/work/chat")
    (by_chat.project / ".project_root").unlink()
    write_gemini_projects(
        root,
        {"/work/alpha": "alpha", "/other/alpha": "alpha-1", "/work/old": "old", "/work/chat": "x"},
    )
    sessions = scan(adapter)
    assert sessions[A].workspace == "/other/alpha"
    assert sessions[B].workspace == "/work/old"
    assert sessions[SUB].workspace == "/work/chat"
    # What Gemini wrote in the project dir itself comes first.
    write(named.project / ".project_root", "/elsewhere/alpha")
    again = load(adapter, A)
    assert again is not None and again.workspace == "/elsewhere/alpha"


def test_a_malformed_projects_json_only_leaves_the_workspace_unknown(
    adapter: GeminiAdapter, root: Path
) -> None:
    make_gemini_session(root, A, project="alpha", project_root=None)
    for text in ("{", "[]", '{"projects": []}', '{"projects": {"relative": "alpha"}}'):
        write(root / "projects.json", text)
        s = load(adapter, A)
        assert s is not None and s.workspace is None, text


def test_degraded_blobs_and_chat_copies_are_the_sessions(
    adapter: GeminiAdapter, root: Path
) -> None:
    """0.61 also keeps `degraded-blobs/session-<id>/` and, when it rewrites
    a chat it could not read, the original as `<chat>.unreadable-<ms>`."""
    g = make_gemini_session(root, A, subagents=(SUB,), days=40)
    blobs = write(g.project / "degraded-blobs" / f"session-{A}" / "blob-1.bin", "b").parent
    sub_blobs = write(g.project / "degraded-blobs" / f"session-{SUB}" / "b.bin", "b").parent
    copy = write(
        g.chat.with_name(g.chat.name + ".unreadable-1796119479921"),
        json.dumps({"sessionId": A}) + "\n{torn",
    )
    # tmp/background-processes/ is Gemini's, not a project: nothing in it
    # is a session's, whatever its name.
    noise = write(root / "tmp" / "background-processes" / B / "background-1.log", "x").parent
    _backdate([blobs, sub_blobs, copy], 40)
    s = load(adapter, A)
    assert s is not None
    paths = {a.path for a in s.artifacts}
    assert {str(blobs), str(sub_blobs), str(copy)} <= paths
    assert [a.path for a in s.primary] == [str(g.chat)]  # a copy is not what Gemini lists
    assert set(scan(adapter)) == {A}
    for path in (blobs / "blob-1.bin", copy):
        assert adapter.session_for_path(str(path)) == A
    assert adapter.session_for_path(str(sub_blobs / "b.bin")) == A
    assert adapter.session_for_path(str(noise / "background-1.log")) is None
    assert g.project / "degraded-blobs" in adapter.watch_dirs()
    r = remover(A)
    adapter.remove(s, r)
    assert not any(p.exists() for p in (blobs, sub_blobs, copy, *g.artifacts))
    assert noise.exists() and all(p.exists() for p in g.shared)


def test_ids_are_found_in_file_names_for_looking_again() -> None:
    """Gemini names files by its UUIDs, a subagent's inside its parent's
    tool outputs: looking again after a removal finds them by name."""
    pattern = GeminiAdapter.id_in_name
    assert pattern is not None
    name = f"run_shell_command_{SUB}_0-0.txt"
    assert [m.group(0) for m in pattern.finditer(name)] == [SUB]
    assert [m.group(0) for m in pattern.finditer(f"session-{A.upper()}")] == [A.upper()]
    assert not list(pattern.finditer(f"session-2026-12-01T10-08-{A[:8]}.jsonl"))
