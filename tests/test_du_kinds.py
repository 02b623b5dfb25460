"""`du --by kind`: the whole disk the agents fill, by what fills it.

A home with sessions of every agent (the tests' builders),
scanned by the real CLI: every artifact kind any adapter wrote has a group
of its own (none falls to "other"), the session groups add up to what `du`
(the command) counts for the sessions' files, an agent's database is split
into its rows and its free pages, and the trash and the state dir are
counted apart.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agentkeep.core import bykind
from agentkeep.core.context import Context
from agentkeep.core.reclaim import du
from agentkeep.index import Index
from agentkeep.model import Artifact, Session
from agentkeep.paths import Env
from build_agents import (
    gemini_root,
    grok_root,
    make_gemini_session,
    make_grok_session,
    make_zero_session,
    write_gemini_projects,
    zero_root,
)
from build_claude import make_session, make_shared, new_id
from build_codex import build_codex
from build_copilot import CopilotTree
from build_opencode import OpencodeTree, build_opencode
from fakehome import FakeHome, cli_json

pytestmark = pytest.mark.slow

SESSION_GROUPS = ("transcripts", "tool-output", "snapshots", "debug-logs", "database-rows", "other")


def groups(fh: FakeHome) -> dict[str, dict[str, Any]]:
    code, doc, err = cli_json(fh, "du", "--by", "kind")
    assert code == 0, err
    assert doc["by"] == "kind"
    assert [g["disk_bytes"] for g in doc["groups"]] == sorted(
        (g["disk_bytes"] for g in doc["groups"]), reverse=True
    )
    return {g["key"]: g for g in doc["groups"]}


def du_bytes(*paths: str) -> int:
    """What du(1) counts for `paths` together (each inode once), in bytes."""
    if not paths:
        return 0
    out = subprocess.run(["du", "-csB1", "--", *paths], capture_output=True, text=True, check=True)
    return int(out.stdout.splitlines()[-1].split()[0])


def every_agent(fh: FakeHome) -> None:
    """Sessions of every agent with every part each leaves, some idle past
    30 days, and each agent's shared files."""
    now = time.time()
    ids = [make_session(fh, cwd="/home/you/webapp", age_days=days, now=now).id for days in (75, 3)]
    make_shared(fh, cwd="/home/you/webapp", session_ids=ids, age_days=1)
    codex = build_codex(fh)
    for days in (90, 1):
        when = now - days * 86400
        codex.full_session(mtime=when, updated_at=int(when), older=False)
    opencode = build_opencode(fh)
    for days in (55, 4):
        sid = opencode.full_session(updated_ms=int((now - days * 86400) * 1000))
        opencode.tool_output(sid)
    gemini = gemini_root(fh.home)
    make_gemini_session(gemini, new_id(), project="site", project_root="/home/you/site", days=36)
    write_gemini_projects(gemini, {"/home/you/site": "site"})
    make_grok_session(grok_root(fh.home), "grok-notes-1", workspace="/home/you/notes", days=40)
    make_zero_session(zero_root(fh.data), "refactor-parser", days=50)
    tmp = Path(fh.environ["TMPDIR"])
    copilot = CopilotTree(fh.home / ".copilot", tmp, fh.home / ".local" / "state" / ".copilot")
    copilot.session(when=time.time() - 40 * 86400, outputs=1)


def test_every_kind_of_every_agent_has_its_group(fake_home: FakeHome) -> None:
    every_agent(fake_home)
    fake_home.cli("scan", check=True, timeout=120)
    index = Index(fake_home.state / "index.sqlite")
    try:
        kinds = {(agent, kind) for agent, _, kind, _, _ in index.kind_totals()}
    finally:
        index.close()
    agents = {agent for agent, _ in kinds}
    if agents != {"claude", "codex", "opencode", "gemini", "grok", "zero", "copilot"}:
        raise AssertionError(f"SETUP INVALID: sessions of {sorted(agents)} only")
    assert {k: bykind.group_of(*k) for k in kinds if bykind.group_of(*k) == "other"} == {}
    found = groups(fake_home)
    assert set(found) == set(bykind.ORDER)
    assert found["other"]["bytes"] == found["other"]["sessions"] == 0
    for key in ("transcripts", "tool-output", "snapshots", "debug-logs", "database-rows"):
        assert found[key]["sessions"] > 0 and found[key]["disk_bytes"] > 0, key
    assert found["agentkeep-state"]["disk_bytes"] > 0


