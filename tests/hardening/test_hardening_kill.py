"""SIGKILL in the middle of a prune of 200 sessions, at a different point for
each of 20 seeds, then a restart (issue #7).

One tree of 200 small Claude sessions is built once: old idle sessions (some
of them forks of each other), recent ones, live ones (a real process whose
command line names the id), held ones (a real `flock -s` on the lease file,
started per copy), pinned ones (`agentkeep pin`), and old ancestors of recent,
live, held and pinned sessions. Each seed prunes its own copy with the real
CLI and a seam that SIGKILLs the process at a seeded point: at a lease, in the
removal walk, in the journal write, in a trash write, or after the removal and
before its journal entry is done. Two more copies are pruned by a real
`agentkeep serve` that is SIGKILLed, with the process its scheduled prune
runs in, at a random moment while that prune removes. After each kill, and
again after the restart (`agentkeep prune`, or the daemon again), every
invariant is checked:

- nothing live, held, pinned, recent or an ancestor changed, byte for byte;
- before the restart, an old idle session is whole, gone, or half removed with
  its journal entry (and at most one is half removed);
- after the restart, every old idle session is gone, the journal is empty,
  and a half-removed session that went to the trash comes back whole.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from hardening_util import (
    Processes,
    clone_home,
    discard_home,
    events_named,
    fast_root,
    gone,
    kept_reasons,
    moved,
    pending_journal,
    processes,
    report_of,
    run_cli,
    wait_until,
    whole,
)

from agentkeep import leases
from build_claude import (
    DEBUG_LOG,
    FILE_HISTORY,
    SESSION_DIR,
    SESSION_ENV,
    TMP,
    TODOS,
    TRANSCRIPT,
    ClaudeSessionPaths,
    make_session,
)
from fakehome import FakeHome, make_fake_home
from test_daemon_serve import start_daemon, stop_daemons
from trees import paths_state

pytestmark = pytest.mark.slow

# Fixtures used by name: every process and daemon a test starts is killed after it.
__all__ = ["processes", "stop_daemons"]

SESSIONS = 200
# Most sessions leave seven kinds of artifact; every tenth leaves all ten
# (jobs and the live-session registry too). A full session ten times over
# makes the copy and the prune slower without reaching new code.
SMALL = (TRANSCRIPT, SESSION_DIR, FILE_HISTORY, SESSION_ENV, TODOS, DEBUG_LOG, TMP)
CONFIG = 'retention = "30d"\nmax_removals = 1000\ntrash = "{trash}"\n'

# Set before the CLI runs: on the KILL_ON_SESSION-th session leased, arm the
# chosen kill. Every kill is SIGKILL of the pruning process itself.
KILL_SEAMS = """
import os, signal
import agentkeep.journal as journal
import agentkeep.prune.remove as prune
import agentkeep.rmtree as rmtree
from agentkeep.trash.writing import TrashWriter

MODE = os.environ["KILL_MODE"]
ON = int(os.environ["KILL_ON_SESSION"])
AFTER = int(os.environ["KILL_AFTER"])
count = {"sessions": 0, "steps": 0}

def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)

def step(*_):
    count["steps"] += 1
    if count["steps"] > AFTER:
        die()

def journal_rename(path):
    # The entry is written to its temporary name; die before it is renamed in.
    if path.name.endswith(".json"):
        die()

def after_lease(agent, sid):
    count["sessions"] += 1
    if count["sessions"] != ON:
        return
    if MODE == "lease":
        die()
    elif MODE == "leaf":
        rmtree._before_leaf = step
    elif MODE == "journal":
        journal._write_hook = journal_rename
    elif MODE == "done":
        journal.Journal.end_batch = die  # removed, and not yet marked done
    elif MODE == "trash":
        save = TrashWriter._save
        def saving(self):
            step()  # before the AFTER+1-th save: often just after a rename into the trash
            save(self)
        TrashWriter._save = saving

