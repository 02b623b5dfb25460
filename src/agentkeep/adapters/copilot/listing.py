"""One look at what Copilot's sessions share (rows, tool outputs, shared
files), and the Session each id makes of it and of its dirs.

A session's rows in `session-store.db` are `sessions` by `id` and every
table with a `session_id` column (read from the schema, so a later
Copilot's too), deleted only while no process has the database open."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import structlog

from agentkeep import disk, fsio
from agentkeep.adapters import rows, sqlite
from agentkeep.adapters.base import Remover, session_of
from agentkeep.adapters.copilot.events import (
    EVENTS,
    ID,
    TOOL_OUTPUT,
    WORKSPACE,
    Events,
    canonical_id,
    read_events,
)
from agentkeep.adapters.dirs import directory_artifacts, entries, measured, own_time, root_problem
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact, Session
from agentkeep.paths import Env

log = structlog.get_logger("agentkeep.adapters.copilot")

_T = TypeVar("_T")

OPLOCKS = ".session-operation-locks"
KINDS = {
    EVENTS: "events",
    WORKSPACE: "workspace",
    "checkpoints": "checkpoints",
    "rewind-file-snapshots": "snapshots",
    "files": "files",
    "research": "research",
    "session.db": "session-db",
    ".workspace-fork.lock": "fork-lock",
}
KIND_INUSE_LOCK, KIND_INUSE_HOLD = "inuse-lock", "inuse-hold"
KIND_OPLOCK, KIND_TOOL_OUTPUT = "operation-lock", "tool-output"
_INUSE = re.compile(r"inuse\.(\d{1,10})\.(lock|hold)")
_SHARED_LIMIT = 32 << 20
_SHARED_FILES = ("open-sessions-state.json", "command-history-state.json", "config.json")
STORE = "session-store.db"
SESSIONS, SESSION_ID = "sessions", "session_id"
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The FTS5 shadow tables (`<table>_content` holds the session id as `c1`):
# they go with their virtual table, never on their own.
_SHADOW = ("_data", "_idx", "_content", "_docsize", "_config")


@dataclass(frozen=True)
class Place:
    """One `session-state` directory, under the root it lies in."""

    root: Path
    state: Path
    linked: bool


@dataclass
class Listing:
    """What the sessions listed together share."""

    rows: dict[str, Rows] = field(default_factory=dict)
    # A database could not be read: a newer time or a row may hide there.
    incomplete: bool = False
    # Tool outputs in the tmp dirs: (path, root, linked) by the writer's pid.
    outputs: dict[int, list[tuple[str, str, bool]]] = field(default_factory=dict)
    # The shared files (logs, state) and the ids each of them names.
    shared: dict[str, frozenset[str]] = field(default_factory=dict)


def once(items: list[_T], key: Callable[[_T], tuple[Path, bool]]) -> list[_T]:
    """Each real path once: the first not behind a link, else the first."""
    chosen: dict[str, _T] = {}
    for item in sorted(items, key=lambda i: key(i)[1]):
        chosen.setdefault(os.path.realpath(key(item)[0]), item)
    return [item for item in items if item in chosen.values()]


def look(
    env: Env, stores: list[tuple[Path, bool]], roots: list[Path], only: frozenset[str] | None
) -> Listing:
    """The rows of every store, the tool outputs in the tmp dirs and the ids
    the shared files name."""
    listing = Listing()
    for db, linked in stores:
        try:
            _read_rows(db, linked, only, listing.rows)
        except sqlite3.Error as exc:
            log.warning(
                "session-store.db unreadable; copilot sessions undated", db=str(db), error=str(exc)
            )
            listing.incomplete = True
    _list_outputs(env, listing)
    for root in once(roots, lambda r: (r, disk.is_link(r))):
        _list_shared(root, listing)
    return listing


def _list_outputs(env: Env, listing: Listing) -> None:
    for tmp in env.tmp_dirs:
        linked = root_problem(env, tmp) is not None
        for entry in entries(tmp):
            match = TOOL_OUTPUT.fullmatch(entry.name)
            if match is None or entry.dir:
                continue
            try:
                st = os.lstat(entry.path)
            except OSError:
                continue
            if entry.link or st.st_uid != env.uid:
                log.info("skipped a tool output that is not the user's file", path=entry.path)
                continue
            pid = int(match[1])
            listing.outputs.setdefault(pid, []).append((entry.path, str(tmp), linked))


def _list_shared(root: Path, listing: Listing) -> None:
    """What the shared files name: read whole, as they are small and few."""
    logs = [Path(e.path) for e in entries(root / "logs") if e.name.endswith(".log")]
    state = [Path(e.path) for e in entries(root / "sidebar-sessions-state")]
    for path in [*logs, *state, *(root / name for name in _SHARED_FILES)]:
        try:  # none when missing, a link, or too big to be Copilot's state
            data = fsio.read_regular(path, limit=_SHARED_LIMIT)
        except OSError:
            continue
        if named := ID.findall(data.decode("utf-8", "replace")):
            listing.shared[str(path)] = frozenset(named)


def ids(places: list[Place], listing: Listing) -> set[str]:
    """Every id a session dir, an operation lock or a row names."""
    found: set[str] = set(listing.rows)
    for place in places:
        for entry in entries(place.state):
            if entry.name == OPLOCKS:
                continue
            if (sid := canonical_id(entry.name)) is None or not entry.dir:
                log.info("skipped: not a copilot session dir", path=entry.path)
            else:
                found.add(sid)
        names = [e.name for e in entries(place.state / OPLOCKS)]
        locks = (n.removesuffix(".lock") for n in names if n.endswith(".lock"))
        found |= {sid for name in locks if (sid := canonical_id(name))}
    return found


def session(agent: str, sid: str, places: list[Place], listing: Listing) -> Session | None:
    """The session `sid` makes of its dirs, rows and tool outputs (None:
    nothing of it is left)."""
    seen: set[tuple[int, int]] = set()
    artifacts: list[Artifact] = []
    read: list[Events] = []
    for place in places:
        found, events_read = _in_place(sid, place, seen)
        artifacts += found
        read += [events_read] if events_read is not None else []
    events = read[0] if read else Events()
    own = listing.rows.get(sid, Rows())
    artifacts += _outputs(events.outputs, inuse_pids(artifacts), listing, seen)
    session_time = own_time(own.updated, artifacts)
    # `sessions` dated by its own row, every other table by the session's time.
    artifacts += [
        rows.row(db, table, own.updated if table == SESSIONS else session_time, False, linked)
        for db, table, linked in own.tables
    ]
    if not artifacts:
        return None
    return session_of(
        agent,
        sid,
        artifacts,
        workspace=events.cwd or own.cwd,
        parent=events.parent,
        updated=own.updated,
        undated=events.undated or own.undated or listing.incomplete,
        residual=sorted(path for path, named in listing.shared.items() if sid in named),
    )


def _in_place(
    sid: str, place: Place, seen: set[tuple[int, int]]
) -> tuple[list[Artifact], Events | None]:
    """Its dir and operation lock in one place, and its events (None: none there)."""
    root, directory = str(place.root), place.state / sid
    artifacts: list[Artifact | None] = []
    events = None
    if directory.is_dir():
        listed = directory_artifacts(
            str(directory), root, primary=EVENTS, kinds=KINDS, linked=place.linked, seen=seen
        )
        artifacts += [_inuse_kind(a) for a in listed]
        if os.path.lexists(directory / EVENTS) and not place.linked:
            events = read_events(directory / EVENTS, sid)
    elif os.path.lexists(directory):
        log.info("skipped: not a session directory", path=str(directory))
    lock = place.state / OPLOCKS / f"{sid}.lock"
    artifacts.append(disk.artifact(lock, KIND_OPLOCK, root, linked=place.linked, seen=seen))
    return [a for a in artifacts if a is not None], events


def _outputs(
    named: frozenset[str], pids: set[int], listing: Listing, seen: set[tuple[int, int]]
) -> list[Artifact]:
    """The tool outputs its events name, or its `inuse.<pid>` processes wrote."""
    outputs = (
        (path, KIND_TOOL_OUTPUT, root, linked, False, False)
        for pid, files in listing.outputs.items()
        for path, root, linked in files
        if pid in pids or os.path.basename(path) in named
    )
    return measured(outputs, seen)


def _inuse_kind(artifact: Artifact) -> Artifact:
    """An `inuse.<pid>` lock or hold by its kind."""
    match = _INUSE.fullmatch(os.path.basename(artifact.path))
    if match is None:
        return artifact
    return artifact._replace(kind=KIND_INUSE_LOCK if match[2] == "lock" else KIND_INUSE_HOLD)


def inuse_pids(artifacts: Iterable[Artifact]) -> set[int]:
    """The pids of the session's `inuse.<pid>` locks and holds."""
    kinds = (KIND_INUSE_LOCK, KIND_INUSE_HOLD)
    inuse = (_INUSE.fullmatch(os.path.basename(a.path)) for a in artifacts if a.kind in kinds)
    return {int(match[1]) for match in inuse if match is not None}


@dataclass
class Rows:
    """A session's rows (database, table, linked) and its `sessions` row's facts."""

    tables: list[tuple[Path, str, bool]] = field(default_factory=list)
    updated: float | None = None
    cwd: str | None = None
    undated: bool = False


def _read_rows(db: Path, linked: bool, only: frozenset[str] | None, found: dict[str, Rows]) -> None:
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
        own = found.setdefault(sid, Rows())
        own.tables.append((db, SESSIONS, linked))
        updated = sqlite.column_time(record.get("updated_at"))
        if updated is None:
            own.undated = True
        elif own.updated is None or updated > own.updated:
            own.updated = updated
        cwd = record.get("cwd")
        if isinstance(cwd, str) and os.path.isabs(cwd) and own.cwd is None:
            own.cwd = cwd


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
