"""`ls` decides a state only for the sessions something names, and gives
exactly what looking at every session one by one gives (the slow path:
_holders() for each session, as `show` does).

One fake user has every state from every kind of evidence: a command line
naming an id (in either case), a Claude registry file of a live process, a
flock on a lease, a pin, a lease file nobody holds, a Codex rollout a
process has open, zero's own lease.lock held, a store directory named on a
command line; then opencode's database held open by a process, and a
process that cannot be read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentkeep import leases
from agentkeep.core.context import Context, parse_age
from agentkeep.core.indexing import scan
from agentkeep.core.reclaim import reclaimable
from agentkeep.core.sessions import ls_text, session_json
from agentkeep.jsontext import unfolded
from agentkeep.model import State
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable
from agentkeep.prune import evidence
from agentkeep.prune.evidence import Watch
from agentkeep.statefiles import Pins
from build_agents import make_store_session, make_zero_session, zero_root
from build_claude import make_session, write_registry
from build_codex import build_codex
from build_opencode import build_opencode
from fakehome import FakeHome, kill_group, make_fake_home
from waiting import wait_until

SLEEP = "import sys, time; time.sleep(120)"
HOLD_OPEN = "import sys, time; f = open(sys.argv[1]); time.sleep(120)"
STORE = "issue-stores"


def listed(ctx: Context, agent: str | None = None, idle_over: str | None = None) -> Any:
    """`ls` as its JSON reads."""
    return json.loads(ls_text(ctx, agent, idle_over).text)


def slow_ls(
    ctx: Context, agent: str | None = None, idle_over: str | None = None
) -> list[dict[str, Any]]:
    """`ls` as it was: every session's holders looked at, one by one."""
    rows = ctx.index.sessions(agent)
    if idle_over is not None:
        cutoff = time.time() - parse_age(idle_over, "--idle-over")
        rows = [r for r in rows if r.last_activity is not None and r.last_activity < cutoff]
    return [
        session_json(r, state)
        for r, state in zip(rows, slow_states(ctx.watch(), ctx, rows), strict=True)
    ]


def slow_states(watch: Watch, ctx: Context, rows: list[Any]) -> list[State]:
    """Each session's state as `show` decides it: the whole rule, asked of
    each session with every one of its artifacts."""
    arts = ctx.index.all_artifacts()
    return [
        evidence.state(watch.evidence(), evidence.indexed(r, arts.get((r.agent, r.id), [])))
        for r in rows
    ]


def slow_reclaimable(ctx: Context, retention: float) -> set[tuple[str, str]]:
    """reclaimable() as it was: the holders of every old session looked at."""
    cutoff = time.time() - retention
    rows = ctx.index.sessions()
    by_key = {(r.agent, r.id): r for r in rows}
    go = set()
    for r, state in zip(rows, slow_states(ctx.watch(), ctx, rows), strict=True):
        old = r.last_activity is not None and r.last_activity < cutoff
        if old and not r.unsafe and state is State.IDLE:
            go.add((r.agent, r.id))
    for agent, sid in set(by_key) - go:
        parent = by_key[(agent, sid)].parent
        while parent and (agent, parent) in by_key:
            go.discard((agent, parent))
            parent = by_key[(agent, parent)].parent
    return go


