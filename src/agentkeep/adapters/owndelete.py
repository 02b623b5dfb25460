"""An agent's own delete command, run for one session: the steps Codex's
`codex delete --force` and opencode's `session delete` share.

An agent knows its own layout best, so its command is preferred where it is
installed; but it is not transactional, keeps nothing and knows no trash.
So, once the adapter has made every check (nothing has changed yet):

1. The rows it will take are read and kept in the trash first: killed
   after it ran, nothing it took is lost.
2. The files that go before it (`first`) go: those it would unlink without
   a trash, and those only the rows it takes point at (nothing would
   connect them to the session afterwards).
3. It runs (a dry run reports it and runs nothing).
4. The session is listed again from the disk: what it did is what is gone.
5. It is reported; when it failed and the session is still listed by the
   record the agent lists it by, the removal fails (RemovalError).
6. What it left is finished by the adapter's own removal, except rows of
   the tables it takes: those it left are its own, reported residual.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from agentkeep.adapters import rows
from agentkeep.adapters.base import Remover
from agentkeep.children import dies_with_us
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact, Session
from agentkeep.paths import Env

log = structlog.get_logger("agentkeep.adapters.owndelete")


@dataclass(frozen=True)
class AgentRun:
    """What an agent's own command printed; `failure` is None when it exited 0."""

    stdout: str
    failure: str | None


def binary(env: Env, name: str) -> str | None:
    """The agent's own command on the caller's PATH (the Env's, not ours)."""
    return shutil.which(name, path=env.get("PATH") or os.defpath)


def run(env: Env, argv: list[str], timeout: float) -> AgentRun:
    """Run an agent's own command in the caller's environment. stdin is
    /dev/null so a confirmation prompt cannot wait forever, and the command
    is killed after `timeout` seconds, or with us (invariant 12: a command
    killed half way leaves a journaled removal the next run finishes)."""
    try:
        proc = subprocess.run(
            argv,
            env=dict(env.environ),
            preexec_fn=dies_with_us(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return AgentRun("", f"timed out after {timeout:g} s")
    except OSError as exc:
        return AgentRun("", str(exc))
    if proc.returncode != 0:
        return AgentRun(proc.stdout, f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return AgentRun(proc.stdout, None)


@dataclass(frozen=True)
class OwnDelete:
    """One agent's delete command for one session."""

    argv: list[str]
    name: str  # in messages: `codex delete`
    shown: str  # in the report: `codex delete --force <id>`
    # The tables whose rows it deletes, and the columns naming the session.
    takes: Callable[[str], bool]
    keys: rows.Keys
    # The table of the record the agent lists the session by.
    listed_by: str
    first: Callable[[Artifact], bool]
    # True: what it took is reported table by table (`<db>#<table>`); False:
    # as `shown`, since it edits files agentkeep does not list (Codex's
    # session_index.jsonl).
    names_rows: bool
    timeout: float


class Finish(Protocol):
    def __call__(self, session: Session, remover: Remover, theirs: Callable[[str], bool]) -> None:
        """The adapter's removal without the command, leaving the rows of
        `theirs` tables (residual, but in a dry run: it did not run)."""


def remove_with(
    command: OwnDelete,
    session: Session,
    remover: Remover,
    env: Env,
    relist: Callable[[], Session | None],
    finish: Finish,
) -> None:
    """The steps of the module's docstring; `relist` lists the session again
    from the disk, `finish` is the adapter's own removal."""
    taken = [a for a in rows.ours(session.artifacts) if command.takes(rows.table_of(a))]
    rows.keep(session.id, taken, command.keys, remover)
    finish(_part(session, command.first, residual=False), remover, lambda table: True)
    rest = _part(session, lambda a: not command.first(a), residual=True)
    if remover.dry_run:
        remover.removed_at_once(command.shown)
        finish(rest, remover, command.takes)
        return
    ran = run(env, command.argv, command.timeout)
    left = relist() or Session(session.agent, session.id)
    _report(command, ran, rest, left, remover)
    listed = {rows.table_of(a) for a in rows.ours(left.artifacts)}
    if ran.failure and command.listed_by in listed:
        raise RemovalError(f"{command.name} failed ({ran.failure}); the session is still listed")
    if ran.failure:
        log.warning(f"{command.name} failed; finishing", id=session.id, error=ran.failure)
    finish(left, remover, command.takes)


def _report(
    command: OwnDelete, ran: AgentRun, before: Session, left: Session, remover: Remover
) -> None:
    """What it took: its tables' rows (kept in the trash at step 1), and any
    file of the session it took, which is gone for good."""
    there = {a.path for a in left.artifacts}
    took = [a.path for a in rows.ours(before.artifacts) if command.takes(rows.table_of(a))]
    took = [path for path in took if path not in there]
    if command.names_rows:
        for path in took:
            remover.removed_at_once(path)
    lost = [a for a in before.artifacts if not rows.is_row(a) and a.path not in there]
    if lost:
        remover.removed_at_once(command.shown)
    elif not command.names_rows and (ran.failure is None or took):
        remover.removed_at_once(command.shown, kept=True)


def _part(session: Session, keep: Callable[[Artifact], bool], *, residual: bool) -> Session:
    """The session with only the artifacts `keep` keeps (and its residual)."""
    return dataclasses.replace(
        session,
        artifacts=[a for a in session.artifacts if keep(a)],
        residual=session.residual if residual else [],
    )
