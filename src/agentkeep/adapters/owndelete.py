"""An agent's own delete command, run for one session (`codex delete
--force`, `opencode session delete`): preferred where installed, since the
agent knows its layout best, but not transactional and without a trash.
Once the adapter has made every check (nothing has changed yet):

1. The rows it takes are kept in the trash first: killed after it ran,
   nothing it took is lost. Rows only some versions take (`may_take`) are
   read first and those it took kept once it ran (kept first, those it
   left would be kept twice by step 6).
2. The files that go before it (`first`) go: those it would unlink, and
   those only the rows it takes connect to the session.
3. It runs (a dry run reports it and runs nothing).
4. The session is listed again: what it did is what is gone, reported.
5. When it failed and the record the agent lists the session by is still
   there, the removal fails (RemovalError).
6. What it left is finished by the adapter's own removal, but rows of the
   tables it takes: those it left are its own, reported residual.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from agentkeep.adapters import rows, sqlite
from agentkeep.adapters.base import Remover
from agentkeep.adapters.sqlite import TableRows
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
    takes: Callable[[str], bool]  # the tables whose rows it deletes
    keys: rows.Keys  # their columns naming the session
    listed_by: str  # the table of the record the agent lists the session by
    first: Callable[[Artifact], bool]
    # True: what it took is reported table by table (`<db>#<table>`); False:
    # as the command, since it edits files agentkeep does not list.
    names_rows: bool
    timeout: float
    # The tables whose rows only some versions of it delete (step 1).
    may_take: Callable[[str], bool] = lambda table: False

    @property
    def shown(self) -> str:
        """The command as reported: `codex delete --force <id>`."""
        return " ".join([self.name.split()[0], *self.argv[1:]])


# The adapter's removal without the command, leaving the rows of the tables
# `theirs` (its third argument) names: report_left() reports those.
Finish = Callable[[Session, Remover, Callable[[str], bool]], None]
# The session listed again from the disk; None when nothing of it is left.
Relist = Callable[[], Session | None]


def report_left(session: Session, remover: Remover, theirs: Callable[[str], bool]) -> None:
    """Report as residual its rows behind a link, those of `theirs` tables
    the command left (none in a dry run: it did not run), and its residual."""
    for a in session.artifacts:
        if rows.is_row(a) and (a.linked or (theirs(rows.table_of(a)) and not remover.dry_run)):
            remover.residual(a.path)
    for path in session.residual:
        remover.residual(path)


def remove_with(
    command: OwnDelete, session: Session, remover: Remover, env: Env, relist: Relist, finish: Finish
) -> None:
    """The steps of the module's docstring."""
    taken = [a for a in rows.ours(session.artifacts) if command.takes(rows.table_of(a))]
    rows.keep(session.id, taken, command.keys, remover)
    finish(_part(session, command.first, residual=False), remover, lambda table: True)
    rest = _part(session, lambda a: not command.first(a), residual=True)
    if remover.dry_run:
        remover.removed_at_once(command.shown)
        finish(rest, remover, command.takes)
        return
    maybe = [a for a in rows.ours(session.artifacts) if command.may_take(rows.table_of(a))]
    before = _read(session.id, maybe, command.keys)
    ran = run(env, command.argv, command.timeout)
    _keep_taken(session.id, before, remover)
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
    took = [a.path for a in rows.ours(before.artifacts) if a.path not in there]
    if command.names_rows:
        for path in took:
            remover.removed_at_once(path)
    lost = [a for a in before.artifacts if not rows.is_row(a) and a.path not in there]
    if lost:
        remover.removed_at_once(command.shown)
    elif not command.names_rows and (ran.failure is None or took):
        remover.removed_at_once(command.shown, kept=True)


def _read(sid: str, artifacts: list[Artifact], keys: rows.Keys) -> list[tuple[str, TableRows]]:
    """The session's rows in the artifacts' tables, each with the column it
    was read by (RemovalError when they cannot be read: it must not run)."""
    return [
        (key, found)
        for a in artifacts
        for key in keys(rows.table_of(a))
        for found in sqlite.read_rows(rows.db_of(a), [(rows.table_of(a), key, sid)])
    ]


def _keep_taken(sid: str, before: list[tuple[str, TableRows]], remover: Remover) -> None:
    """Keep in the trash the rows read before it ran that it took, compared
    on the columns both reads have (it may have migrated the table; with
    the table or column gone, none: it took them all)."""
    for key, then in before:
        try:
            now = sqlite.read_rows(Path(then.db), [(then.table, key, sid)])
        except RemovalError:
            now = []
        found = now[0] if now else TableRows(then.db, then.table, (), ())
        common = [c for c in then.columns if c in found.columns]
        still = {tuple(row[found.columns.index(c)] for c in common) for row in found.rows}
        at = [then.columns.index(c) for c in common]
        taken = tuple(row for row in then.rows if tuple(row[i] for i in at) not in still)
        if taken:
            remover.keep_rows(dataclasses.replace(then, rows=taken))


def _part(session: Session, keep: Callable[[Artifact], bool], *, residual: bool) -> Session:
    """The session with only the artifacts `keep` keeps (and its residual)."""
    return dataclasses.replace(
        session,
        artifacts=[a for a in session.artifacts if keep(a)],
        residual=session.residual if residual else [],
    )
