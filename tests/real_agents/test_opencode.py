"""agentkeep against the real opencode (the pinned version), end to end.

The real opencode writes sessions against the mock model: a plain one, one
with a todo list, a file write and a shell output truncated into
`tool-output/`, one whose task tool starts a subagent (a child session with
its own truncated output), a continued one, a resumed one, a fork (a copy
that points at its parent's tool output) and an archived one (the fork's
parent). Then agentkeep, run as the user runs it, must find every session
with its workspace and parent, and every file and row that names one (found
without agentkeep: groundtruth); a prune of the aged ones must remove all of
it, children first, leave nothing but what its report calls residual and
change nothing shared; and opencode itself must still list and resume the
kept sessions and refuse the removed ones. A purge to the trash and a
restore must give opencode its session back.

Figures (sessions found, artifacts found, leftovers, opencode's verdict)
are printed, for the conformance report (`pytest -s`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import groundtruth
import pytest
from drive_opencode import DELEGATE, PLAIN, SHELL, TOOLS, Opencode, age

from conftest import agent_binary
from fakehome import FakeHome

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DAY = 86400.0

# Files that name sessions and are opencode's own, shared by every session:
# never removed for one, and what each holds about sessions.
SHARED = {
    "log": "log/opencode.log: every opencode command logs the ids it works on",
}
# Tables of opencode.db that are no session's: the same before and after.
SHARED_TABLES = (
    "account",
    "account_state",
    "control_account",
    "credential",
    "data_migration",
    "migration",
    "permission",
    "project",
    "project_directory",
    "workspace",
)
# ... but for what every opencode command, the `opencode session delete`
# agentkeep runs too, writes: the time it last opened its cwd's project.
TOUCHED = {"project": "time_updated"}
# opencode's own runtime state, rewritten by every opencode process, the
# `opencode debug paths` and `opencode session delete` agentkeep runs too:
# not compared before and after.
RUNTIME = {
    "locks": "~/.local/state/opencode/locks/<hash>.lock/{meta.json,heartbeat}: its flock",
}


def user_tree(fh: FakeHome) -> list[Path]:
    """Everything of the fake user's (home, tmp dir, workspace) but
    agentkeep's own state: its index and trash name sessions too."""
    state = fh.state
    roots: list[Path] = []
    for top in (fh.home, fh.root / "tmp", fh.root / "project"):
        stack = [top]
        while stack:
            here = stack.pop()
            if here == state:
                continue
            if state.is_relative_to(here) and here.is_dir() and not here.is_symlink():
                stack.extend(here.iterdir())
            else:
                roots.append(here)
    return roots


def shared_kind(oc: Opencode, path: str) -> str | None:
    """Which known shared file `path` is (a key of SHARED), if any."""
    if Path(path).is_relative_to(oc.data / "log"):
        return "log"
    return None


def runtime_kind(oc: Opencode, path: str) -> str | None:
    """Which of opencode's runtime files `path` is (a key of RUNTIME), if any."""
    state = Path(oc.home.environ["XDG_STATE_HOME"]) / "opencode"
    if Path(path).is_relative_to(state / "locks"):
        return "locks"
    return None


def shared_rows(oc: Opencode) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of the tables that are no session's, but the columns TOUCHED."""
    found = {}
    for table in SHARED_TABLES:
        cols = [r[1] for r in oc.rows(f'PRAGMA table_info("{table}")')]
        kept = ", ".join(f'"{c}"' for c in cols if c != TOUCHED.get(table))
        found[table] = sorted(oc.rows(f'SELECT {kept} FROM "{table}"'))
    return found


def ls(oc: Opencode) -> dict[str, dict[str, Any]]:
    out = oc.home.cli("ls", "--agent", "opencode", "--json", check=True, timeout=300)
    return {s["id"]: s for s in json.loads(out.stdout)}


def show(oc: Opencode, sid: str) -> dict[str, Any]:
    out = oc.home.cli("show", "opencode", sid, "--json", check=True, timeout=300)
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def artifacts(oc: Opencode, sid: str) -> set[str]:
    return {a["path"] for a in show(oc, sid)["artifacts"]}


