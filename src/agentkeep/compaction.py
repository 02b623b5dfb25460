"""Giving an agent's database its free pages back once a prune or purge has
removed rows from it (invariant 13): deleted rows only join SQLite's free
list (FIELD-NOTES "Disk that is not in sessions").

- `auto_vacuum = INCREMENTAL` (Codex's): `PRAGMA incremental_vacuum`.
- otherwise (opencode's, Copilot's): VACUUM, which keeps every rowid an
  INTEGER PRIMARY KEY or an index holds and numbers the other tables'
  rows afresh: a table whose rowids are not 1..n already keeps the
  database as it is.

Never while another process has the database open: it waits, owed, in the
state dir, for a later run. Never a change of its settings (auto_vacuum,
journal_mode, page_size, read before and after). Never a copy left behind:
VACUUM's temporary database is unlinked as it is opened; in WAL mode a
TRUNCATE checkpoint empties the -wal. A kill leaves the database as it was
or rebuilt in its -wal; it is still owed, and the next run finishes it.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep.adapters import sqlite as agentdb
from agentkeep.errors import RemovalError
from agentkeep.processes import ProcessTable
from agentkeep.statefiles import StateFileError, read_state, remove, write_json

log = structlog.get_logger("agentkeep.compaction")

OWED = "compaction.json"
_INCREMENTAL = 2
# Test seam, None in production: called with the step ("rebuild",
# "checkpoint") and the connection just before it, so a test can kill the
# process midway.
_before_step: Callable[[str, sqlite3.Connection], None] | None = None


@dataclass(frozen=True)
class Compacted:
    """A database that gave its free pages back: its file's bytes (with
    its -wal) before and after."""

    database: str
    bytes_before: int
    bytes_after: int

    def to_json(self) -> dict[str, object]:
        """Its line in the prune report."""
        return asdict(self)


def free_bytes(db: str | os.PathLike[str]) -> int | None:
    """The bytes of `db`'s free pages, read without changing it; None when
    it cannot be read."""
    try:
        with agentdb.reading(db) as conn:
            return int(_pragma(conn, "freelist_count")) * int(_pragma(conn, "page_size"))
    except sqlite3.Error:
        return None


def _pragma(conn: sqlite3.Connection, name: str) -> Any:
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


def _settings(conn: sqlite3.Connection) -> tuple[int, str, int]:
    """What a compaction must never change."""
    journal = str(_pragma(conn, "journal_mode")).lower()
    return int(_pragma(conn, "auto_vacuum")), journal, int(_pragma(conn, "page_size"))


def _file_bytes(db: str | os.PathLike[str], suffixes: tuple[str, ...] = ("", "-wal")) -> int:
    """What the database takes as files: itself and its -wal."""
    total = 0
    for suffix in suffixes:
        try:
            total += os.stat(os.fspath(db) + suffix).st_size
        except OSError:
            pass
    return total


def _renumbered(conn: sqlite3.Connection) -> list[str]:
    """The tables whose rowids VACUUM would change: neither an INTEGER
    PRIMARY KEY nor an index holds them, and they are not 1..n already."""
    tables = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage > 0"
        " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    ).fetchall()
    changed = []
    for (name,) in tables:
        quoted = '"' + str(name).replace('"', '""') + '"'
        if _rowids_held(conn, quoted):
            continue
        n, low, high = conn.execute(
            f"SELECT count(*), min(rowid), max(rowid) FROM {quoted}"
        ).fetchone()
        if n and (low != 1 or high != n):
            changed.append(str(name))
    return changed


def _rowids_held(conn: sqlite3.Connection, quoted: str) -> bool:
    if conn.execute(f"PRAGMA index_list({quoted})").fetchall():
        return True  # a WITHOUT ROWID table has its key's index too
    key = [row for row in conn.execute(f"PRAGMA table_info({quoted})") if row[5]]
    return len(key) == 1 and str(key[0][2]).upper() == "INTEGER"


class _Waits(Exception):
    """The database cannot be compacted now; a later run tries again."""


def _compact(db: Path, procs: Callable[[], ProcessTable], *, owed: bool) -> Compacted | None:
    """Give `db`'s free pages back; None when there is nothing to give, or
    when it must stay as it is. _Waits when it cannot be done now (a process
    has it open, it is locked). `owed`: a run killed after the rebuild left
    the rebuilt pages in the -wal, to be checkpointed into the file."""
    free = free_bytes(db)
    if free is None or not (free or owed and _file_bytes(db, ("-wal",))):
        return None
    try:
        agentdb.ensure_alone([db], procs())
        before = _file_bytes(db)
        conn = agentdb.writing(db)
    except (RemovalError, sqlite3.Error) as exc:
        raise _Waits(str(exc) if isinstance(exc, RemovalError) else f"{db}: {exc}") from None
    try:
        if not _rebuild(db, conn, rebuild=free > 0):
            return None
    except sqlite3.Error as exc:
        raise _Waits(f"{db}: {exc}") from None
    finally:
        conn.close()
    done = Compacted(os.fspath(db), before, _file_bytes(db))
    log.info("database compacted", db=done.database, before=before, after=done.bytes_after)
    return done


def _rebuild(db: Path, conn: sqlite3.Connection, *, rebuild: bool) -> bool:
    """incremental_vacuum or VACUUM (when `rebuild`), then the -wal
    checkpointed into the file; False when VACUUM would change rowids
    (nothing is done)."""
    settings = _settings(conn)
    incremental = settings[0] == _INCREMENTAL
    changed = _renumbered(conn) if rebuild and not incremental else []
    if changed:
        log.warning("not compacted: VACUUM would renumber rows", db=str(db), tables=changed)
        return False
    if rebuild:
        _step("rebuild", conn)
        if incremental:
            conn.executescript("PRAGMA incremental_vacuum")  # to its end: execute() frees a page
        else:
            conn.execute("VACUUM")
    if settings[1] == "wal":
        _step("checkpoint", conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    after = _settings(conn)
    if after != settings:
        # SQLite's VACUUM keeps them; this says so loudly if it ever did not.
        log.error(
            "compaction changed a database's settings", db=str(db), before=settings, after=after
        )
    return True


def _step(name: str, conn: sqlite3.Connection) -> None:
    if _before_step is not None:
        _before_step(name, conn)


def owed(state_dir: Path) -> set[str]:
    """The databases waiting to be compacted."""
    try:
        return read_state(state_dir / OWED, _paths) or set()
    except StateFileError as exc:
        log.warning("the compactions owed are forgotten", error=str(exc))
        return set()


def _paths(value: Any) -> set[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise TypeError("not a list of database paths")
    return set(value)


def compact_all(
    state_dir: Path, touched: Collection[str], known: Collection[str], uid: int
) -> list[Compacted]:
    """Compact the databases this run removed rows from (`touched`) and
    those owed by earlier runs, each of them one an enabled agent lists
    (`known`); the rest of the owed wait on."""
    before = owed(state_dir)
    wanted = before | set(touched)
    if not wanted:
        return []
    # Owed before it is begun: a run killed midway finishes it next time.
    _save(state_dir, wanted)
    procs = functools.cache(lambda: ProcessTable.snapshot(uid))
    done: list[Compacted] = []
    waiting: set[str] = set()
    for db in sorted(wanted):
        if db not in known:
            if os.path.lexists(db):
                waiting.add(db)  # its agent is not enabled now
            continue
        try:
            compacted = _compact(Path(db), procs, owed=db in before)
        except _Waits as exc:
            log.info("compaction waits for a later run", db=db, why=str(exc))
            waiting.add(db)
            continue
        if compacted is not None:
            done.append(compacted)
    _save(state_dir, waiting)
    return done


def _save(state_dir: Path, waiting: set[str]) -> None:
    try:
        if waiting:
            write_json(state_dir / OWED, sorted(waiting))
        else:
            remove(state_dir / OWED)
    except OSError as exc:
        log.error("the compactions owed are not saved", error=exc.strerror or str(exc))


def waiting_bytes(state_dir: Path) -> dict[str, int]:
    """Each owed database's free bytes (what `du` and `status` show)."""
    return {db: free for db in sorted(owed(state_dir)) if (free := free_bytes(db))}
