"""Giving an agent's database its free pages back once a prune or purge has
removed rows from it (invariant 13). Deleting rows shrinks no SQLite file:
the pages only join its free list (FIELD-NOTES "Disk that is not in
sessions": a fifth of opencode.db after a prune).

- `auto_vacuum = INCREMENTAL` (Codex's): `PRAGMA incremental_vacuum` moves
  the free pages to the end of the file and cuts them off.
- otherwise (opencode's, Copilot's): VACUUM, which rebuilds the file in
  place. It keeps every rowid an INTEGER PRIMARY KEY or an index holds (the
  index is copied as it is, so its rowids must stay), and numbers afresh
  the rows of a table with neither: such a table whose rowids are not
  1..n already, as numbering afresh would make them, keeps the database
  as it is.

Never while another process has the database open (ensure_alone): it
waits, owed, in the state dir, and every later run tries again; `du` and
`status` say how many free bytes wait. Never a change of its settings:
auto_vacuum, journal_mode and page_size are read before and after. Never a
copy left behind: VACUUM's temporary database is a file SQLite unlinks as
it opens it, so nothing of it stays in the tmp dir, even after a kill; in
WAL mode the rebuilt pages go through the -wal, which a TRUNCATE
checkpoint empties and the last connection's close removes. A kill during
the rebuild leaves the database as it was, its -wal holding frames no
reader uses; a kill after it, the rebuilt database in the -wal. Either way
the database is still owed, and the next run's compaction finishes it.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep.adapters import sqlite as agentdb
from agentkeep.errors import RemovalError
from agentkeep.processes import ProcessTable
from agentkeep.statefiles import StateFileError, read_state, write_json

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
        return {
            "database": self.database,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
        }


@dataclass(frozen=True)
class Settings:
    """What a compaction must never change."""

    auto_vacuum: int
    journal_mode: str
    page_size: int


def free_bytes(db: str | os.PathLike[str]) -> int | None:
    """The bytes of `db`'s free pages (freelist_count * page_size), read
    without changing it; None when it cannot be read."""
    try:
        with agentdb.reading(db) as conn:
            return _free(conn)
    except sqlite3.Error:
        return None


def _free(conn: sqlite3.Connection) -> int:
    count = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    return count * int(conn.execute("PRAGMA page_size").fetchone()[0])


def _settings(conn: sqlite3.Connection) -> Settings:
    def one(pragma: str) -> Any:
        return conn.execute(f"PRAGMA {pragma}").fetchone()[0]

    return Settings(
        int(one("auto_vacuum")), str(one("journal_mode")).lower(), int(one("page_size"))
    )


def file_bytes(db: str | os.PathLike[str]) -> int:
    """What the database takes as files: itself and its -wal."""
    total = 0
    for suffix in ("", "-wal"):
        try:
            total += os.stat(os.fspath(db) + suffix).st_size
        except OSError:
            pass
    return total


def renumbered(conn: sqlite3.Connection) -> list[str]:
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


class Waits(Exception):
    """The database cannot be compacted now; a later run tries again."""


def compact(db: Path, procs: Callable[[], ProcessTable], *, owed: bool = False) -> Compacted | None:
    """Give `db`'s free pages back; None when there is nothing to give, or
    when it must stay as it is (rowids VACUUM would change). Raises Waits
    when it cannot be done now (a process has it open, it is locked).
    `procs`: the user's processes, looked at only when there is work.
    `owed`: an earlier run began it; a run killed after the rebuild left
    the rebuilt pages in the -wal, which are checkpointed into the file."""
    free = free_bytes(db)
    if free is None or not (free or owed and _wal_bytes(db)):
        return None
    try:
        agentdb.ensure_alone([db], procs())
    except RemovalError as exc:
        raise Waits(str(exc)) from None
    before = file_bytes(db)
    try:
        conn = agentdb.writing(db)
    except sqlite3.Error as exc:
        raise Waits(f"{db}: {exc}") from None
    try:
        if not _rebuild(db, conn, rebuild=free > 0):
            return None
    except sqlite3.Error as exc:
        raise Waits(f"{db}: {exc}") from None
    finally:
        conn.close()
    done = Compacted(os.fspath(db), before, file_bytes(db))
    log.info("database compacted", db=done.database, before=before, after=done.bytes_after)
    return done


def _wal_bytes(db: Path) -> int:
    try:
        return os.stat(f"{db}-wal").st_size
    except OSError:
        return 0


def _rebuild(db: Path, conn: sqlite3.Connection, *, rebuild: bool) -> bool:
    """incremental_vacuum or VACUUM (when `rebuild`), then the -wal
    checkpointed into the file, the settings checked before and after;
    False when VACUUM would change rowids (nothing is done)."""
    settings = _settings(conn)
    incremental = settings.auto_vacuum == _INCREMENTAL
    changed = renumbered(conn) if rebuild and not incremental else []
    if changed:
        log.warning("not compacted: VACUUM would renumber rows", db=str(db), tables=changed)
        return False
    if rebuild:
        _step("rebuild", conn)
        if incremental:
            # executescript steps the pragma to its end (execute() would free
            # one page: the pragma's rows have no columns).
            conn.executescript("PRAGMA incremental_vacuum")
        else:
            conn.execute("VACUUM")
    if settings.journal_mode == "wal":
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
            compacted = compact(Path(db), procs, owed=db in before)
        except Waits as exc:
            log.info("compaction waits for a later run", db=db, why=str(exc))
            waiting.add(db)
            continue
        if compacted is not None:
            done.append(compacted)
    _save(state_dir, waiting)
    return done


def _save(state_dir: Path, waiting: set[str]) -> None:
    path = state_dir / OWED
    try:
        if waiting:
            write_json(path, sorted(waiting))
        elif path.exists():
            path.unlink()
    except OSError as exc:
        log.error("the compactions owed are not saved", error=exc.strerror or str(exc))


def waiting_bytes(state_dir: Path) -> dict[str, int]:
    """Each owed database's free bytes (what `du` and `status` show)."""
    found = {}
    for db in sorted(owed(state_dir)):
        free = free_bytes(db)
        if free:
            found[db] = free
    return found