@dataclass
class Home:
    fh: FakeHome
    ctx: Context
    expected: dict[tuple[str, str], str]  # what the slow path must say (else SETUP INVALID)
    opencode_db: Path
    start: Any


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    fh = make_fake_home(tmp_path_factory.mktemp("states"))
    store_root = fh.home / "stores" / "issues"
    fh.write_config(f'[[stores]]\nname = "{STORE}"\nroot = "{store_root}"\ndepth = 2\n')
    procs: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(list(argv), env=fh.environ, start_new_session=True)
        procs.append(proc)
        return proc

    saved = dict(os.environ)
    os.environ.update(fh.environ)
    try:
        claude = {k: make_session(fh, age_days=d, full=False) for k, d in CLAUDE_AGES.items()}
        # Written by Python, not SQLite: a workspace that is not ASCII.
        claude["unicode"] = make_session(fh, cwd="/home/u/projét ☃", age_days=26, full=False)
        claude["unicode-live"] = make_session(fh, cwd="/home/u/ü\u2028", age_days=24, full=False)
        codex = build_codex(fh)
        idle_codex, open_codex = codex.full_session(), codex.full_session()
        rollout = next(codex.root.rglob(f"rollout-*{open_codex}.jsonl"))
        oc = build_opencode(fh)
        oc.create_db()
        opencode_ids = [oc.full_session(), oc.full_session()]
        zroot = zero_root(fh.data)
        make_zero_session(zroot, "z-idle", days=40)
        held_zero = make_zero_session(zroot, "z-held", days=40)
        make_store_session(store_root, "r/idle", days=40)
        named_store = make_store_session(store_root, "r/named", days=40)

        start(sys.executable, "-c", SLEEP, f"--resume={claude['live'].id}")
        start(sys.executable, "-c", SLEEP, claude["upper"].id.upper())
        start(sys.executable, "-c", SLEEP, claude["unicode-live"].id)
        anonymous = start(sys.executable, "-c", SLEEP)
        start(sys.executable, "-c", HOLD_OPEN, str(rollout))
        start(sys.executable, "-c", SLEEP, f"--dir={named_store / 'work'}")
        lease = leases.lease_path(fh.state, "claude", claude["held"].id)
        lease.parent.mkdir(parents=True, mode=0o700)
        lease.touch()
        leases.lease_path(fh.state, "claude", claude["stale-lease"].id).touch()
        leases.lease_path(fh.state, "claude", "not-a-session").touch()
        for path in (lease, held_zero.dir / "lease.lock"):
            start("sh", "-c", 'exec 9<"$0"; flock -s 9 && exec sleep 120', str(path))
            wait_until(lambda p=path: leases.is_held(p), f"the flock on {path}")
        wait_until(lambda: ProcessTable.snapshot().holding_open(str(rollout)), "the open rollout")
        wait_until(lambda: ProcessTable.snapshot().naming(claude["upper"].id), "the naming")
        write_registry(fh, anonymous.pid, claude["registry"].id)
        Pins(fh.state).set("claude", claude["pinned"].id, True)
        ctx = Context.open(Env.from_environ())
        scan(ctx)

        expected = {("claude", s.id): CLAUDE_STATES[k] for k, s in claude.items()}
        expected |= {("codex", idle_codex): "idle", ("codex", open_codex): "live"}
        expected |= {("opencode", sid): "idle" for sid in opencode_ids}
        expected |= {("zero", "z-idle"): "idle", ("zero", "z-held"): "held"}
        expected |= {(STORE, "r/idle"): "idle", (STORE, "r/named"): "live"}
        yield Home(fh, ctx, expected, oc.db, start)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        for proc in procs:
            kill_group(proc)
        subprocess.run(["rm", "-rf", fh.environ["XDG_RUNTIME_DIR"]], check=False)


CLAUDE_AGES = {
    "idle": 40,
    "live": 38,
    "upper": 36,
    "registry": 34,
    "held": 32,
    "pinned": 30,
    "stale-lease": 28,
}
CLAUDE_STATES = {
    "idle": "idle",
    "live": "live",
    "upper": "live",
    "registry": "live",
    "held": "held",
    "pinned": "pinned",
    "stale-lease": "idle",
    "unicode": "idle",
    "unicode-live": "live",
}