def report(run: Any) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(run.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {run.returncode}):\n{run.stdout}\n{run.stderr}")
    return doc


def not_artifacts(
    oc: Opencode, naming: groundtruth.Naming, found: set[str]
) -> tuple[set[str], set[str]]:
    """What names a session but is not one of its artifacts: (shared, unknown)."""
    missing = naming.everything() - found
    shared = {p for p in missing if shared_kind(oc, p)}
    return shared, missing - shared


def drive(oc: Opencode) -> dict[str, str]:
    """Every kind of session opencode makes; their ids by what they are."""
    s = {"plain": oc.ask(PLAIN), "tools": oc.ask(TOOLS), "parent": oc.ask(DELEGATE)}
    [(child,)] = oc.rows("SELECT id FROM session WHERE parent_id = ?", s["parent"])
    s["child"] = child
    # --continue takes the last root session: the parent.
    assert oc.ask("CONTINUE please", "--continue") == s["parent"]
    assert oc.ask("RESUME please", "--session", s["plain"]) == s["plain"]
    s["fork"] = oc.ask("FORK please", "--session", s["tools"], "--fork")
    oc.archive(s["tools"])
    return s


def test_agentkeep_finds_prunes_and_leaves_opencode_whole(agent_home: FakeHome) -> None:
    oc = Opencode.setup(agent_home, agent_binary("opencode"))
    conformance(oc, drive(oc))


