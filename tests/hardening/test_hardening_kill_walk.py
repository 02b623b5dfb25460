"""SIGKILL at every step of one session's removal, then a prune run to its end.

One old idle session of an agent whose removal takes many steps (Codex: a
rollout, a TUI reference and rows in six databases, with and without its own
`codex delete`; opencode: the 1.x JSON storage, a session file, a message dir
and the part dir each message names; opencode.db's rows and a tool output
only they point at) is pruned by the real CLI with a seam that SIGKILLs it
at the k-th step of the removal: a leaf of the removal walk, a database
transaction, a write of the trash entry, the agent's own command (before and
after it runs). k walks 1, 2, ... until a prune runs to its end. After each
kill a second prune runs to its end: then nothing of the session may be
left, the journal must be empty and nothing failed (invariants 5 and 9), and
what went to the trash comes back whole.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hardening_util import clone_home, discard_home, fast_root, report_of, run_cli

from agentkeep.journal import Journal
from build_codex import CodexTree, build_codex, install_fake_codex, without
from build_opencode import OpencodeTree, build_opencode
from fakehome import FakeHome, make_fake_home

pytestmark = pytest.mark.slow

DAY = 86400.0
CONFIG = 'retention = "30d"\ntrash = "{trash}"\n'

# Armed once the session's leases are taken: from then on every step counts,
# and the KILL_AT_STEP-th is where the process is SIGKILLed.
STEP_SEAMS = """
import os, signal
import agentkeep.prune.remove as prune
import agentkeep.rmtree as rmtree
from agentkeep.trash.writing import TrashWriter
from agentkeep.adapters import owndelete, sqlite

AT = int(os.environ["KILL_AT_STEP"])
state = {"armed": False, "steps": 0}

def step(*_):
    if state["armed"]:
        state["steps"] += 1
        if state["steps"] == AT:
            os.kill(os.getpid(), signal.SIGKILL)

def counted(owner, name, after=False):
    inner = getattr(owner, name)
    def call(*args, **kwargs):
        step()
        result = inner(*args, **kwargs)
        if after:
            step()
        return result
    setattr(owner, name, call)

rmtree._before_leaf = step
counted(sqlite, "delete_rows")
counted(TrashWriter, "_save")
counted(owndelete, "run", after=True)
prune._after_lease = lambda agent, sid: state.update(armed=True)
"""


@dataclass(frozen=True)
class Case:
    """One session to remove: its agent and id, and what of it is left."""

    agent: str
    sid: str
    left: Callable[[FakeHome], list[str]]


def old(days: float = 60) -> float:
    return time.time() - days * DAY


def rel(fh: FakeHome, paths: Iterable[Path]) -> list[str]:
    """Paths below the fake user's root, so that copies compare."""
    return sorted(str(p.relative_to(fh.root)) for p in paths)


def codex_case(fh: FakeHome, *, own_delete: bool) -> Case:
    tree = build_codex(fh)
    when = old()
    sid = tree.full_session(updated_at=int(when), mtime=when)
    if own_delete:
        install_fake_codex(fh)
    else:
        fh.environ["PATH"] = without(fh, "codex")

    def left(copy: FakeHome) -> list[str]:
        there = CodexTree(copy.codex)
        files = [p for p in copy.codex.rglob(f"*{sid}*")]
        tables = [Path(t) for t in there.naming(sid)]
        return rel(copy, files) + rel(copy, tables)

    return Case("codex", sid, left)


def opencode_json_case(fh: FakeHome) -> Case:
    tree = build_opencode(fh)
    fh.environ["PATH"] = without(fh, "opencode")
    sid = tree.full_session(updated_ms=int(old() * 1000))
    names = opencode_json_names(tree, sid)
    # The 1.x JSON storage alone: no database.
    tree.db.unlink()

    def left(copy: FakeHome) -> list[str]:
        storage = copy.data / "opencode" / "storage"
        return rel(copy, (p for p in storage.rglob("*") if p.name in names))

    return Case("opencode", sid, left)


def opencode_json_names(tree: OpencodeTree, sid: str) -> set[str]:
    """The names of the session's storage entries (its part dirs are named
    by its messages)."""
    messages = tree.storage / "message" / sid
    return {sid, f"{sid}.json", *(m.stem for m in messages.glob("*.json"))}


def opencode_rows_case(fh: FakeHome) -> Case:
    tree = build_opencode(fh)
    fh.environ["PATH"] = without(fh, "opencode")
    sid = "ses_" + "A" * 26
    when = old()
    tree.session_rows(sid, updated_ms=int(when * 1000))
    output = tree.tool_output(sid)
    os.utime(output, (when, when))
    name = output.name

    def left(copy: FakeHome) -> list[str]:
        there = OpencodeTree(copy.data / "opencode")
        rows = [t for t, n in there.row_counts(sid).items() if n]
        outputs = (copy.data / "opencode" / "tool-output").glob(name)
        return rel(copy, outputs) + rows

    return Case("opencode", sid, left)


CASES: dict[str, Callable[[FakeHome], Case]] = {
    "codex": lambda fh: codex_case(fh, own_delete=False),
    "codex-own-delete": lambda fh: codex_case(fh, own_delete=True),
    "opencode-json": opencode_json_case,
    "opencode-rows": opencode_rows_case,
}


@pytest.fixture(params=sorted(CASES))
def template(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[FakeHome, Case]]:
    fh = make_fake_home(fast_root(tmp_path_factory.mktemp("walk")))
    case = CASES[request.param](fh)
    yield fh, case
    discard_home(fh)


def copy_of(template: FakeHome, trash: str, tmp_path: Path) -> FakeHome:
    fh = clone_home(template, fast_root(tmp_path))
    fh.environ["PATH"] = template.environ["PATH"]
    fh.write_config(CONFIG.format(trash=trash), seen=True)
    return fh


@pytest.mark.parametrize("trash", ["7d", "0"])
def test_a_removal_killed_at_any_step_is_finished_by_the_next_prune(
    template: tuple[FakeHome, Case], trash: str, tmp_path: Path
) -> None:
    home, case = template
    before = case.left(home)
    assert before, "SETUP INVALID: the session has nothing to remove"
    for at in itertools.count(1):
        fh = copy_of(home, trash, tmp_path)
        label = f"{case.agent} {case.sid}, trash {trash}, killed at step {at}"
        try:
            killed = run_cli(fh, "prune", "--json", seams=STEP_SEAMS, env={"KILL_AT_STEP": str(at)})
            if killed.returncode == 0:
                if at < 4:
                    pytest.fail(f"SETUP INVALID: the removal took {at - 1} steps")
                assert case.left(fh) == [], f"{label}: a whole prune left part of it"
                return
            assert killed.returncode == -signal.SIGKILL, f"{label}: {killed.stderr}"
            again = run_cli(fh, "prune", "--json")
            doc = report_of(again)
            assert again.returncode == 0 and doc["failed"] == [], f"{label}: {doc['failed']}"
            assert case.left(fh) == [], f"{label}: the next prune left it half removed"
            assert Journal(fh.state).pending() == [], f"{label}: a journal entry is left"
            if trash != "0":
                back = run_cli(fh, "restore", case.agent, case.sid, "--json")
                assert back.returncode == 0, f"{label}: {back.stderr}"
                assert case.left(fh) == before, f"{label}: it did not come back whole"
        finally:
            discard_home(fh)
