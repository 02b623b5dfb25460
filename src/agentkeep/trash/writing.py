"""Writing an entry during a prune: what was on the state dir's file system
is renamed in (nothing copied), the rest is removed at once and the entry
is marked partial. The database rows removed with it go into rows.sqlite
(a table per table they came from), read back by restore (saved_rows)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import structlog

from agentkeep.adapters import sqlite
from agentkeep.adapters.sqlite import TableRows
from agentkeep.disk import DirCursor
from agentkeep.history import Gone
from agentkeep.paths import ensure_private_dir
from agentkeep.trash.entries import (
    ENTRY,
    ROOTS,
    ROWS,
    TrashEntry,
    TrashError,
    TrashItem,
    entry_dir,
    read_entry,
    trash_dir,
)
from agentkeep.trash.packing import unpacked

log = structlog.get_logger("agentkeep.trash")


class TrashWriter:
    """One entry being written by a prune. entry.json is rewritten before
    anything is moved under a root it did not name yet or into a directory
    it made, and when closed: restore moves back each root's whole tree, so
    an entry a prune left half way puts back everything moved (only the
    items and bytes `trash` lists of the last moves are missing)."""

    def __init__(self, entry: TrashEntry) -> None:
        self.entry = entry
        self.path = entry.path
        # A root named since the last write (written before its first move).
        self._new_root = False
        # The roots/<n> directories made and checked by this writer.
        self._ready: set[int] = set()

    def _save(self) -> None:
        self.entry.save()
        self._new_root = False

    def root_number(self, root: str) -> int:
        """The number of `root` in the entry; a new one is written by the
        destination() that comes before anything is moved under it."""
        n = next((n for n, known in self.entry.roots.items() if known == root), None)
        if n is not None:
            return n
        n = max(self.entry.roots, default=-1) + 1
        self.entry.roots[n] = root
        self._new_root = True
        return n

    def destination(self, n: int, chain: list[tuple[str, os.stat_result]]) -> int:
        """A descriptor of `roots/<n>/<chain...>` for the caller to close,
        making the directories (their originals' modes, plus ours; their
        times recorded for restore). The entry is written first when it names
        a new root or made a directory: nothing moves where it does not say."""
        if n not in self._ready:
            ensure_private_dir(ensure_private_dir(self.path / ROOTS) / str(n))
            self._ready.add(n)
        cursor = DirCursor.open(self.path / ROOTS / str(n))
        made = False
        try:
            rel = str(n)
            for name, st in chain:
                rel = f"{rel}/{name}"
                try:
                    os.mkdir(name, 0o700, dir_fd=cursor.fd)
                    created = True
                except FileExistsError:
                    created = False
                cursor.down(name)
                if created:
                    os.fchmod(cursor.fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
                    self.entry.dir_times.setdefault(rel, (st.st_atime_ns, st.st_mtime_ns))
                    made = True
            if made or self._new_root:
                self._save()
        except BaseException:
            cursor.close()
            raise
        fd, cursor.fd = cursor.fd, -1
        return fd

    def moved(self, n: int, rel: str, nbytes: int) -> None:
        """Counted in the entry, written with the next write (see the class)."""
        self.entry.items.append(TrashItem(n, rel))
        self.entry.bytes += nbytes

    def add_rows(self, rows: TableRows) -> None:
        """Keep `rows` (removed with the session) in the entry, durably,
        before they are deleted. Raises sqlite3.Error or OSError."""
        conn = sqlite3.connect(self.path / ROWS, isolation_level=None)
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
        os.chmod(self.path / ROWS, 0o600)

    def mark_partial(self, what: str) -> None:
        """Some of the session (`what`) was removed, not trashed."""
        if not self.entry.partial:
            log.info("trash entry partial", agent=self.entry.agent, id=self.entry.id, what=what)
            self.entry.partial = True
            self._save()

    def close(self) -> None:
        """Write the entry a last time."""
        self._save()

    def __enter__(self) -> TrashWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_entry(
    state_dir: Path,
    agent: str,
    session_id: str,
    *,
    parent: str | None,
    keep_for: float,
    now: float,
    last_activity: float | None = None,
    about: Gone | None = None,
) -> TrashWriter:
    """Start (or continue: a journal's retry, a session trashed again) the
    entry of one session, kept for `keep_for` seconds from `now`; `about`:
    its line in the record of what went. Call it under the session's
    leases. TrashError when an existing entry cannot be read (it is never
    replaced blindly), OSError when the entry cannot be written."""
    path = entry_dir(state_dir, agent, session_id)
    for directory in (state_dir, trash_dir(state_dir), path.parent, path):
        ensure_private_dir(directory)
    if os.path.lexists(path / ENTRY):
        entry = read_entry(path)
        if entry is None:
            raise TrashError(f"{path / ENTRY} cannot be read; move it away to trash this session")
        # Moves go beside nothing packed (the whole entry is packed again later).
        entry = unpacked(entry)
        entry.parent = parent if parent is not None else entry.parent
    else:
        entry = TrashEntry(agent, session_id, parent, now, now, 0, False, {}, [], None, path)
    entry.trashed_at = now
    entry.expires_at = now + keep_for
    entry.last_activity = last_activity if last_activity is not None else entry.last_activity
    if about is not None:
        entry.workspace, entry.title = about.workspace, about.title
        entry.first_activity = about.first_activity
    writer = TrashWriter(entry)
    writer._save()
    return writer


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
