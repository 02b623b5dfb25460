"""Agents' SQLite databases: read without changing them, write only when alone.

Scans open a database read-only (`mode=ro`, `query_only`), which never
creates nor writes it (SQLite may create `-wal` and `-shm`, the exception the
contract allows). agentkeep only deletes one session's rows (and puts them
back on restore) and compacts, each only while no other process has the
database open (an agent writing it meanwhile could resurrect or corrupt it).
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
# unreadable (its sessions undated: kept).
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


@contextmanager
def reading_to_remove(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """reading(), for a removal: a database we cannot read may hold the
    session's rows, so any sqlite3.Error refuses it (RemovalError)."""
    try:
        with reading(path) as conn:
            yield conn
    except sqlite3.Error as exc:
        raise RemovalError(f"cannot read {os.fspath(path)}: {exc}") from exc


def ensure_readable(databases: Iterable[Path]) -> None:
    """Raises RemovalError unless every one of `databases` can be read."""
    for db in databases:
        with reading_to_remove(db):
            pass


def writing(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-write connection in autocommit mode; never creates the database."""
    return sqlite3.connect(
        _uri(path, "rw"), uri=True, timeout=WRITE_TIMEOUT_S, isolation_level=None
    )


def among(sql: str, column: str, ids: Iterable[str] | None) -> tuple[str, tuple[str, ...]]:
    """`sql` (a SELECT without WHERE) and its parameters, kept to the rows
    whose `column` is one of `ids` when given (as one JSON array)."""
    if ids is None:
        return sql, ()
    return f"{sql} WHERE {column} IN (SELECT value FROM json_each(?))", (json.dumps(sorted(ids)),)


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The columns of `table` (one of the adapters' own names); empty when
    it does not exist (agents add tables over versions: normal)."""
    return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}


def column_time(value: object) -> float | None:
    """A time column (a number, text holding one, or RFC 3339 text) as
    POSIX seconds; None (undated: kept) when it cannot be read."""
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
    -wal/-shm) open, or when that cannot be checked. Callers check before
    removing anything, so a refused removal leaves the session whole."""
    if procs.failed:
        raise RemovalError(procs.failed)
    for db in databases:
        for suffix in _SIDE_FILES:
            hits = procs.holding_open(os.fspath(db) + suffix)
            if hits:
                raise RemovalError(f"database {db} in use by pid {hits[0][0]}")


@dataclass(frozen=True)
class TableRows:
    """Some rows of one table as they were (what the trash keeps); `columns`
    name the values of each row, in order."""

    db: str
    table: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@contextmanager
def _transaction(db: Path, begin: str) -> Iterator[sqlite3.Connection]:
    """A write connection inside `begin`, which the caller ends; rolled back
    when anything raises, a sqlite3.Error raised as RemovalError."""
    try:
        conn = writing(db)
    except sqlite3.Error as exc:
        raise RemovalError(f"{db}: {exc}") from exc
    try:
        conn.execute(begin)
        yield conn
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


# (table, key column, value): the rows of `table` whose `column` is `value`.
Deletion = tuple[str, str, str]
Keep = Callable[[TableRows], None]


def _select(conn: sqlite3.Connection, db: Path, deletion: Deletion) -> TableRows:
    table, column, value = deletion
    cursor = conn.execute(f'SELECT * FROM "{table}" WHERE "{column}" = ?', (value,))
    names = tuple(d[0] for d in cursor.description)
    return TableRows(os.fspath(db), table, names, tuple(cursor.fetchall()))


def read_rows(db: Path, deletions: Sequence[Deletion]) -> list[TableRows]:
    """The rows `deletions` name, read-only (tables and columns missing in
    this version have none). Raises RemovalError when it cannot be read."""
    try:
        with reading(db) as conn:
            return [_select(conn, db, d) for d in deletions if d[1] in columns(conn, d[0])]
    except sqlite3.Error as exc:
        raise RemovalError(f"{db}: {exc}") from exc


def delete_rows(db: Path, deletions: Sequence[Deletion], keep: Keep | None = None) -> None:
    """Delete rows in one transaction, in the order given (a table or column
    missing in this version has none). `keep` is handed each table's rows
    before they are deleted (the trash saves them); when it raises, nothing
    is deleted. Raises RemovalError and changes nothing when any step fails."""
    with _transaction(db, "BEGIN IMMEDIATE") as conn:
        for deletion in deletions:
            table, column, value = deletion
            if column not in columns(conn, table):
                continue
            if keep is not None and (rows := _select(conn, db, deletion)).rows:
                keep(rows)
            conn.execute(f'DELETE FROM "{table}" WHERE "{column}" = ?', (value,))
        conn.execute("COMMIT")
    log.info("rows deleted", db=os.fspath(db), tables=[d[0] for d in deletions])


def _key_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """The table's primary key columns in order; every column when it has none."""
    info = list(conn.execute(f'PRAGMA table_info("{table}")'))
    keyed = sorted((row[5], row[1]) for row in info if row[5])
    return [name for _, name in keyed] or [row[1] for row in info]


def _write_back(conn: sqlite3.Connection, saved: TableRows, *, act: bool) -> list[str]:
    """Check (with `act`, insert) one table's saved rows; the conflicts. A row
    there already, the same in every column, is skipped (a half removal)."""
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
    """Put rows a removal took back into `db` in one transaction (with `act`
    False only check). Returns the conflicts: with any, nothing is written.
    Raises RemovalError when the database cannot be opened or written."""
    if not is_database_file(db):
        return [f"{db}: the database is gone (nothing to put its rows back into)"]
    with _transaction(db, "BEGIN IMMEDIATE" if act else "BEGIN") as conn:
        conflicts = [c for rows in saved for c in _write_back(conn, rows, act=act)]
        if conflicts or not act:
            conn.execute("ROLLBACK")
            return conflicts
        conn.execute("COMMIT")
    log.info("rows put back", db=os.fspath(db), tables=sorted({r.table for r in saved}))
    return []
