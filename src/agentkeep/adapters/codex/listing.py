"""One look at everything under `$CODEX_HOME` that names a session, and the
Session each id makes of it. Codex adds tables and databases
(`<name>_<n>.sqlite`) between versions: every table with a `thread_id` (or
`session_id`) column is read from the schema, never from a list of names,
so the rows a newer Codex writes are the session's too (`<db>#<table>`).
A TUI reference or rows alone, what a removal stopped half way leaves, are
listed, so that it can be finished.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

import structlog

from agentkeep import disk, fsio
from agentkeep.adapters import heads, rows, sqlite
from agentkeep.adapters.codex.rollouts import KINDS, UUID, File, read_meta, rollout_files
from agentkeep.adapters.dirs import Unlisted, entries, measured, own_time, unreadable
from agentkeep.model import Artifact, Session

log = structlog.get_logger("agentkeep.adapters.codex")

STATE_DB = re.compile(r"state_\d+\.sqlite")
# Codex names each database `<name>_<schema version>.sqlite`.
_DATABASE = re.compile(r"[a-z][a-z_]*_\d+\.sqlite")
# Table names are put into SQL as they are: anything else is not Codex's.
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TUI_REFS = "tui-thread-reference-capabilities"
INDEX = "session_index.jsonl"
_INDEX_LINE_LIMIT = 1 << 20

KIND_TUI_REF = "tui-reference"
THREADS = "threads"
# The columns naming a session in any other table: `thread_id` in most,
# `session_id` in some (0.171's session_model_ids, which codex delete clears).
_KEYS = ("thread_id", "session_id")
# A subagent's edge names both threads; it is each one's row.
SPAWN_EDGES = "thread_spawn_edges"
SPAWN_PARENT, SPAWN_CHILD = "parent_thread_id", "child_thread_id"


def keys(table: str) -> tuple[str, ...]:
    """The columns of `table` naming a session (rows.Keys)."""
    if table == THREADS:
        return ("id",)
    if table == SPAWN_EDGES:
        return (SPAWN_CHILD, SPAWN_PARENT)
    return _KEYS


def _is_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and UUID.fullmatch(value) is not None


@dataclass(frozen=True)
class _Thread:
    db: Path
    updated: float | None
    cwd: str | None
    parent: str | None


@dataclass
class _Found:
    """Everything one listing found for one id."""

    files: list[File] = field(default_factory=list)
    threads: list[_Thread] = field(default_factory=list)
    rows: list[tuple[Path, str]] = field(default_factory=list)  # (db, table) of its other rows
    spawned_by: str | None = None
    in_index: bool = False


@dataclass
class Listing:
    """What one look at the root found, by session id."""

    root: Path
    linked_root: bool
    found: dict[str, _Found] = field(default_factory=dict)
    # A state database could not be read: a newer update time of any
    # session may hide there.
    incomplete: bool = False
    # What could not be listed may hold any session's rollout or database:
    # all are unsafe.
    unlisted: Unlisted = field(default_factory=Unlisted)

    def of(self, sid: str) -> _Found:
        """What was found of `sid` so far (added when nothing was)."""
        return self.found.setdefault(sid, _Found())

    def in_a_scan(self, sid: str) -> bool:
        """Rows alone (what a removal stopped half way or `codex delete`
        left) are no session a scan shows; listed by name they are, so that
        a journal can finish a removal."""
        found = self.found[sid]
        return bool(found.files or found.threads)


def databases(root: Path, unlisted: Unlisted | None = None) -> list[Path]:
    """Codex's databases in the root."""
    return [
        Path(e.path) for e in entries(root, unlisted) if _DATABASE.fullmatch(e.name) and not e.dir
    ]


def list_root(root: Path, only: frozenset[str] | None, linked_root: bool) -> Listing:
    """Everything under the root that names a session (only those in
    `only` when it is given)."""
    listing = Listing(root, linked_root)
    for sid, file in rollout_files(root, only, linked_root, listing.unlisted):
        listing.of(sid).files.append(file)
    for db in databases(root, listing.unlisted):
        try:
            _read_database(db, only, listing)
        except sqlite3.Error as exc:
            state = STATE_DB.fullmatch(db.name) is not None
            listing.incomplete |= state
            what = "state database unreadable; codex sessions undated"
            log.warning(
                what if state else "codex database unreadable; its rows not attributed",
                db=str(db),
                error=str(exc),
            )
    for entry in entries(root / TUI_REFS, listing.unlisted):
        if _is_id(entry.name) and (only is None or entry.name in only):
            listing.of(entry.name).files.append(File(Path(entry.path), KIND_TUI_REF, linked_root))
    # session_index.jsonl only ever names: it never makes a session.
    for sid in _index_ids(root, only):
        if sid in listing.found:
            listing.found[sid].in_index = True
    return listing


def _read_database(db: Path, only: frozenset[str] | None, listing: Listing) -> None:
    """Every table of `db` holding sessions' rows, found from its schema, in
    one read transaction (no table seen from two moments)."""
    with sqlite.reading(db) as conn:
        conn.execute("BEGIN")
        for table in _tables(conn):
            cols = sqlite.columns(conn, table)
            if table == THREADS and "id" in cols:
                for sid, thread in _threads(conn, db, cols, only):
                    listing.of(sid).threads.append(thread)
            elif table == SPAWN_EDGES and {SPAWN_PARENT, SPAWN_CHILD} <= cols:
                for parent, child in edges(conn, only):
                    for sid in (parent, child):
                        if only is None or sid in only:
                            listing.of(sid).rows.append((db, table))
                    if only is None or child in only:
                        listing.found[child].spawned_by = parent
            else:
                for key in (k for k in _KEYS if k in cols):
                    sql = f"SELECT DISTINCT {key} FROM {table}"
                    for (sid,) in conn.execute(*sqlite.among(sql, key, only)):
                        if _is_id(sid):
                            listing.of(sid).rows.append((db, table))