prune._after_lease = after_lease
"""


@dataclass
class World:
    """The template tree: which sessions must go and which must stay."""

    fh: FakeHome
    idle: list[ClaudeSessionPaths] = field(default_factory=list)
    # Why each protected session stays: live, held, pinned, ancestor, recent.
    protected: dict[str, list[ClaudeSessionPaths]] = field(default_factory=dict)

    def keep(self, why: str, s: ClaudeSessionPaths) -> ClaudeSessionPaths:
        self.protected.setdefault(why, []).append(s)
        return s

    def all_protected(self) -> list[ClaudeSessionPaths]:
        return [s for group in self.protected.values() for s in group]


class Builder:
    def __init__(self, fh: FakeHome, rng: random.Random) -> None:
        self.fh = fh
        self.rng = rng
        self.count = 0

    def make(self, age: float, parent: str | None = None) -> ClaudeSessionPaths:
        self.count += 1
        full = self.count % 10 == 0
        return make_session(
            self.fh,
            cwd=f"/home/user/work/project-{self.count % 17}",
            parent=parent,
            age_days=age,
            kinds=None if full else SMALL,
        )

    def old(self) -> float:
        return self.rng.uniform(31, 120)

    def recent(self) -> float:
        return self.rng.uniform(2, 25)


def build_world(fh: FakeHome) -> World:
    b = Builder(fh, random.Random(7))
    world = World(fh)
    for why in ("live", "held", "pinned"):
        for _ in range(3):
            world.keep(why, b.make(b.old()))
        for _ in range(2):
            # An old session whose fork is live, held or pinned stays too.
            parent = world.keep("ancestor", b.make(b.old() + 130))
            world.keep(why, b.make(b.old(), parent=parent.id))
    for _ in range(8):
        parent = world.keep("ancestor", b.make(b.old()))
        world.keep("recent", b.make(b.recent(), parent=parent.id))
    for _ in range(3):
        grand = world.keep("ancestor", b.make(b.old() + 130))
        parent = world.keep("ancestor", b.make(b.old(), parent=grand.id))
        world.keep("recent", b.make(b.recent(), parent=parent.id))
    while b.count < SESSIONS - 15:
        # Every seventh idle session forks the one before: both go, the fork first.
        parent = world.idle[-1].id if world.idle and b.count % 7 == 0 else None
        world.idle.append(b.make(b.old(), parent=parent))
    while b.count < SESSIONS:
        world.keep("recent", b.make(b.recent()))
    return world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    fh = make_fake_home(fast_root(tmp_path_factory.mktemp("kill")))
    w = build_world(fh)
    fh.write_config(CONFIG.format(trash="7d"))
    for s in w.protected["pinned"]:
        pinned = run_cli(fh, "pin", "claude", s.id)
        assert pinned.returncode == 0, pinned.stderr
    yield w
    discard_home(fh)


@pytest.fixture(scope="module")
def live(world: World) -> Iterator[Processes]:
    """The live sessions' stand-in agents: one per id, for every copy (a
    command line names the id whatever the tree)."""
    procs = Processes()
    for s in world.protected["live"]:
        procs.live(world.fh.environ, s.id)
    yield procs
    procs.kill_all()


@dataclass
class Copy:
    """One seed's copy of the world, with its protected sessions' state."""

    fh: FakeHome
    idle: list[ClaudeSessionPaths]
    protected: dict[str, list[ClaudeSessionPaths]]
    before: dict[str, tuple[int, int, int, str] | None]
    idle_before: dict[str, dict[str, tuple[int, int, int, str] | None]]

    def all_protected(self) -> list[ClaudeSessionPaths]:
        return [s for group in self.protected.values() for s in group]

    def protected_paths(self) -> list[Path]:
        return [p for s in self.all_protected() for p in s.all_paths()]


def relocate(s: ClaudeSessionPaths, src: FakeHome, dst: FakeHome) -> ClaudeSessionPaths:
    return ClaudeSessionPaths(
        id=s.id,
        key=s.key,
        cwd=s.cwd,
        layout=s.layout,
        mtime=s.mtime,
        artifacts={k: [moved(p, src, dst) for p in v] for k, v in s.artifacts.items()},
        files=[moved(p, src, dst) for p in s.files],
        dirs=[moved(p, src, dst) for p in s.dirs],
    )


def copy_world(world: World, root: Path, trash: str, processes: Processes) -> Copy:
    fh = clone_home(world.fh, root)
    fh.write_config(CONFIG.format(trash=trash), seen=True)
    idle = [relocate(s, world.fh, fh) for s in world.idle]
    protected = {
        why: [relocate(s, world.fh, fh) for s in group] for why, group in world.protected.items()
    }
    for s in protected["held"]:
        processes.hold(fh.environ, leases.lease_path(fh.state, "claude", s.id))
    copy = Copy(fh, idle, protected, {}, {})
    copy.before = paths_state(copy.protected_paths())
    copy.idle_before = {s.id: paths_state(s.all_paths()) for s in idle}
    assert len(idle) + len(copy.all_protected()) == SESSIONS
    return copy


def check_after_kill(copy: Copy, label: str) -> list[ClaudeSessionPaths]:
    """The invariants right after the kill; the half-removed sessions."""
    assert paths_state(copy.protected_paths()) == copy.before, (
        f"{label}: a protected session changed"
    )
    journal = pending_journal(copy.fh)
    half = [s for s in copy.idle if not whole(s) and not gone(s)]
    for s in half:
        assert s.id in journal, f"{label}: {s.id} is half removed without its journal entry"
        assert not s.transcript.exists(), f"{label}: {s.id} lost something before its transcript"
    assert len(half) <= 1, f"{label}: {len(half)} sessions half removed at once"
    return half


def check_after_restart(
    copy: Copy, label: str, half: list[ClaudeSessionPaths], trash: str
) -> set[str]:
    """The invariants after the restarted prune; the ids put back from the
    trash: each half-removed session and any of its ancestors the restarted
    prune trashed meanwhile (restore brings those back too)."""
    assert paths_state(copy.protected_paths()) == copy.before, (
        f"{label}: a protected session changed"
    )
    left = [s.id for s in copy.idle if not gone(s)]
    assert left == [], f"{label}: old idle sessions left after the restart: {left}"
    assert pending_journal(copy.fh) == set(), f"{label}: journal entries left"
    back: set[str] = set()
    if trash != "0":
        for s in half:
            restored = run_cli(copy.fh, "restore", "claude", s.id, "--json")
            assert restored.returncode == 0, f"{label}: {restored.stderr}"
            assert paths_state(s.all_paths()) == copy.idle_before[s.id], (
                f"{label}: {s.id}, killed half way into the trash, did not come back whole"
            )
            back |= {e["id"] for e in json.loads(restored.stdout)["restored"]}
    return back


def check_reasons(copy: Copy, doc: dict[str, Any], label: str) -> None:
    """The restart's report keeps each old protected session for its reason."""
    reasons = kept_reasons(doc)
    for why in ("live", "held", "pinned", "ancestor"):
        for s in copy.protected[why]:
            assert reasons.get(s.id) == why, f"{label}: {s.id} kept as {reasons.get(s.id)}"