def test_the_session_groups_are_what_du_counts_for_the_sessions_files(
    fake_home: FakeHome,
) -> None:
    every_agent(fake_home)
    code, ls, _ = cli_json(fake_home, "ls")
    paths = []
    for s in ls:
        code, shown, _ = cli_json(fake_home, "show", s["agent"], s["id"])
        paths += [a["path"] for a in shown["artifacts"] if "#" not in a["path"]]
    found = groups(fake_home)
    counted = sum(found[key]["disk_bytes"] for key in SESSION_GROUPS if key != "database-rows")
    assert counted == du_bytes(*sorted(set(paths)))


def test_a_kind_no_group_knows_is_counted_under_other(fake_home: FakeHome) -> None:
    every_agent(fake_home)
    fake_home.cli("scan", check=True, timeout=120)
    ctx = Context.open(Env.from_environ(fake_home.environ))
    try:
        before = {g["key"]: g for g in du(ctx, "kind")["groups"]}
        new = Artifact(str(fake_home.home / "new.bin"), "a-kind-of-next-year", 40_000, 1.0)
        ctx.index.put([Session("zero", "fix-ci-2", artifacts=[new._replace(disk_bytes=40_960)])])
        after = {g["key"]: g for g in du(ctx, "kind")["groups"]}
    finally:
        ctx.index.close()
    assert before["other"]["bytes"] == before["other"]["sessions"] == 0
    assert after["other"]["bytes"] == 40_000 and after["other"]["disk_bytes"] == 40_960
    assert after["other"]["sessions"] == 1


def test_a_database_is_its_rows_and_its_free_pages(fake_home: FakeHome) -> None:
    every_agent(fake_home)
    oc = OpencodeTree(fake_home.data / "opencode")
    conn = sqlite3.connect(oc.db)
    with conn:  # the agent's own deletion leaves free pages no prune made
        conn.execute("CREATE TABLE scratch (v BLOB)")
        conn.executemany("INSERT INTO scratch VALUES (?)", [(os.urandom(9000),)] * 40)
    with conn:
        conn.execute("DROP TABLE scratch")
    conn.close()
    ro = sqlite3.connect(f"file:{oc.db}?mode=ro", uri=True)
    free = (
        ro.execute("PRAGMA freelist_count").fetchone()[0]
        * ro.execute("PRAGMA page_size").fetchone()[0]
    )
    ro.close()
    if free < 40 * 9000:
        raise AssertionError("SETUP INVALID: no free pages")
    code, _, _ = cli_json(fake_home, "scan")
    dbs = [str(oc.db), *map(str, sorted(fake_home.codex.glob("*.sqlite")))]
    dbs.append(str(fake_home.home / ".copilot" / "session-store.db"))
    files = [p + s for p in dbs for s in ("", "-wal", "-shm") if os.path.exists(p + s)]

    found = groups(fake_home)

    pages = found["database-free-pages"]
    assert pages["bytes"] >= free and pages["reclaimable_bytes"] == 0  # not a prune's to give back
    rows = found["database-rows"]
    assert rows["bytes"] + pages["bytes"] == sum(os.stat(f).st_size for f in files)
    assert rows["disk_bytes"] + pages["disk_bytes"] == du_bytes(*files)


def test_the_trash_and_agentkeeps_state_are_their_own(fake_home: FakeHome) -> None:
    every_agent(fake_home)
    fake_home.write_config('retention = "30d"\ntrash = "7d"\n')
    code, report, err = cli_json(fake_home, "prune")
    assert code == 0, err
    trashed = len(report["removed"])
    if not trashed:
        raise AssertionError("SETUP INVALID: nothing went to the trash")

    found = groups(fake_home)

    trash = found["trash"]
    assert trash["sessions"] == trashed
    assert trash["disk_bytes"] == du_bytes(str(fake_home.state / "trash"))
    assert trash["reclaimable_bytes"] == 0  # nothing has expired
    assert found["agentkeep-state"]["disk_bytes"] > 0
    text = fake_home.cli("du", "--by", "kind", check=True).stdout
    assert text.splitlines()[0].split() == ["KIND", "DISK", "SESSIONS", "RECLAIMABLE"]
    assert "the trash holds" not in text  # the trash is a line of the table
