"""Removing a Codex session: through `codex delete --force` where Codex is
installed, new enough and still lists the session (owndelete's steps), else
directly: the `threads` row first (invariant 5), the files next, every other
row last. Every row goes into the trash either way, and every check comes
before the first change, so a refused removal leaves the session whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from agentkeep.adapters import owndelete, rows, sqlite
from agentkeep.adapters.base import Remover, remove_files
from agentkeep.adapters.codex.listing import (
    SPAWN_CHILD,
    SPAWN_EDGES,
    SPAWN_PARENT,
    STATE_DB,
    THREADS,
    databases,
    edges,
    keys,
)
from agentkeep.adapters.codex.rollouts import KINDS
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact, Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable

log = structlog.get_logger("agentkeep.adapters.codex")

# `codex delete` exists from 0.141 on; an older codex would take "delete" as
# a prompt and start a session, so its version is checked first.
_DELETE_SINCE = (0, 141)
_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_DELETE_TIMEOUT_S = 60.0
_VERSION_TIMEOUT_S = 10.0

Listed = Callable[[frozenset[str]], Iterator[Session]]


def remove(session: Session, remover: Remover, env: Env, root: Path, listed: Listed) -> None:
    """`listed`: the adapter's sessions(), to list the session (and its
    subagent threads) again from the disk."""
    if session.unsafe:
        raise RemovalError(session.unsafe)
    # Checked on every path: a state database we cannot read may hold this
    # session's row, and the look after `codex delete` could not see it either.
    sqlite.ensure_readable(db for db in databases(root) if STATE_DB.fullmatch(db.name))
    binary = owndelete.binary(env, "codex")
    # `codex delete` finds a session by its row or its rollout and fails
    # without both; rows alone are removed here.
    if binary is not None and not any(_listed_by(a) for a in session.artifacts):
        binary = None
    # `codex delete` writes every database of Codex's.
    dbs = set(databases(root)) if binary else {rows.db_of(a) for a in rows.ours(session.artifacts)}
    if dbs:
        sqlite.ensure_alone(dbs, ProcessTable.snapshot(env.uid))
    if binary is not None:
        _ensure_no_subagents(session, remover, root, listed)
    # A dry run calls no binary, not even for its version: it reports what a
    # real run moves and hands to `codex delete`.
    if binary is not None and (remover.dry_run or _can_delete(env, binary)):
        sid = session.id
        relist = lambda: next(listed(frozenset({sid})), None)  # noqa: E731
        owndelete.remove_with(_command(binary, sid), session, remover, env, relist, finish)
    else:
        finish(session, remover, lambda table: False)


def finish(session: Session, remover: Remover, theirs: Callable[[str], bool]) -> None:
    """The `threads` row first, the files (rollouts first), every other row
    (owndelete.Finish: rows of `theirs` tables are left)."""
    mine = [a for a in rows.ours(session.artifacts) if not theirs(rows.table_of(a))]
    threads = [a for a in mine if rows.table_of(a) == THREADS]
    rows.delete(session.id, threads, keys, remover)
    remove_files([a for a in session.artifacts if not rows.is_row(a)], remover)
    rows.delete(session.id, [a for a in mine if a not in threads], keys, remover)
    owndelete.report_left(session, remover, theirs)


def _command(binary: str, sid: str) -> owndelete.OwnDelete:
    # --force: without a terminal Codex refuses to confirm ("cannot confirm
    # session deletion without an interactive terminal"); it takes a UUID.
    return owndelete.OwnDelete(
        argv=[binary, "delete", "--force", sid],
        name="codex delete",
        takes=lambda table: True,
        keys=keys,
        listed_by=THREADS,
        # The rollouts go first, into the trash: Codex 0.169 neither lists
        # nor resumes a thread whose rollout is gone (FIELD-NOTES), and
        # `codex delete` would unlink them.
        first=lambda a: a.kind in KINDS,
        # It rewrites session_index.jsonl too, which agentkeep never edits.
        names_rows=False,
        timeout=_DELETE_TIMEOUT_S,
    )


def _listed_by(artifact: Artifact) -> bool:
    """A record Codex finds a session by: its rollout or its `threads` row."""
    if artifact.linked:
        return False
    return artifact.kind in KINDS or (rows.is_row(artifact) and rows.table_of(artifact) == THREADS)


def _can_delete(env: Env, binary: str) -> bool:
    run = owndelete.run(env, [binary, "--version"], _VERSION_TIMEOUT_S)
    match = _VERSION_RE.search(run.stdout)
    if run.failure or match is None:
        log.warning("cannot tell the codex version; removing without it", error=run.failure)
        return False
    if (int(match[1]), int(match[2])) < _DELETE_SINCE:
        log.info("codex has no delete command; removing without it", version=match[0])
        return False
    return True


def _ensure_no_subagents(session: Session, remover: Remover, root: Path, listed: Listed) -> None:
    """`codex delete` removes the session's subagent threads with it: one
    still on disk would go unlisted, unjournaled and untrashed. agentkeep
    removes descendants first (invariant 3), so this only refuses what
    changed since the plan (a dry run's removed children are gone)."""
    children: set[str] = set()
    for db in databases(root):
        with sqlite.reading_to_remove(db) as conn:
            if {SPAWN_PARENT, SPAWN_CHILD} <= sqlite.columns(conn, SPAWN_EDGES):
                edged = edges(conn, frozenset({session.id}))
                children.update(c for p, c in edged if p == session.id)
    children = {c for c in children if not remover.gone(c)}
    for child in listed(frozenset(children)) if children else ():
        if any(_listed_by(a) for a in child.artifacts):
            raise RemovalError(
                f"subagent thread {child.id} is still present: codex delete would remove it too"
            )
