"""One look at everything in opencode's data dir that names a session, and
the Session each id makes of it. A table of opencode.db with a `session_id`
column this adapter does not name (a later opencode's) is read from the
schema: its rows go with the session they name, but never make a session.
A truncated tool output (`tool-output/tool_<id>`) is the session's whose
`part` rows point at it, only while no other session's do (a fork copies
the parts: the file stays while either uses it).
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentkeep import disk
from agentkeep.adapters import rows, sqlite
from agentkeep.adapters.base import each_session
from agentkeep.adapters.dirs import Unlisted, measured, own_time, unreadable
from agentkeep.adapters.opencode import storage
from agentkeep.adapters.opencode.storage import File, Record, canonical_id
from agentkeep.model import Session

log = structlog.get_logger("agentkeep.adapters.opencode")

# (table, key column), in the order rows are deleted: the records opencode
# lists sessions by come first (invariant 5). Tables found in the schema
# (`_SESSION_KEY`) are deleted after these.
_ROW_TABLES: tuple[tuple[str, str], ...] = (
    ("session", "id"),
    ("session_v2", "id"),
    ("message", "session_id"),
    ("part", "session_id"),
    ("todo", "session_id"),
    ("session_share", "session_id"),
    ("session_message", "session_id"),
    ("session_input", "session_id"),
    ("session_context_epoch", "session_id"),
    ("event", "aggregate_id"),
    ("event_sequence", "aggregate_id"),
)
_KEYS = dict(_ROW_TABLES)
_SESSION_KEY = "session_id"
# Tables that are never a session's, whatever columns a later opencode gives
# them: accounts, credentials, projects, workspaces, permissions, migrations.
_SHARED_TABLES = frozenset(
    [
        "account",
        "account_state",
        "control_account",
        "credential",
        "data_migration",
        "migration",
        "permission",
        "project",
        "project_directory",
        "workspace",
    ]
)
# A table name this adapter will put into SQL (quoted) and into an artifact path.
_TABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
LISTING_TABLES = ("session", "session_v2")
# What the 2.x `opencode session delete` removes, leaving the legacy rows
# (#50260): its own, which agentkeep never writes while the binary is used.
V2_TABLES = ("session_v2", "event", "event_sequence")
_EVENT_TABLES = ("event", "event_sequence")
_ORDER = [table for table, _key in _ROW_TABLES]
# The table whose rows point at tool outputs.
POINTING = "part"
# What a part row says of a truncated output: "... saved to <data>/tool-output/tool_<id>".
_TOOL_OUTPUT_NAME = re.compile(r"tool-output[/\\]+(tool_[0-9A-Za-z]{1,64})")


def keys(table: str) -> tuple[str]:
    """The column naming the session in one of the session tables (rows.Keys)."""
    return (_KEYS.get(table, _SESSION_KEY),)


def order(table: str) -> int:
    """Where rows of `table` go in a removal: the known tables' order, then the rest."""
    return _ORDER.index(table) if table in _KEYS else len(_ORDER)