@dataclass(frozen=True)
class Kill:
    seed: int
    mode: str
    trash: str
    on_session: int
    after: int


# Where each seed dies (its removal walk most often), and whether it uses the trash.
MODES = ("leaf", "journal", "leaf", "trash", "done", "leaf", "lease", "leaf", "trash", "done")


def plan(seed: int) -> Kill:
    rng = random.Random(seed)
    mode = MODES[seed % len(MODES)]
    trash = "7d" if mode == "trash" or seed % 2 == 0 else "0"
    after = {"leaf": rng.randint(0, 30), "trash": rng.randint(0, 8)}.get(mode, 0)
    return Kill(seed, mode, trash, rng.randint(1, 120), after)


@pytest.mark.parametrize("seeds", [range(0, 10), range(10, 20)], ids=["seeds0-9", "seeds10-19"])
def test_sigkill_at_a_seeded_point_then_a_restart_finishes(
    world: World, live: Processes, processes: Processes, tmp_path: Path, seeds: range
) -> None:
    half_seen = 0
    for seed in seeds:
        kill = plan(seed)
        label = f"seed {seed} ({kill})"
        copy = copy_world(world, fast_root(tmp_path), kill.trash, processes)
        try:
            env = {
                "KILL_MODE": kill.mode,
                "KILL_ON_SESSION": str(kill.on_session),
                "KILL_AFTER": str(kill.after),
            }
            proc = run_cli(copy.fh, "prune", "--json", seams=KILL_SEAMS, env=env)
            if proc.returncode != -signal.SIGKILL:
                pytest.fail(f"SETUP INVALID: {label} was not killed:\n{proc.stderr}")
            half = check_after_kill(copy, label)
            half_seen += len(half)

            again = run_cli(copy.fh, "prune", "--json")
            assert again.returncode == 0, f"{label}: {again.stderr}"
            doc = report_of(again)
            assert doc["failed"] == [], label
            check_reasons(copy, doc, label)
            check_after_restart(copy, label, half, kill.trash)
        finally:
            processes.kill_all()
            discard_home(copy.fh)
    if half_seen == 0:
        pytest.fail("SETUP INVALID: no seed left a session half removed")


