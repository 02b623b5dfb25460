"""Conformance against the real Codex CLI (pins.py), driven against the mock
model: every kind of session it makes non-interactively, found by
agentkeep whole; a real prune and a real purge remove all of it through
`codex delete --force`, children first; Codex itself afterwards lists and
resumes what stayed and refuses what went.

One home is driven once for the module (each `codex exec` takes seconds):
plain, tool use (a file write, output long enough to be truncated), a
subagent, resume by id and `--last`, a fork, an archived session, and one
with a goal and a queued message.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import groundtruth
import isolation
import pytest
from drive_codex import PROTOCOL, Codex

from conftest import agent_binary
from fakehome import FakeHome, make_fake_home

pytestmark = pytest.mark.slow

DAY = 86_400
RULES: list[dict[str, Any]] = [
    {"when": "TOOL OUTPUT exec_command", "reply": [{"text": "the tool ran"}]},
    {"when": "TOOL OUTPUT spawn_agent", "reply": [{"text": "the subagent is on it"}]},
    {"when": "TOOL OUTPUT create_goal", "reply": [{"text": "goal set"}]},
    {
        "when": "use the tool",
        "reply": [
            {
                "call": "exec_command",
                "arguments": {"cmd": "echo written > notes.txt && seq 1 200000"},
            }
        ],
    },
    {
        "when": "spawn a subagent",
        "reply": [
            {
                "call": "spawn_agent",
                "namespace": "multi_agent_v1",
                "arguments": {"message": "SUBTASK count the files"},
            }
        ],
    },
    {"when": "SUBTASK", "reply": [{"text": "the subagent is done"}]},
    {
        "when": "set a goal",
        "reply": [{"call": "create_goal", "arguments": {"objective": "finish the run"}}],
    },
    {"reply": [{"text": "plain answer"}]},
]


@dataclass
class Driven:
    home: FakeHome
    codex: Codex
    ids: dict[str, str]  # role -> session id

    @property
    def root(self) -> Path:
        return self.home.codex


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Driven:
    binary = agent_binary("codex")
    home = make_fake_home(tmp_path_factory.mktemp("codex-conformance"))
    home.environ["PATH"] = os.pathsep.join([str(binary.parent), home.environ["PATH"]])
    cx = Codex.setup(home, binary)
    ids = {
        "plain": cx.exec("a plain question", rules=RULES),
        "tool": cx.exec("use the tool please", rules=RULES),
        "spawner": cx.exec("spawn a subagent", rules=RULES),
        "resumed": cx.exec("a session to resume", rules=RULES),
        "archived": cx.exec("a session to archive", rules=RULES),
        "goal": cx.exec("set a goal", rules=RULES),
    }
    assert cx.exec("resume", ids["resumed"], "once more", rules=RULES) == ids["resumed"]
    assert cx.exec("resume", "--last", "and again", rules=RULES) == ids["resumed"]
    ids["fork"] = cx.exec("fork", ids["plain"], "a forked question", rules=RULES)
    cx.run("archive", ids["archived"]).check()
    cx.run("queue", "--thread", ids["goal"], "--message", "queued for later").check()
    children = _spawn_children(home.codex, ids["spawner"])
    assert len(children) == 1, f"SETUP INVALID: the subagent was not spawned: {children}"
    ids["subagent"] = children[0]
    return Driven(home, cx, ids)


def _spawn_children(root: Path, parent: str) -> list[str]:
    (state,) = root.glob("state_*.sqlite")
    conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        sql = "SELECT child_thread_id FROM thread_spawn_edges WHERE parent_thread_id = ?"
        return [r[0] for r in conn.execute(sql, (parent,))]
    finally:
        conn.close()


def _listed(cx: Codex) -> set[str]:
    """Every session Codex lists, archived or not."""
    return set(cx.listed()) | set(cx.listed(archived=True))


# The arguments come on stdin and the process execs into agentkeep: a
# session id on the command line of the namespace's wrappers (agentkeep's
# parents) would make the session look live.
_EXEC_ARGS = "import json, os, sys; os.execv(sys.executable, json.load(sys.stdin))"


def _run_agentkeep(driven: Driven, *args: str) -> isolation.Run:
    """The real CLI as the user runs it, Codex on PATH, inside the network
    namespace too (it runs `codex delete`)."""
    return isolation.run(
        [sys.executable, "-c", _EXEC_ARGS],
        env=driven.home.environ,
        cwd=driven.home.home,
        protocol=PROTOCOL,
        rules=[],
        workdir=driven.codex.logs,
        timeout=600,
        stdin=json.dumps([sys.executable, "-m", "agentkeep", *args]),
    )


def _agentkeep(driven: Driven, *args: str) -> dict[str, Any]:
    run = _run_agentkeep(driven, *args, "--json")
    if run.returncode not in (0, 1):
        raise AssertionError(f"agentkeep {args}: {run.returncode}\n{run.stdout}\n{run.stderr}")
    doc: dict[str, Any] = json.loads(run.stdout)
    return doc


def _sessions(driven: Driven) -> dict[str, dict[str, Any]]:
    _agentkeep(driven, "scan")
    listed = _agentkeep(driven, "ls", "--agent", "codex")
    found = {}
    for s in listed if isinstance(listed, list) else listed["sessions"]:
        found[s["id"]] = _agentkeep(driven, "show", "codex", s["id"])
    return found


def _ground_truth(driven: Driven, ids: set[str]) -> dict[str, set[str]]:
    naming = groundtruth.naming([driven.root], ids)
    return {sid: n.names | n.rows for sid, n in naming.items()}


def _contents(driven: Driven, ids: set[str]) -> dict[str, set[str]]:
    return {sid: n.contents for sid, n in groundtruth.naming([driven.root], ids).items()}


def _age(driven: Driven, sids: set[str], days: float) -> None:
    """Set every file of theirs and Codex's own time columns back `days`."""
    when = time.time() - days * DAY
    for sid in sids:
        for path in _ground_truth(driven, {sid})[sid]:
            if "#" not in path and os.path.isfile(path):
                os.utime(path, (when, when))
    (state,) = driven.root.glob("state_*.sqlite")
    conn = sqlite3.connect(state)
    with conn:
        for sid in sids:
            conn.execute(
                "UPDATE threads SET updated_at = ?, updated_at_ms = ?, recency_at = ?,"
                " recency_at_ms = ? WHERE id = ?",
                (int(when), int(when * 1000), int(when), int(when * 1000), sid),
            )
    conn.close()