def _session_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of this database that hold sessions' rows, in the order
    they are deleted: the known ones this version has, then any other table
    with a `session_id` column (a later opencode's), by name. Tables that
    are never a session's are not among them, whatever their columns."""
    names = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    found = [
        name
        for (name,) in names
        if isinstance(name, str)
        and _TABLE_NAME.fullmatch(name)
        and name not in _SHARED_TABLES
        and keys(name)[0] in sqlite.columns(conn, name)
    ]
    return sorted(found, key=lambda t: (order(t), t))


def _keyed_ids(conn: sqlite3.Connection, table: str, only: frozenset[str] | None) -> set[str]:
    """Ids with rows in `table`."""
    (column,) = keys(table)
    sql = f'SELECT DISTINCT "{column}" FROM "{table}"'
    rows = conn.execute(*sqlite.among(sql, column, only)).fetchall()
    return {r[0] for r in rows if isinstance(r[0], str)}


def tool_output_refs(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """The tool-output files part rows point at (by file name), each with
    the sessions whose parts do. Every session's parts are read: whether a
    file is one session's alone depends on all of them."""
    if not {"session_id", "data"} <= sqlite.columns(conn, POINTING):
        return {}
    refs: dict[str, set[str]] = {}
    sql = "SELECT session_id, data FROM part WHERE instr(data, ?) > 0"
    for sid, data in conn.execute(sql, (storage.TOOL_OUTPUT,)):
        data = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        if isinstance(sid, str) and isinstance(data, str):
            for name in _TOOL_OUTPUT_NAME.findall(data):
                refs.setdefault(name, set()).add(sid)
    return refs


def _listing_rows(
    conn: sqlite3.Connection, table: str, only: frozenset[str] | None
) -> list[tuple[str, Record]]:
    """The sessions a listing table lists, each with what its row says."""
    cols = sqlite.columns(conn, table)
    if "id" not in cols:
        return []
    time_col = next((c for c in ("time_updated", "updated_at") if c in cols), None)
    wanted = [c for c in ("parent_id", time_col, "directory") if c is not None and c in cols]
    sql = f"SELECT {', '.join(['id', *wanted])} FROM {table}"
    found = []
    for row in conn.execute(*sqlite.among(sql, "id", only)):
        record = dict(zip(["id", *wanted], row, strict=True))
        sid = canonical_id(record["id"])
        if sid is None:
            shown = repr(record["id"])[:80]
            log.warning("session row id is not a session id; skipped", table=table, id=shown)
            continue
        updated = sqlite.column_time(record.get(time_col)) if time_col else None
        parent, directory = record.get("parent_id"), record.get("directory")
        found.append((sid, storage.record(sid, updated, parent, directory)))
    return found


@dataclass
class _Found:
    """Everything one listing found for one id."""

    files: list[File] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    # table -> the row's own update time (listing tables) or None
    rows: dict[str, float | None] = field(default_factory=dict)
    undated: bool = False
    unlisted: Unlisted = field(default_factory=Unlisted)


@dataclass
class _Listing:
    """What one look at the data dir found, by session id."""

    found: dict[str, _Found] = field(default_factory=dict)
    # opencode.db could not be read: any session may have rows (and a newer
    # update time) there.
    incomplete: bool = False
    linked_root: bool = False
    # The session tables of opencode.db, in the order rows are deleted.
    tables: list[str] = field(default_factory=list)
    # tool-output file name -> the sessions whose part rows point at it
    outputs: dict[str, set[str]] = field(default_factory=dict)
    # Folders every session shares that could not be listed.
    unlisted: Unlisted = field(default_factory=Unlisted)


def sessions(data_dir: Path, only: frozenset[str] | None, linked_root: bool) -> Iterator[Session]:
    """The Session of each id one look at the data dir finds (only those in
    `only` when it is given)."""
    found = _list(data_dir, only, linked_root)
    return each_session(found.found, lambda sid: _session(sid, found, data_dir))


def _list(data_dir: Path, only: frozenset[str] | None, linked_root: bool) -> _Listing:
    listing = _Listing(linked_root=linked_root)
    store = data_dir / "storage"
    outputs_dir = data_dir / storage.TOOL_OUTPUT
    # Listed whatever `only` says: the part rows are read only when there
    # is a tool output to attribute.
    outputs_linked = linked_root or disk.is_link(outputs_dir)
    outputs = storage.Folder(str(outputs_dir), outputs_linked, True, listing.unlisted)
    for sid, file, record in storage.session_files(store, linked_root, only, listing.unlisted):
        found = listing.found.setdefault(sid, _Found())
        found.files.append(file)
        found.undated |= record is None or record.updated is None
        found.records += [record] if record is not None else []
    for sid in storage.leftovers(store, only, listing.unlisted):
        listing.found.setdefault(sid, _Found())
    _list_rows(data_dir / storage.DB, only, listing, outputs.may_hold("tool_"))
    for name, sids in sorted(listing.outputs.items()):
        # A file other sessions point at too (a fork's copied parts) is
        # none of them alone: it stays while any of them does.
        owner = next(iter(sids)) if len(sids) == 1 else None
        path = outputs.has(name) if owner in listing.found else None
        if owner is not None and path is not None:
            listing.found[owner].files.append(File(path, storage.KIND_TOOL_OUTPUT, outputs.linked))
    base = linked_root or disk.is_link(store)
    # Whether each storage folder is a link, looked at once per listing;
    # for a scan, what each holds too.
    folders = {
        name: storage.Folder(
            str(store / name), base or disk.is_link(store / name), only is None, listing.unlisted
        )
        for name in storage.FOLDERS
    }
    for sid, found in listing.found.items():
        found.files.extend(storage.storage_files(sid, folders, found.unlisted))
    return listing


def _list_rows(db: Path, only: frozenset[str] | None, listing: _Listing, outputs: bool) -> None:
    if not os.path.lexists(db):
        return
    try:
        with sqlite.reading(db) as conn:
            listed = [(t, *row) for t in LISTING_TABLES for row in _listing_rows(conn, t, only)]
            tables = _session_tables(conn)
            keyed = [
                (table, _keyed_ids(conn, table, only))
                for table in tables
                if table not in LISTING_TABLES
            ]
            refs = tool_output_refs(conn) if outputs else {}
    except sqlite3.Error as exc:
        what = "opencode database unreadable; opencode sessions undated"
        log.warning(what, db=str(db), error=str(exc))
        listing.incomplete = True
        return
    listing.tables, listing.outputs = tables, refs
    for table, sid, record in listed:
        found = listing.found.setdefault(sid, _Found())
        found.records.append(record)
        found.rows[table] = record.updated
    for table, ids in keyed:
        # Event aggregates need not be sessions, nor need the keys of a
        # table known only from the schema: their rows only attach to a
        # session something else names.
        if table in _EVENT_TABLES or table not in _KEYS:
            ids &= listing.found.keys()
        for sid in ids:
            if canonical_id(sid) is not None:
                listing.found.setdefault(sid, _Found()).rows[table] = None


def _session(sid: str, listing: _Listing, data_dir: Path) -> Session | None:
    """The Session `sid` makes of what the listing found; None for nothing."""
    found = listing.found.get(sid)
    if found is None:
        return None
    root = str(data_dir)
    artifacts = measured((f.path, f.kind, root, f.linked, f.primary, False) for f in found.files)
    updated = max((r.updated for r in found.records if r.updated is not None), default=None)
    # Message, part and event rows carry no time that says more than the session's own.
    own = own_time(updated, artifacts)
    db = data_dir / storage.DB
    linked = listing.linked_root or disk.is_link(db)
    for table in sorted(found.rows, key=listing.tables.index):
        primary = table in LISTING_TABLES
        artifacts.append(
            rows.row(db, table, found.rows[table] if primary else own, primary, linked)
        )
    if not artifacts:
        return None
    return Session(
        agent="opencode",
        id=sid,
        workspace=next((r.directory for r in found.records if r.directory), None),
        parent=next((r.parent for r in found.records if r.parent), None),
        artifacts=artifacts,
        updated=updated,
        undated=found.undated or listing.incomplete,
        bytes=sum(a.bytes for a in artifacts),
        unreadable=unreadable(artifacts, [*listing.unlisted, *found.unlisted]),
    )