# -- the real daemon, killed at a random moment --------------------------------------------


def removals_logged(log: Path) -> int:
    return len(events_named(log, "removed"))


@pytest.mark.parametrize("seed", [100, 101])
def test_the_daemon_sigkilled_while_pruning_then_restarted(
    world: World, live: Processes, processes: Processes, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    trash = "7d" if seed % 2 == 0 else "0"
    label = f"daemon seed {seed}"
    copy = copy_world(world, fast_root(tmp_path), trash, processes)
    fast = {"AGENTKEEP_FIRST_PRUNE_DELAY": "0.5"}
    try:
        daemon = start_daemon(copy.fh, extra=fast)
        target = rng.randint(3, len(copy.idle) // 2)
        wait_until(lambda: removals_logged(daemon.log) >= target, f"{target} removals", 60)
        # Not a wait for anything: a seeded few milliseconds more of removing,
        # so the kill lands at a different point of the walk each time.
        time.sleep(rng.uniform(0, 0.05))
        # The daemon prunes in a process of its own: both are killed at once,
        # as systemd kills every process of the unit.
        pruning = psutil.Process(daemon.proc.pid).children()
        if not pruning:
            pytest.fail(f"SETUP INVALID: {label}: no prune process to kill")
        for proc in [*pruning, psutil.Process(daemon.proc.pid)]:
            proc.send_signal(signal.SIGKILL)
        assert daemon.proc.wait(10) == -signal.SIGKILL
        psutil.wait_procs(pruning, timeout=10)
        if events_named(daemon.log, "scheduled prune done"):
            pytest.fail(f"SETUP INVALID: {label}: the prune finished before the kill")
        half = check_after_kill(copy, label)

        again = start_daemon(copy.fh, extra=fast, name="restarted")
        again.wait(
            lambda: events_named(again.log, "scheduled prune done"), 60, "the restarted prune"
        )
        assert again.proc.poll() is None, again.stderr()
        assert [e for e in events_named(again.log, "scheduled prune done") if e["failed"]] == []
        restored = check_after_restart(copy, label, half, trash)
        # The index the killed daemon left behind does not outlive the restart.
        # (A half-removed session that went to the trash was restored just
        # now, with any ancestor of it the restarted prune had trashed.)
        listed = {row["id"] for row in again.call("ls", {"agent": "claude"})}
        assert listed == {s.id for s in copy.all_protected()} | restored
        assert again.stop() == 0, again.stderr()
    finally:
        processes.kill_all()
        discard_home(copy.fh)