def _resumes(driven: Driven, sid: str) -> bool:
    run = driven.codex.run(
        "exec", "--json", "--skip-git-repo-check", "resume", sid, "hello again", rules=RULES
    )
    return run.returncode == 0


# -- the tests -----------------------------------------------------------------


def test_every_session_is_found_whole(driven: Driven) -> None:
    real = _listed(driven.codex)
    ids = driven.ids
    assert real == set(ids.values()), "SETUP INVALID: Codex lists other sessions than were driven"
    found = _sessions(driven)
    print(f"\ncodex: sessions found {len(set(found) & real)} / real {len(real)}")
    assert set(found) == real
    workspace = str(driven.codex.workspace)
    assert {sid: s["workspace"] for sid, s in found.items()} == {sid: workspace for sid in real}
    parents = {sid: s["parent"] for sid, s in found.items()}
    expected = {sid: None for sid in real}
    expected[ids["subagent"]] = ids["spawner"]
    expected[ids["fork"]] = ids["plain"]
    assert parents == expected
    truth = _ground_truth(driven, real)
    artifacts = {sid: {a["path"] for a in s["artifacts"]} for sid, s in found.items()}
    total = sum(len(t) for t in truth.values())
    covered = sum(len(truth[sid] & artifacts[sid]) for sid in real)
    print(f"codex: artifacts found {covered} / ground truth {total}")
    assert {sid: truth[sid] - artifacts[sid] for sid in real} == {sid: set() for sid in real}
    # Rollout contents naming another session: a fork's copy of its parent's
    # history, a spawner's record of its subagent. Each is an artifact of its
    # own session, never a shared file.
    every = set().union(*artifacts.values())
    for sid, paths in _contents(driven, real).items():
        assert paths <= every, f"{sid} is named by files that are no session's: {paths - every}"
    # The rows of six databases, by table (the report's figure).
    tables = sorted({p.rpartition("/")[2] for t in truth.values() for p in t if "#" in p})
    print("codex: tables holding rows:", ", ".join(tables))