def _threads(
    conn: sqlite3.Connection, db: Path, cols: set[str], only: frozenset[str] | None
) -> list[tuple[str, _Thread]]:
    # parent_thread_id: a column of older versions (0.169 keeps the edge
    # in thread_spawn_edges instead).
    wanted = [c for c in ("updated_at", "updated_at_ms", "cwd", "parent_thread_id") if c in cols]
    sql = f"SELECT {', '.join(['id', *wanted])} FROM {THREADS}"
    found = []
    for row in conn.execute(*sqlite.among(sql, "id", only)):
        record = dict(zip(["id", *wanted], row, strict=True))
        sid, cwd, parent = record["id"], record.get("cwd"), record.get("parent_thread_id")
        if not _is_id(sid):
            log.warning(
                "threads row id is not a canonical UUID; skipped", db=str(db), id=repr(sid)[:80]
            )
            continue
        cwd = cwd if isinstance(cwd, str) else None
        found.append(
            (sid, _Thread(db, _thread_time(record), cwd, parent if _is_id(parent) else None))
        )
    return found


def _thread_time(record: dict[str, object]) -> float | None:
    """The newest of updated_at and updated_at_ms (Codex keeps seconds in one
    and, since migration 25, milliseconds in the other). A value present but
    unreadable, or no value at all, makes the row undated."""
    values = [record[c] for c in ("updated_at", "updated_at_ms") if record.get(c) is not None]
    times = [sqlite.column_time(v) for v in values]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


def edges(conn: sqlite3.Connection, only: frozenset[str] | None) -> list[tuple[str, str]]:
    """(parent, child) of the spawn edges naming one of `only` (all of them
    when None), each a canonical id."""
    sql = f"SELECT {SPAWN_PARENT}, {SPAWN_CHILD} FROM {SPAWN_EDGES}"
    params: tuple[str, ...] = ()
    if only is not None:
        among = "IN (SELECT value FROM json_each(?))"
        sql += f" WHERE {SPAWN_PARENT} {among} OR {SPAWN_CHILD} {among}"
        params = (json.dumps(sorted(only)),) * 2
    return [(p, c) for p, c in conn.execute(sql, params) if _is_id(p) and _is_id(c)]


def _tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of a database whose names can be put into SQL as they are."""
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return sorted(n for n in names if isinstance(n, str) and _TABLE_NAME.fullmatch(n))


def _index_ids(root: Path, only: frozenset[str] | None) -> set[str]:
    """Ids session_index.jsonl names: reported as residual, never edited (it
    is Codex's own list of names, shared by every session)."""
    handle = fsio.open_quietly(root / INDEX)
    if handle is None:
        return set()
    ids: set[str] = set()
    with handle:
        while line := handle.readline(_INDEX_LINE_LIMIT):
            record = heads.json_object(line)
            sid = record.get("id") if record is not None else None
            if _is_id(sid) and (only is None or sid in only):
                ids.add(sid)
    return ids


def session(sid: str, listing: Listing) -> Session | None:
    """What the listing found of `sid`, measured: rollouts (primary) and
    other files, then the `threads` rows (primary) and the other rows,
    which have no time of their own: as old as the session (rows left with
    nothing else are undated)."""
    found = listing.found.get(sid)
    if found is None:
        return None
    files = sorted(found.files, key=lambda f: str(f.path))
    root = str(listing.root)
    artifacts = measured((f.path, f.kind, root, f.linked, f.kind in KINDS, False) for f in files)
    rollouts = (Path(a.path) for a in artifacts if a.kind in KINDS and not a.linked)
    meta = next((m for path in rollouts if (m := read_meta(path, sid)) is not None), None)
    updated = max((t.updated for t in found.threads if t.updated is not None), default=None)
    own = own_time(updated, artifacts)
    artifacts += [_row(t.db, THREADS, t.updated, True, listing) for t in found.threads]
    artifacts += [_row(db, table, own, False, listing) for db, table in dict.fromkeys(found.rows)]
    if not artifacts:
        return None
    parent, workspace = (meta.parent, meta.cwd) if meta else (None, None)
    for thread in found.threads:
        parent = parent or (thread.parent if thread.parent != sid else None)
        workspace = workspace or thread.cwd
    if found.spawned_by != sid:
        parent = parent or found.spawned_by
    return Session(
        agent="codex",
        id=sid,
        workspace=workspace,
        parent=parent,
        artifacts=artifacts,
        updated=updated,
        undated=listing.incomplete,
        bytes=sum(a.bytes for a in artifacts),
        residual=[str(listing.root / INDEX)] if found.in_index else [],
        unreadable=unreadable(artifacts, listing.unlisted),
    )


def _row(db: Path, table: str, mtime: float | None, primary: bool, listing: Listing) -> Artifact:
    return rows.row(db, table, mtime, primary, listing.linked_root or disk.is_link(db))
