"""Removing an opencode session: through `opencode session delete` when
opencode is installed and uses our data dir (1.18 removes every row; 2.x
only its own, #50260; owndelete's steps), then whatever it left; without
it, every row (listing rows first), then the files. The session's tool
outputs go before the part rows that point at them either way. Every row
removed is kept in the trash, and every check comes before the first change,
so a refused removal leaves the session whole.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import structlog

from agentkeep.adapters import owndelete, rows, sqlite
from agentkeep.adapters.base import Remover, remove_files
from agentkeep.adapters.opencode import listing
from agentkeep.adapters.opencode.storage import DB, KIND_TOOL_OUTPUT
from agentkeep.adapters.owndelete import Relist
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact, Session
from agentkeep.paths import Env

log = structlog.get_logger("agentkeep.adapters.opencode")

_COMMAND_TIMEOUT_S = 60.0
_PATHS_TIMEOUT_S = 10.0


def remove(session: Session, remover: Remover, env: Env, data_dir: Path, relist: Relist) -> None:
    """Remove `session` (`relist` lists it again from the disk)."""
    if session.unsafe:
        raise RemovalError(session.unsafe)
    db = data_dir / DB
    _children(db, session.id)  # the database can be read
    finish = functools.partial(_finish, db=db, uid=env.uid)
    binary = owndelete.binary(env, "opencode")
    # A dry run calls no binary: it assumes an installed opencode shares
    # our data dir and reports what a real run would hand to it.
    if binary is not None and not remover.dry_run and not _same_data_dir(env, binary, data_dir):
        binary = None
    if binary is None:
        finish(session, remover, lambda table: False)
        return
    # Checked before the binary runs, so a refusal leaves the session whole.
    rows.ensure_alone(rows.ours(session.artifacts), env.uid)
    _ensure_childless(db, session.id, remover)
    command = owndelete.OwnDelete(
        argv=[binary, "session", "delete", session.id],
        name="opencode session delete",
        takes=lambda table: table in listing.V2_TABLES,
        keys=listing.keys,
        listed_by="session_v2",
        # Before it runs: the part rows it may take are all that connect the
        # session's tool outputs to it (it leaves the files).
        first=lambda a: a.kind == KIND_TOOL_OUTPUT,
        names_rows=True,
        timeout=_COMMAND_TIMEOUT_S,
        # 1.18's takes every row, 2.x's only its own: the rest is ours
        # when it leaves them.
        may_take=lambda table: table not in listing.V2_TABLES,
    )
    owndelete.remove_with(command, session, remover, env, relist, finish)


def _finish(
    session: Session, remover: Remover, theirs: Callable[[str], bool], *, db: Path, uid: int
) -> None:
    """The removal without opencode (owndelete.Finish): rows (listing rows
    first, kept in the trash), the tool outputs before the part rows that
    point at them (nothing else connects them to the session), then files
    (the session file first). Rows of `theirs` tables are opencode's: any it
    left are reported, never written."""
    mine = [a for a in rows.ours(session.artifacts) if not theirs(rows.table_of(a))]
    rows.ensure_alone(mine, uid)
    mine.sort(key=lambda a: listing.order(rows.table_of(a)))
    outputs = [a for a in session.artifacts if a.kind == KIND_TOOL_OUTPUT]
    pointing = [a for a in mine if outputs and rows.table_of(a) == listing.POINTING]
    rows.delete(session.id, [a for a in mine if a not in pointing], listing.keys, remover)
    _remove_outputs(db, session.id, outputs, remover)
    rows.delete(session.id, pointing, listing.keys, remover)
    files = [a for a in session.artifacts if a.kind != KIND_TOOL_OUTPUT and not rows.is_row(a)]
    remove_files(files, remover)
    owndelete.report_left(session, remover, theirs)


def _remove_outputs(db: Path, sid: str, outputs: list[Artifact], remover: Remover) -> None:
    """The session's tool outputs, each unless another session's part rows
    point at it now (a fork made since the listing): it is then that
    session's, and stays. When that cannot be read, they stay and are
    reported."""
    if not outputs:
        return
    try:
        refs: dict[str, set[str]] = {}
        if os.path.lexists(db):
            with sqlite.reading(db) as conn:
                refs = listing.tool_output_refs(conn)
    except sqlite3.Error as exc:
        log.warning("cannot tell who uses tool outputs; left", id=sid, error=str(exc))
        for artifact in outputs:
            remover.residual(artifact.path)
        return
    for artifact in outputs:
        if refs.get(os.path.basename(artifact.path), set()) - {sid}:
            log.info("tool output used by another session; left", path=artifact.path)
        else:
            remove_files([artifact], remover)


def _children(db: Path, sid: str) -> list[str]:
    """The session's child sessions, read before anything changes. A
    database that cannot be read (RemovalError) may hold this session's
    rows: removing the files alone would leave a session opencode lists."""
    if not os.path.lexists(db):
        return []
    with sqlite.reading_to_remove(db) as conn:
        return [
            str(child)
            for table in listing.LISTING_TABLES
            if "parent_id" in sqlite.columns(conn, table)
            for (child,) in conn.execute(f"SELECT id FROM {table} WHERE parent_id = ?", (sid,))
        ]


def _same_data_dir(env: Env, binary: str, data_dir: Path) -> bool:
    """Whether the installed opencode reads our data dir (`opencode debug
    paths` prints `data <dir>`); another one would delete elsewhere."""
    run = owndelete.run(env, [binary, "debug", "paths"], _PATHS_TIMEOUT_S)
    data = None
    for key, _, value in (line.strip().partition(" ") for line in run.stdout.splitlines()):
        data = value.strip() if key == "data" and value.strip() else data
    if run.failure or data is None:
        log.warning("cannot tell opencode's data dir; removing without it", error=run.failure)
        return False
    if os.path.realpath(data) != os.path.realpath(data_dir):
        log.warning(
            "opencode uses another data dir; removing without it", its=data, ours=str(data_dir)
        )
        return False
    return True


def _ensure_childless(db: Path, sid: str, remover: Remover) -> None:
    """`opencode session delete` takes a session's children with it; the
    pruner removes children first, so a child here is one made since the
    session was listed: it must not go unlisted and unkept. (A dry run's
    children, which it would have removed first, are gone.)"""
    children = [c for c in _children(db, sid) if not remover.gone(c)]
    if children:
        raise RemovalError(
            f"has child sessions {', '.join(sorted(set(children)))}, which "
            "opencode session delete would take too"
        )
