"""Agents' SQLite databases: read without changing them, write only when alone.

Scans open a database read-only (`mode=ro`, `query_only`), which never
creates the database and never writes it; SQLite may create the `-wal` and
`-shm` files beside it, the one exception the contract allows. The only
writes agentkeep ever makes are deleting one session's rows (putting them
back on restore), and giving the free pages that leaves back (compaction),
each only after checking that no other process has the database open (an
agent writing it at the same time could resurrect or corrupt what we delete).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep.adapters.times import parse_agent_time
from agentkeep.errors import RemovalError
from agentkeep.processes import ProcessTable

log = structlog.get_logger("agentkeep.adapters.sqlite")

# How long a read waits for a writer's lock before the database counts as
# unreadable for this scan (its sessions are then undated, i.e. kept).
READ_TIMEOUT_S = 2.0
WRITE_TIMEOUT_S = 5.0
_SIDE_FILES = ("", "-wal", "-shm")


def _uri(path: str | os.PathLike[str], mode: str) -> str:
    return f"file:{urllib.parse.quote(os.fspath(path))}?mode={mode}"


def is_database_file(path: str | os.PathLike[str]) -> bool:
    """A regular file (a FIFO planted under the name would block the open)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@contextmanager
def reading(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """A read-only connection; raises sqlite3.Error when the file is missing,
    not a database, corrupt or locked past READ_TIMEOUT_S."""
    if not is_database_file(path):
        raise sqlite3.OperationalError(f"{os.fspath(path)} is not a regular file")
    conn = sqlite3.connect(_uri(path, "ro"), uri=True, timeout=READ_TIMEOUT_S)
    try:
        conn.execute("PRAGMA query_only = ON")
        # The first real read is where "file is not a database" shows.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        yield conn
    finally:
        conn.close()


def writing(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-write connection in autocommit mode (the caller begins its
    own transactions); never creates the database."""
    return sqlite3.connect(
        _uri(path, "rw"), uri=True, timeout=WRITE_TIMEOUT_S, isolation_level=None
    )


def among(sql: str, column: str, ids: Iterable[str] | None) -> tuple[str, tuple[str, ...]]:
    """`sql` (a SELECT without WHERE) and its parameters, kept to the rows
    whose `column` is one of `ids` when they are given: the ids go as one
    JSON array, however many there are."""
    if ids is None:
        return sql, ()
    return f"{sql} WHERE {column} IN (SELECT value FROM json_each(?))", (json.dumps(sorted(ids)),)


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The columns of `table`; empty when the table does not exist (agents
    add tables over versions: a missing one is normal, never an error).
    `table` is always one of the adapters' own constants."""
    return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}


def column_time(value: object) -> float | None:
    """A time column as POSIX seconds, or None when it cannot be read.

    SQLite hands back whatever the agent stored: a number (seconds or
    milliseconds, told apart by magnitude), text holding such a number, or
    RFC 3339 text; times.parse_agent_time decides each. NULL and anything it
    cannot read give None, which the caller treats as undated (kept).
    """
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            return parse_agent_time(float(value))
        except (ValueError, OverflowError):
            return parse_agent_time(value)
    return parse_agent_time(value)


def ensure_alone(databases: Iterable[Path], procs: ProcessTable) -> None:
    """Raise RemovalError when another process has one of `databases` (or its
    -wal/-shm) open, or when that cannot be checked.

    Callers check every database a removal will write before removing
    anything, so a refused removal leaves the session whole. agentkeep's
    own process is not in the table, so its read connections do not count.
    """
    if procs.failed:
        raise RemovalError(procs.failed)
    for db in databases:
        for suffix in _SIDE_FILES:
            hits = procs.holding_open(os.fspath(db) + suffix)
            if hits:
                raise RemovalError(f"database {db} in use by pid {hits[0][0]}")


@dataclass(frozen=True)
class TableRows:
    """Some rows of one table, as they were: what the trash keeps of a
    session's rows. `columns` name the values of each row, in order."""

    db: str
    table: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


# (table, key column, value): the rows of `table` whose `column` is `value`.
Deletion = tuple[str, str, str]
Keep = Callable[[TableRows], None]


def _select(conn: sqlite3.Connection, db: Path, deletion: Deletion) -> TableRows:
    table, column, value = deletion
    cursor = conn.execute(f'SELECT * FROM "{table}" WHERE "{column}" = ?', (value,))
    names = tuple(d[0] for d in cursor.description)
    return TableRows(os.fspath(db), table, names, tuple(cursor.fetchall()))


def read_rows(db: Path, deletions: Sequence[Deletion]) -> list[TableRows]:
    """The rows `deletions` name, read without changing the database (for
    rows an agent's own command is about to delete). Tables and columns
    missing in this version have none. Raises RemovalError when the database
    cannot be read."""
    try:
        with reading(db) as conn:
            return [_select(conn, db, d) for d in deletions if d[1] in columns(conn, d[0])]
    except sqlite3.Error as exc:
        raise RemovalError(f"{db}: {exc}") from exc


def delete_rows(db: Path, deletions: Sequence[Deletion], keep: Keep | None = None) -> None:
    """Delete rows in one transaction, in the order given: each deletion is
    (table, key column, value). Table and column names are the adapters' own
    constants; a table or column missing in this version has no rows. `keep`
    is handed each table's rows, inside the transaction, before they are
    deleted (the trash saves them); when it raises, nothing is deleted.
    Raises RemovalError and changes nothing when any step fails."""
    try:
        conn = writing(db)
    except sqlite3.Error as exc:
        raise RemovalError(f"{db}: {exc}") from exc
    try:
        conn.execute("BEGIN IMMEDIATE")
        for deletion in deletions:
            table, column, value = deletion
            if column not in columns(conn, table):
                continue
            if keep is not None:
                rows = _select(conn, db, deletion)
                if rows.rows:
                    keep(rows)
            conn.execute(f'DELETE FROM "{table}" WHERE "{column}" = ?', (value,))
        conn.execute("COMMIT")
    except (sqlite3.Error, RemovalError) as exc:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # closing the connection rolls back what is left
        if isinstance(exc, RemovalError):
            raise
        raise RemovalError(f"{db}: {exc}") from exc
    finally:
        conn.close()
    log.info("rows deleted", db=os.fspath(db), tables=[d[0] for d in deletions])


def _key_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """The table's primary key columns, in key order; every column when it
    has none (then a row that is there already is the same row)."""
    info = list(conn.execute(f'PRAGMA table_info("{table}")'))
    keyed = sorted((row[5], row[1]) for row in info if row[5])
    return [name for _, name in keyed] or [row[1] for row in info]


def _write_back(conn: sqlite3.Connection, saved: TableRows, *, act: bool) -> list[str]:
    """Check (and with `act`, insert) the saved rows of one table; the
    conflicts (a table or column gone, a row with the same key that differs).
    A row that is already there, the same in every saved column, is skipped:
    a removal that stopped half way left it."""
    present = columns(conn, saved.table)
    missing = [c for c in saved.columns if c not in present]
    if missing:
        return [f"{saved.db}#{saved.table}: no column {', '.join(missing)} any more"]
    key = [c for c in _key_columns(conn, saved.table) if c in saved.columns]
    if not key:
        return [f"{saved.db}#{saved.table}: its key columns were not saved"]
    where = " AND ".join(f'"{c}" IS ?' for c in key)
    names = ", ".join(f'"{c}"' for c in saved.columns)
    select = f'SELECT {names} FROM "{saved.table}" WHERE {where}'
    insert = f'INSERT INTO "{saved.table}" ({names}) VALUES ({", ".join("?" * len(saved.columns))})'
    at = [saved.columns.index(c) for c in key]
    conflicts: list[str] = []
    for row in saved.rows:
        there = conn.execute(select, [row[i] for i in at]).fetchone()
        if there is None:
            if act:
                conn.execute(insert, row)
        elif tuple(there) != tuple(row):
            shown = ", ".join(f"{c}={row[i]!r}" for c, i in zip(key, at, strict=True))
            conflicts.append(f"{saved.db}#{saved.table} ({shown[:120]})")
    return conflicts


def write_back(db: Path, saved: Sequence[TableRows], *, act: bool) -> list[str]:
    """Put rows a removal took back into `db`, all in one transaction: with
    `act` False only check. Returns the conflicts (a row with the same key
    that differs, a table or column gone): with any, nothing is written.
    Raises RemovalError when the database cannot be opened or written."""
    if not is_database_file(db):
        return [f"{db}: the database is gone (nothing to put its rows back into)"]
    try:
        conn = writing(db)
    except sqlite3.Error as exc:
        raise RemovalError(f"{db}: {exc}") from exc
    try:
        conn.execute("BEGIN IMMEDIATE" if act else "BEGIN")
        conflicts: list[str] = []
        for rows in saved:
            conflicts += _write_back(conn, rows, act=act)
        if conflicts or not act:
            conn.execute("ROLLBACK")
            return conflicts
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # closing the connection rolls back what is left
        raise RemovalError(f"{db}: {exc}") from exc
    finally:
        conn.close()
    log.info("rows put back", db=os.fspath(db), tables=sorted({r.table for r in saved}))
    return []