def test_a_real_prune_removes_all_of_it_children_first(driven: Driven) -> None:
    ids = driven.ids
    real = _listed(driven.codex)
    kept = {ids["fork"], ids["resumed"], ids["plain"]}  # plain: the fork's parent
    gone = real - kept
    _age(driven, real - {ids["fork"], ids["resumed"]}, 60)
    truth = _ground_truth(driven, real)
    # `.tmp/` is Codex's own scratch: 0.171 stages plugin marketplace
    # checkouts there, and any codex process (the `codex delete` the prune
    # runs too) clears what an earlier one left.
    scratch = driven.root / ".tmp"
    others = sorted(
        str(p)
        for p in driven.root.rglob("*")
        if p.is_file()
        and not p.name.endswith((".sqlite", "-wal", "-shm", ".lock"))
        and not p.is_relative_to(scratch)
        and not any(str(p) in truth[sid] for sid in gone)
    )
    before = groundtruth.digests(others)

    report = _agentkeep(driven, "prune", "--older-than", "30d")

    assert report["failed"] == []
    removed = [r["id"] for r in report["removed"]]
    assert set(removed) == gone
    assert removed.index(ids["subagent"]) < removed.index(ids["spawner"])
    assert {k["id"]: k["reason"] for k in report["kept"]} == {ids["plain"]: "ancestor"}
    left = _ground_truth(driven, gone)
    residual = {(r["id"], r["path"]) for r in report["residual"]}
    leftovers = {(sid, p) for sid, paths in left.items() for p in paths} - residual
    print(f"\ncodex: leftovers after prune outside residual: {len(leftovers)} {sorted(leftovers)}")
    print("codex: residual:", sorted(p.rpartition("/")[2] for _, p in residual))
    assert leftovers == set()
    assert groundtruth.digests(others) == before
    # Codex's own verdict.
    assert _listed(driven.codex) == kept
    for sid in sorted(kept):
        assert _resumes(driven, sid), f"codex cannot resume kept {sid}"
    for sid in sorted(gone):
        assert not _resumes(driven, sid), f"codex still resumes removed {sid}"
    print("codex: after the prune Codex lists and resumes the kept, refuses the removed")


def test_purge_to_the_trash_restore_and_codex_resumes(tmp_path: Path) -> None:
    binary = agent_binary("codex")
    home = make_fake_home(tmp_path)
    home.environ["PATH"] = os.pathsep.join([str(binary.parent), home.environ["PATH"]])
    cx = Codex.setup(home, binary)
    sid = cx.exec("a session to purge", rules=RULES)
    d = Driven(home, cx, {"purged": sid})
    truth = _ground_truth(d, {sid})[sid]
    assert any("#" in p for p in truth) and any("#" not in p for p in truth)

    report = _agentkeep(d, "purge", "codex", sid)

    assert [r["id"] for r in report["removed"]] == [sid] and report["failed"] == []
    assert _ground_truth(d, {sid})[sid] == set()
    assert sid not in _listed(cx) and not _resumes(d, sid)

    restored = _run_agentkeep(d, "restore", "codex", sid)
    assert restored.returncode == 0, restored.stderr
    # Read before Codex runs again: from a rollout alone it rebuilds the
    # threads row and the history (FIELD-NOTES), which would hide rows that
    # restore did not bring back.
    assert _ground_truth(d, {sid})[sid] == truth
    assert sid in _listed(cx)
    assert _resumes(d, sid)
