"""A session's rows in Copilot's `session-store.db`: `sessions` by `id` and
every table with a `session_id` column (read from the schema, so a later
Copilot's too), deleted only while no process has the database open."""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentkeep.adapters import rows, sqlite
from agentkeep.adapters.base import Remover
from agentkeep.adapters.copilot.events import ID
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact

log = structlog.get_logger("agentkeep.adapters.copilot")

STORE = "session-store.db"
SESSIONS, SESSION_ID = "sessions", "session_id"
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The FTS5 shadow tables (`<table>_content` holds the session id as `c1`):
# they go with their virtual table, never on their own.
_SHADOW = ("_data", "_idx", "_content", "_docsize", "_config")


@dataclass
class Rows:
    """A session's rows (database, table, linked) and its `sessions` row's facts."""

    tables: list[tuple[Path, str, bool]] = field(default_factory=list)
    updated: float | None = None
    cwd: str | None = None
    undated: bool = False


def read_rows(db: Path, linked: bool, only: frozenset[str] | None, found: dict[str, Rows]) -> None:
    """Every table of `db` keyed by session, in one read transaction."""
    with sqlite.reading(db) as conn:
        conn.execute("BEGIN")
        for table in _session_tables(conn):
            if table == SESSIONS:
                _read_sessions(conn, db, linked, only, found)
                continue
            sql = f'SELECT DISTINCT {SESSION_ID} FROM "{table}"'
            for (sid,) in conn.execute(*sqlite.among(sql, SESSION_ID, only)):
                if isinstance(sid, str) and ID.fullmatch(sid):
                    found.setdefault(sid, Rows()).tables.append((db, table, linked))


def _read_sessions(
    conn: sqlite3.Connection,
    db: Path,
    linked: bool,
    only: frozenset[str] | None,
    found: dict[str, Rows],
) -> None:
    cols = sqlite.columns(conn, SESSIONS)
    wanted = [c for c in ("updated_at", "cwd") if c in cols]
    sql = f"SELECT {', '.join(['id', *wanted])} FROM {SESSIONS}"
    for row in conn.execute(*sqlite.among(sql, "id", only)):
        record = dict(zip(["id", *wanted], row, strict=True))
        sid = record["id"]
        if not isinstance(sid, str) or not ID.fullmatch(sid):
            log.info("sessions row id is not a session id; skipped", db=str(db), id=repr(sid)[:80])
            continue
        rows = found.setdefault(sid, Rows())
        rows.tables.append((db, SESSIONS, linked))
        updated = sqlite.column_time(record.get("updated_at"))
        if updated is None:
            rows.undated = True
        elif rows.updated is None or updated > rows.updated:
            rows.updated = updated
        cwd = record.get("cwd")
        if isinstance(cwd, str) and os.path.isabs(cwd) and rows.cwd is None:
            rows.cwd = cwd


def _session_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables holding sessions' rows, `sessions` last (the others refer
    to it); never an FTS5 shadow table (its rows go with its virtual table)."""
    tables = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    # SQLite keeps the statement's leading keywords upper case.
    virtual = {name for name, sql in tables if str(sql).startswith("CREATE VIRTUAL")}
    found = []
    for name in sorted(n for n, _ in tables if isinstance(n, str) and _TABLE_NAME.fullmatch(n)):
        if any(name == v + suffix for v in virtual for suffix in _SHADOW):
            continue
        cols = sqlite.columns(conn, name)
        if (name == SESSIONS and "id" in cols) or SESSION_ID in cols:
            found.append(name)
    return sorted(found, key=lambda n: n == SESSIONS)


def row_artifacts(found: Rows, own_time: float | None) -> list[Artifact]:
    """One artifact per table: `sessions` dated by its row, others by `own_time`."""
    return [
        rows.row(db, table, found.updated if table == SESSIONS else own_time, False, linked)
        for db, table, linked in found.tables
    ]


def remove_rows(sid: str, ours: list[Artifact], uid: int, remover: Remover) -> None:
    """Delete the rows only while no process has their database open (every
    running Copilot does); else they stay, reported, for a later run."""
    try:
        rows.ensure_alone(ours, uid)
    except RemovalError as exc:
        log.info("rows left until the database is free", id=sid, reason=str(exc))
        for artifact in ours:
            remover.residual(artifact.path)
        return
    # Rows keyed by the session first, its `sessions` row last, database by database.
    dbs = list(dict.fromkeys(rows.db_of(a) for a in ours))
    ordered = sorted(ours, key=lambda a: (dbs.index(rows.db_of(a)), rows.table_of(a) == SESSIONS))
    rows.delete(sid, ordered, lambda t: ("id",) if t == SESSIONS else (SESSION_ID,), remover)
