"""agentkeep against the real Claude Code (the version pinned in pins.py).

Real sessions, driven headless against the mock model (drive_claude.py):

- R, in workspace one: Read and Write an existing file, a Bash command with
  a big output, a task list, a subagent, a background command, `--debug`;
  then resumed (`--resume R`) and continued (`--continue`): both append to R;
- F: `--resume R --fork-session`, a copy of R's history under a new id;
- S and K: plain sessions in workspace two; P: one more, purged by name.

R and S are aged 60 days (every path that names them, and what lies below);
F, K and P stay recent. Then agentkeep, run as the user would, must find
every session with its workspace and parent, account for everything the
ground truth says names a session (groundtruth.py), prune R and S whole and
purge P whole, report whatever still names them as `residual`, change
nothing shared, and leave Claude itself able to resume F and K and refusing
R, S and P.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import groundtruth
import psutil
import pytest
from drive_claude import NOT_FOUND, Claude, age, rich_rules
from groundtruth import covered

from conftest import agent_binary, agentkeep
from fakehome import FakeHome, kill_group
from waiting import wait_until

pytestmark = pytest.mark.slow

AGED_DAYS = 60
WAIT = "tail -f /dev/null"


def _files(roots: list[Path]) -> dict[str, str | None]:
    """Every path below `roots` with the sha256 of its content (None: not a
    regular file)."""
    out: dict[str, str | None] = {}
    for path in groundtruth.tree(roots):
        regular = os.path.isfile(path) and not os.path.islink(path)
        out[path] = groundtruth.digests([path])[path] if regular else None
    return out


@pytest.fixture
def sessions(agent_home: FakeHome) -> dict[str, Any]:
    """Drive the real sessions; what they are, by name."""
    claude = Claude(agent_home, agent_home.root / "runs", agent_binary("claude"))
    settings = claude.keep_everything()
    one, two = agent_home.home / "work" / "one", agent_home.home / "work" / "two"
    for w in (one, two):
        w.mkdir(parents=True)
    notes = one / "notes.txt"
    notes.write_text("old\n")
    rules = rich_rules(one, notes)
    r = claude.run("please do the work", "--debug", cwd=one, rules=rules).session_id
    resumed = claude.run("--resume", r, "resume: a plain answer", cwd=one, rules=rules)
    continued = claude.run("--continue", "continue: a plain answer", cwd=one, rules=rules)
    assert resumed.session_id == continued.session_id == r, "resume and continue append to R"
    f = claude.run("--resume", r, "--fork-session", "fork it", cwd=one).session_id
    s = claude.run("a plain session S", cwd=two).session_id
    k = claude.run("a plain session K", cwd=two).session_id
    p = claude.run("a plain session P", cwd=two).session_id
    assert len({r, f, s, k, p}) == 5, "SETUP INVALID: sessions share an id"
    return {
        "claude": claude,
        "settings": settings,
        "ids": {"R": r, "F": f, "S": s, "K": k, "P": p},
        "workspace": {r: one, f: one, s: two, k: two, p: two},
    }


def _wrote_everything(home: FakeHome, sid: str, names: set[str]) -> None:
    """R wrote each thing the rich rules are for (else the setup is wrong)."""
    c = home.claude
    for area in ("tasks", "file-history", "session-env", "debug"):
        assert any(p.startswith(f"{c}/{area}/") for p in names), f"SETUP INVALID: no {area}/"
    (session_dir,) = (p for p in names if p.startswith(f"{c}/projects/") and p.endswith(sid))
    for part, pattern in (("subagents", "*.meta.json"), ("tool-results", "*.txt")):
        assert list(Path(session_dir, part).glob(pattern)), f"SETUP INVALID: no {part}/"
    tmp = [p for p in names if p.startswith(str(home.root / "tmp") + "/")]
    outputs = [o for t in tmp for o in Path(t).glob("tasks/*.output")]
    assert any(o.is_symlink() for o in outputs), "SETUP INVALID: no link into a subagent"
    assert any(not o.is_symlink() for o in outputs), "SETUP INVALID: no command output"


# Files (and folders) that name sessions and are nobody's to remove, each with why.
def _shared(home: FakeHome) -> dict[Path, str]:
    c = home.claude
    return {
        c / ".claude.json": "Claude's own state (projects, last session): shared",
        c / "history.jsonl": "one line per prompt of every session: shared",
        c / "plugins": "the plugins' own state: 2.1.332's plugins/store/<plugin>.json"
        " names the latest session, and the next session rewrites it: shared",
    }


def _plugin_stores(home: FakeHome, naming: dict[str, groundtruth.Naming]) -> dict[str, set[str]]:
    """The plugin stores naming each session in their content."""
    store = f"{home.claude}/plugins/store/"
    return {sid: {p for p in n.contents if p.startswith(store)} for sid, n in naming.items()}


@pytest.mark.timeout(1200)
def test_claude_sessions_are_found_pruned_and_purged_whole(
    agent_home: FakeHome, sessions: dict[str, Any]
) -> None:
    ids: dict[str, str] = sessions["ids"]
    claude: Claude = sessions["claude"]
    # The agent's trees and the workspaces; agentkeep's own state (the
    # index, the trash) aside.
    roots = [agent_home.claude, agent_home.home / "work", agent_home.root / "tmp"]
    roots.append(agent_home.system_tmp)
    every = list(ids.values())
    truth = groundtruth.naming(roots, every)
    shared = {str(p) for p in _shared(agent_home)}
    _wrote_everything(agent_home, ids["R"], truth[ids["R"]].names)
    for name in ("R", "S"):
        age(sorted(truth[ids[name]].names), AGED_DAYS)

    # -- found: every session, its workspace and its parent -----------------
    scanned = agentkeep(agent_home, "scan")
    assert scanned["sessions"]["claude"] == len(every)
    listed = {s["id"]: s for s in agentkeep(agent_home, "ls", "--agent", "claude")}
    assert set(listed) == set(every)
    for sid in every:
        assert listed[sid]["workspace"] == str(sessions["workspace"][sid])
        # --fork-session records no parent in 2.1.197 and 2.1.332 (FIELD-NOTES.md).
        assert listed[sid]["parent"] is None, sid
    shown = {sid: agentkeep(agent_home, "show", "claude", sid) for sid in every}
    artifacts = {sid: {a["path"] for a in shown[sid]["artifacts"]} for sid in every}
    print(
        "kinds by session:",
        {sid: sorted({a["kind"] for a in shown[sid]["artifacts"]}) for sid in every},
    )

    # -- every path that names a session is one of its artifacts, or shared --
    # A fork's copied records keep naming its source: `persistedOutputPath`
    # into R's tool-results/ and `<output-file>` into R's tmp tasks/. The
    # fork's transcript is the fork's, and it stays with the fork.
    copied = {ids["R"]: artifacts[ids["F"]]}

    def accounted(sid: str, path: str) -> bool:
        return covered(path, shared | artifacts[sid] | copied.get(sid, set()))

    unaccounted = {
        sid: sorted(p for p in truth[sid].names if not accounted(sid, p))
        + sorted(p for p in truth[sid].contents if not accounted(sid, p))
        for sid in every
    }
    assert unaccounted == {sid: [] for sid in every}
    figures = {
        sid: (sum(covered(p, artifacts[sid]) for p in truth[sid].names), len(truth[sid].names))
        for sid in every
    }
    print("artifacts found / ground truth names, by session:", figures)
    # A plugin's store names the latest session (P): shared, no session's.
    stores = _plugin_stores(agent_home, truth)
    assert any(stores.values()), "SETUP INVALID: no plugins/store/ file names a session"
    assert not any(covered(p, artifacts[sid]) for sid in every for p in stores[sid])
    print("plugin stores naming a session:", {sid: sorted(p) for sid, p in stores.items() if p})

    # -- prune R and S, purge P --------------------------------------------
    removed_ids = {ids["R"], ids["S"], ids["P"]}
    kept_ids = {ids["F"], ids["K"]}
    removable = {p for sid in removed_ids for p in artifacts[sid]}
    before = _files(roots)
    report = agentkeep(agent_home, "prune", "--older-than", "30d")
    assert report["failed"] == [] and report["kept"] == []
    assert {r["id"] for r in report["removed"]} == {ids["R"], ids["S"]}
    purge = agentkeep(agent_home, "purge", "claude", ids["P"])
    assert purge["failed"] == [] and [r["id"] for r in purge["removed"]] == [ids["P"]]
    residual = {r["path"] for rep in (report, purge) for r in rep["residual"]}
    for rep in (report, purge):
        for removed in rep["removed"]:
            assert set(removed["paths"]) == artifacts[removed["id"]]

    # Nothing but the removed sessions' artifacts changed.
    after = _files(roots)
    changed = {p for p in before if before[p] != after.get(p, "gone")}
    assert not {p for p in changed if not covered(p, removable)}, "something shared changed"
    assert not set(after) - set(before), "the removal made files"

    # What still names a removed session is residual, or shared.
    left = groundtruth.naming(roots, removed_ids)
    leftovers = {
        sid: sorted(
            p for p in left[sid].everything() if not accounted(sid, p) and p not in residual
        )
        for sid in removed_ids
    }
    assert leftovers == {sid: [] for sid in removed_ids}
    # The plugin store still names a removed session (P, purged last), and
    # is not residual: a shared file Claude rewrites, as history.jsonl.
    stores = _plugin_stores(agent_home, left)
    assert any(stores.values()), "SETUP INVALID: no plugin store names a removed session"
    assert not set().union(*stores.values()) & residual
    # And residual is honest: each entry still names its session.
    named = {(sid, p) for sid in removed_ids for p in left[sid].names}
    assert {(r["id"], r["path"]) for rep in (report, purge) for r in rep["residual"]} <= named
    print("leftovers outside residual:", sum(map(len, leftovers.values())), "residual:", residual)

    # -- Claude's own verdict ------------------------------------------------
    for name in ("F", "K"):
        sid = ids[name]
        again = claude.run("--resume", sid, "still there?", cwd=sessions["workspace"][sid])
        assert again.session_id == sid, name
    for name in ("R", "S", "P"):
        sid = ids[name]
        gone = claude.run("--resume", sid, "gone?", cwd=sessions["workspace"][sid], check=False)
        assert gone.run.returncode != 0, name
        assert NOT_FOUND in gone.run.stdout + gone.run.stderr, name
    assert kept_ids <= {s["id"] for s in agentkeep(agent_home, "ls", "--agent", "claude")}


def _registered(registry: Path) -> dict[str, Any] | None:
    """The record of the one `sessions/<pid>.json` there, once it is whole."""
    for path in registry.glob("*.json") if registry.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("sessionId"):
            return record
    return None


@pytest.mark.timeout(600)
def test_a_session_open_in_a_running_claude_is_kept_live(agent_home: FakeHome) -> None:
    """Idle past the cutoff by every file, but open in a running claude whose
    command line does not name it: the registry alone says it is in use."""
    claude = Claude(agent_home, agent_home.root / "runs", agent_binary("claude"))
    claude.keep_everything()
    work = agent_home.home / "work" / "live"
    work.mkdir(parents=True)
    # A command that waits until it is killed: 2.1.332 refuses a standalone
    # `sleep 600` ("Blocked: standalone sleep").
    wait = {"command": WAIT, "description": "Wait", "timeout": 600000}
    rules = [
        {"when": "tool_result", "reply": [{"text": "done"}]},
        {"reply": [{"tool": "Bash", "input": wait}]},
    ]
    proc = claude.start("stay open", cwd=work, rules=rules)
    try:
        record = wait_until(
            lambda: _registered(agent_home.claude / "sessions"), "claude registers", 120
        )
        sid = str(record["sessionId"])
        projects = agent_home.claude / "projects"

        def sleeping() -> bool:
            # The tool call is in the transcript and its command runs: Claude
            # writes nothing more to the session until the command ends.
            written = any(WAIT in t.read_text() for t in projects.glob(f"*/{sid}.jsonl"))
            return written and any(
                WAIT in " ".join(_cmdline(p))
                for p in psutil.Process(record["pid"]).children(recursive=True)
            )

        wait_until(sleeping, "the Bash tool call running", 120)
        # The record as 2.1.197 and 2.1.332 write it; procStart is
        # /proc/<pid>/stat's field 22.
        assert {"pid", "sessionId", "cwd", "startedAt", "procStart"} <= set(record)
        cmdline = Path(f"/proc/{record['pid']}/cmdline").read_text().replace("\0", " ")
        assert sid not in cmdline, "SETUP INVALID: the command line names the session"
        roots = [agent_home.claude, work, agent_home.root / "tmp"]
        # As if claude had been left open for two months: its registry files
        # (named by pid, not by the session: `<pid>.json` and, from 2.1.332
        # again, `<pid>.<hex>.key`) are as old as the rest.
        registered = [str(p) for p in (agent_home.claude / "sessions").glob(f"{record['pid']}.*")]
        age([*groundtruth.naming(roots, [sid])[sid].names, *registered], AGED_DAYS)
        report = agentkeep(agent_home, "prune", "--older-than", "30d")
        assert [(k["id"], k["reason"]) for k in report["kept"]] == [(sid, "live")]
        assert report["removed"] == []
        assert f"sessions/{record['pid']}.json" in report["kept"][0]["detail"]
        assert list(projects.glob(f"*/{sid}.jsonl")), "the transcript is still there"
    finally:
        kill_group(proc)


def _cmdline(p: psutil.Process) -> list[str]:
    """A child's command line; none for one that is exiting meanwhile (a
    zombie, or gone), as claude's short-lived helpers often are."""
    try:
        return p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # ZombieProcess included
        return []
