"""The database rows an entry keeps (`rows.sqlite`): written durably before
the agent's rows are deleted, read back by restore."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from agentkeep.adapters import sqlite
from agentkeep.adapters.sqlite import TableRows
from agentkeep.trash.entries import ROWS, TrashEntry, TrashError


def add_rows(entry_path: Path, rows: TableRows) -> None:
    """Keep `rows` in the entry at `entry_path`, durably. Raises
    sqlite3.Error or OSError."""
    conn = sqlite3.connect(entry_path / ROWS, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS tables (n INTEGER PRIMARY KEY,"
            " db TEXT NOT NULL, name TEXT NOT NULL, columns TEXT NOT NULL)"
        )
        cols = json.dumps(list(rows.columns))
        found = conn.execute(
            "SELECT n FROM tables WHERE db = ? AND name = ? AND columns = ?",
            (rows.db, rows.table, cols),
        ).fetchone()
        if found is None:
            n = conn.execute(
                "INSERT INTO tables (db, name, columns) VALUES (?, ?, ?)",
                (rows.db, rows.table, cols),
            ).lastrowid
            names = ", ".join(f"c{i}" for i in range(len(rows.columns)))
            conn.execute(f"CREATE TABLE t{n} ({names})")
        else:
            n = found[0]
        marks = ", ".join("?" for _ in rows.columns)
        conn.executemany(f"INSERT INTO t{n} VALUES ({marks})", rows.rows)
        conn.execute("COMMIT")
    finally:
        conn.close()
    os.chmod(entry_path / ROWS, 0o600)


def saved_rows(entry: TrashEntry) -> dict[str, list[TableRows]]:
    """The rows the entry keeps, by database. Raises TrashError when they
    cannot be read (restore then moves nothing)."""
    path = entry.path / ROWS
    if not os.path.lexists(path):
        return {}
    if not sqlite.is_database_file(path):
        raise TrashError(f"{path} is not a regular file")
    out: dict[str, list[TableRows]] = {}
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            listed = conn.execute("SELECT n, db, name, columns FROM tables ORDER BY n").fetchall()
            for n, db, name, cols in listed:
                values = tuple(tuple(r) for r in conn.execute(f"SELECT * FROM t{int(n)}"))
                columns = tuple(json.loads(cols))
                out.setdefault(db, []).append(TableRows(db, name, columns, values))
        finally:
            conn.close()
    except (sqlite3.Error, ValueError, TypeError) as exc:
        raise TrashError(f"{path} cannot be read: {exc}") from exc
    return out