def states(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    return {(r["agent"], r["id"]): r["state"] for r in rows}


def test_ls_gives_what_looking_at_every_session_gives(home: Home) -> None:
    slow = slow_ls(home.ctx)
    if states(slow) != home.expected:
        pytest.fail(f"SETUP INVALID: the slow path says {states(slow)}")

    assert listed(home.ctx) == slow
    assert unfolded(ls_text(home.ctx).text) == json.dumps(slow, indent=2)
    for agent in ("claude", "codex", "opencode", "zero", STORE):
        assert listed(home.ctx, agent) == slow_ls(home.ctx, agent)
    assert listed(home.ctx, idle_over="33d") == slow_ls(home.ctx, idle_over="33d")


def test_reclaimable_gives_what_looking_at_every_session_gives(home: Home) -> None:
    retention = 30 * 86400.0
    cutoff = time.time() - retention
    slow = slow_reclaimable(home.ctx, retention)
    in_use = {k for k, state in home.expected.items() if state != "idle"}
    old = {
        (r.agent, r.id)
        for r in home.ctx.index.sessions()
        if r.last_activity is not None and r.last_activity < cutoff
    }
    if not slow or not old & in_use or slow & in_use:
        pytest.fail(f"SETUP INVALID: the slow path reclaims {slow} of {old}")

    assert reclaimable(home.ctx, retention) == slow
    # Given the states an ls just listed (text ls does), whole or in part,
    # it decides the same without looking at any of them again.
    listed = json.loads(ls_text(home.ctx).text)
    known = {(r["agent"], r["id"]): r["state"] for r in listed}
    assert reclaimable(home.ctx, retention, known) == slow
    some = {key: state for key, state in known.items() if key[0] == "claude"}
    assert some and reclaimable(home.ctx, retention, some) == slow
    # What it is told counts: a session said to be held stays.
    parents = {(r.agent, r.id): r.parent for r in home.ctx.index.sessions()}
    told = next(key for key in sorted(slow) if parents[key] is None)
    assert reclaimable(home.ctx, retention, {**known, told: "held"}) == slow - {told}


def test_a_process_holding_the_opencode_database_holds_every_opencode_session(
    home: Home,
) -> None:
    proc = home.start(sys.executable, "-c", HOLD_OPEN, str(home.opencode_db))
    try:
        wait_until(
            lambda: ProcessTable.snapshot().holding_open(str(home.opencode_db)), "the open db"
        )
        slow = slow_ls(home.ctx, "opencode")
        if {r["state"] for r in slow} != {"live"}:
            pytest.fail(f"SETUP INVALID: the slow path says {states(slow)}")

        assert listed(home.ctx, "opencode") == slow
        assert listed(home.ctx) == slow_ls(home.ctx)
    finally:
        kill_group(proc)


def test_a_process_that_cannot_be_read_makes_every_session_live_in_both(home: Home) -> None:
    table = ProcessTable.snapshot()
    table.unreadable.append(os.getpid())  # what the snapshot records for such a process
    ctx = home.ctx
    watch = Watch(ctx.adapters, ctx.state_dir, ctx.pins(), procs=table)
    rows = ctx.index.sessions()
    ids: dict[str, list[str]] = {}
    for r in rows:
        ids.setdefault(r.agent, []).append(r.id)

    slow = dict(zip([(r.agent, r.id) for r in rows], slow_states(watch, ctx, rows), strict=True))
    if set(slow.values()) != {State.LIVE}:
        pytest.fail(f"SETUP INVALID: the slow path says {slow}")

    seen = evidence.survey(watch, ctx.index, ids)
    assert {r.key: evidence.state(seen, r) for r in map(evidence.indexed, rows)} == slow


@pytest.mark.parametrize(
    "sid",
    [
        "plain-id",
        "r/nested",
        "with space and ü",
        ".",
        "100%",
        "x" * 150 + "/" * 30,  # encoded past 200 characters: cut, with a digest
    ],
)
def test_lease_files_are_found_by_name_as_encode_id_finds_them(
    fake_home: FakeHome, sid: str
) -> None:
    ids = [sid, "other", sid + "x", "%2E" if sid == "." else "plain"]
    files = {f"{leases.encode_id(sid)}.lock", "unrelated.lock", "%41.lock", "notalock"}
    (fake_home.root / "leases" / "agent").mkdir(parents=True)
    for name in files:
        (fake_home.root / "leases" / "agent" / name).touch()

    named = evidence._lease_named(fake_home.root, "agent")
    found = {i for i in ids if named is not None and named(i)}

    assert found == {i for i in ids if f"{leases.encode_id(i)}.lock" in files} == {sid}


def test_holding_open_finds_a_file_by_any_path_to_it(fake_home: FakeHome) -> None:
    real = fake_home.root / "real"
    real.mkdir()
    target = real / "rollout.jsonl"
    target.write_text("{}\n")
    (fake_home.root / "via").symlink_to(real)
    (real / "alias.jsonl").symlink_to(target)
    proc = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, str(target)], env=fake_home.environ)
    try:
        procs = wait_until(
            lambda: (t := ProcessTable.snapshot()).holding_open(str(target)) and t, "the open file"
        )
        for path in (target, fake_home.root / "via" / "rollout.jsonl", real / "alias.jsonl"):
            assert [pid for pid, _ in procs.holding_open(str(path))] == [proc.pid], path
        assert procs.holding_open(str(real / "other.jsonl")) == []
    finally:
        proc.kill()
        proc.wait(timeout=10)