def conformance(oc: Opencode, s: dict[str, str]) -> None:
    agent_home = oc.home
    ids = set(s.values())
    assert len(ids) == 5, s

    # -- what opencode wrote (its own rows, read here)
    parents = dict(oc.rows("SELECT id, parent_id FROM session"))
    assert parents == {sid: (s["parent"] if sid == s["child"] else None) for sid in ids}
    outputs = oc.tool_outputs()
    users = sorted(sorted(v) for v in outputs.values())
    assert users == sorted([sorted([s["tools"], s["fork"]]), [s["child"]]]), outputs
    archived = oc.rows("SELECT id FROM session WHERE time_archived IS NOT NULL")
    assert archived == [(s["tools"],)]
    truth = groundtruth.naming(user_tree(agent_home), ids)

    # -- agentkeep finds every session, with its workspace and parent
    listed = ls(oc)
    assert set(listed) == ids
    workspace = os.path.realpath(oc.workspace)
    assert {sid: (e["workspace"], e["parent"]) for sid, e in listed.items()} == {
        sid: (workspace, parents[sid]) for sid in ids
    }
    # -- and every file and row that names one, or a known shared file
    found = {sid: artifacts(oc, sid) for sid in ids}
    unknown: dict[str, set[str]] = {}
    covered = total = 0
    for sid in ids:
        shared, unknown[sid] = not_artifacts(oc, truth[sid], found[sid])
        total += len(truth[sid].everything() - shared)
        covered += len(truth[sid].everything() - shared - unknown[sid])
    assert unknown == {sid: set() for sid in ids}
    # Tool outputs do not name their session: they are the session's whose
    # parts alone point at them; the fork's copy keeps its parent's in neither.
    for name, users_of in outputs.items():
        path = str(oc.data / "tool-output" / name)
        owners = {sid for sid in ids if path in found[sid]}
        assert owners == (users_of if len(users_of) == 1 else set()), name
    alone = sum(len(u) == 1 for u in outputs.values())
    print(
        f"\nopencode conformance: sessions found {len(listed)}/{len(ids)},"
        f" artifacts found {covered}/{total} named by id"
        f" (+{alone} tool outputs by reference, {len(outputs) - alone} shared by a fork)"
    )

    # -- age the doomed ones; hash everything shared
    doomed = {s["tools"], s["parent"], s["child"]}
    kept = ids - doomed
    own_outputs = [oc.data / "tool-output" / n for n, u in outputs.items() if u <= doomed]
    age(oc, doomed, 60 * DAY, own_outputs)
    everything_named = set().union(*(truth[sid].everything() for sid in ids))
    shared_files = [
        p
        for p in groundtruth.tree(user_tree(agent_home))
        if os.path.isfile(p)
        and p not in everything_named
        and not p.startswith(str(oc.db))
        and not runtime_kind(oc, p)
        and not any(p in found[sid] for sid in ids)
    ]
    before_shared = groundtruth.digests(shared_files)
    assert before_shared, "SETUP INVALID: no shared file to watch"
    before_rows = shared_rows(oc)

    # -- a real prune, as the user runs it
    run = oc.agentkeep("prune", "--older-than", "30d", "--json")
    doc = report(run)
    assert run.returncode == 0, run.stderr[-3000:]
    removed = [r["id"] for r in doc["removed"]]
    assert set(removed) == doomed and doc["failed"] == [] and doc["kept"] == []
    assert removed.index(s["child"]) < removed.index(s["parent"]), "children first"
    # opencode's own delete did it, asked only once agentkeep knew it uses our data dir.
    assert oc.agentkeep_calls() == [
        c for sid in removed for c in ("debug paths", f"session delete {sid}")
    ]

    # -- nothing of them is left but what the report calls residual
    after = groundtruth.naming(user_tree(agent_home), ids)
    residual = {(e["id"], e["path"]) for e in doc["residual"]}
    leftovers = {
        (sid, p)
        for sid in doomed
        for p in after[sid].everything()
        if not shared_kind(oc, p) and (sid, p) not in residual
    }
    assert leftovers == set()
    for name, users_of in outputs.items():
        exists = (oc.data / "tool-output" / name).exists()
        assert exists == bool(users_of & kept), f"{name} of {users_of}"
    for sid in kept:
        assert after[sid].everything() == truth[sid].everything(), sid
    changed = {p for p, h in groundtruth.digests(shared_files).items() if h != before_shared[p]}
    assert changed == set(), f"shared files changed: {sorted(changed)}"
    assert shared_rows(oc) == before_rows

    # -- opencode's verdict: the kept listed and resumable, the removed refused
    root_sessions = {sid for sid in ids if parents[sid] is None}
    assert oc.listed() == kept & root_sessions
    resumes = {sid: oc.resumes(sid) for sid in sorted(ids)}
    assert resumes == {sid: sid in kept for sid in sorted(ids)}
    print(
        f"opencode conformance: removed {len(removed)}, residual {len(doc['residual'])},"
        f" leftovers outside residual {len(leftovers)}; opencode lists"
        f" {len(kept & root_sessions)} kept, resumes {sum(resumes.values())}/{len(kept)} kept,"
        f" refuses {sum(not v for sid, v in resumes.items() if sid in doomed)}/{len(doomed)}"
        " removed"
    )


def test_a_purged_session_comes_back_from_the_trash_and_opencode_resumes_it(
    agent_home: FakeHome,
) -> None:
    oc = Opencode.setup(agent_home, agent_binary("opencode"))
    sid = oc.ask(SHELL)
    [output] = [oc.data / "tool-output" / n for n in oc.tool_outputs()]
    rows_before = {
        t: oc.rows(f"SELECT count(*) FROM {t} WHERE session_id = ?", sid)
        for t in ("message", "part")
    }
    assert oc.listed() == {sid}

    purge = oc.agentkeep("purge", "opencode", sid, "--json")
    assert purge.returncode == 0, purge.stderr[-3000:]
    assert [r["id"] for r in report(purge)["removed"]] == [sid]
    assert not output.exists()
    assert oc.listed() == set() and not oc.resumes(sid)

    restore = oc.agentkeep("restore", "opencode", sid)
    assert restore.returncode == 0, restore.stdout + restore.stderr[-3000:]
    assert output.exists()
    assert {
        t: oc.rows(f"SELECT count(*) FROM {t} WHERE session_id = ?", sid)
        for t in ("message", "part")
    } == rows_before
    assert oc.listed() == {sid}
    assert oc.resumes(sid)
