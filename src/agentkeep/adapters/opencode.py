"""opencode: the 1.x JSON storage, the rows of `opencode.db` (the 1.2+
tables, the 1.18 session tables and the 2.x `session_v2` and events) and the
`tool-output/` files that name a session (FIELD-NOTES "opencode").

A session is any id with a `storage/session/<project>/<id>.json` file or a
`session` / `session_v2` row (the records opencode lists by), or only with
what those leave behind when a removal stops half way (message dirs, todo
and diff files, session-keyed rows), so that it can be finished. Children
are sessions of their own (linked by `parentID` / `parent_id`); this adapter
removes exactly one session, and the pruner removes children before parents.

A table of opencode.db with a `session_id` column that this adapter does not
name (a later opencode's) is read from the schema: its rows go with the
session they name, though they never make a session on their own. A
truncated tool output (`tool-output/tool_<id>`, named by the tool call) is
the session's whose `part` rows point at it, and only while no other
session's do: a fork copies the parts, and the file stays while either uses
it.

A storage folder (or `tool-output/`) that cannot be listed keeps every
session unsafe: any of them may have files there. A session's own message
dir that cannot be listed keeps that session unsafe.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import structlog

from agentkeep import disk
from agentkeep.adapters import heads, owndelete, sqlite
from agentkeep.adapters.base import NAME_ID, Adapter, Known, Remover, Root, load
from agentkeep.adapters.dirs import (
    Unlisted,
    entries,
    parts_below,
    root_problem,
    unlisted_error,
    unreadable,
)
from agentkeep.adapters.sqlite import Deletion, TableRows
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact, Described, Holder, HolderKind, Session
from agentkeep.processes import ProcessTable

log = structlog.get_logger("agentkeep.adapters.opencode")

_ID = NAME_ID
_DB = "opencode.db"
_TOOL_OUTPUT = "tool-output"
# What a part row says of a truncated output: "... saved to <data>/tool-output/tool_<id>".
_TOOL_OUTPUT_NAME = re.compile(r"tool-output[/\\]+(tool_[0-9A-Za-z]{1,64})")
_JSON_LIMIT = 4 << 20
_COMMAND_TIMEOUT_S = 60.0
_PATHS_TIMEOUT_S = 10.0

KIND_SESSION = "session-info"
KIND_MESSAGES = "messages"
KIND_PARTS = "parts"
KIND_TODO = "todo"
KIND_DIFF = "session-diff"
KIND_ROW = "row"
KIND_TOOL_OUTPUT = "tool-output"

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
    {
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
    }
)
# A table name this adapter will put into SQL (quoted) and into an artifact path.
_TABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_LISTING_TABLES = ("session", "session_v2")
# What the 2.x `opencode session delete` removes, leaving the legacy rows
# (#50260): its own, which agentkeep never writes while the binary is used.
_V2_TABLES = ("session_v2", "event", "event_sequence")
_EVENT_TABLES = ("event", "event_sequence")
_ORDER = [table for table, _key in _ROW_TABLES]
# The table whose rows point at tool outputs.
_POINTING = "part"


@dataclass(frozen=True)
class _Record:
    """What a session file or listing row says of its session."""

    updated: float | None
    parent: str | None
    directory: str | None


@dataclass(frozen=True)
class _File:
    path: str
    kind: str
    linked: bool
    primary: bool = False


@dataclass
class _Found:
    files: list[_File] = field(default_factory=list)
    records: list[_Record] = field(default_factory=list)
    # table -> the row's own update time (listing tables) or None
    rows: dict[str, float | None] = field(default_factory=dict)
    undated: bool = False
    # Its own dirs that could not be listed (its message dir).
    unlisted: Unlisted = field(default_factory=Unlisted)


@dataclass
class _Listing:
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


_STORAGE_FOLDERS = ("message", "part", "todo", "session_diff")


class OpencodeAdapter(Adapter):
    name = "opencode"
    # Session ids are `ses_` and 26 base62 characters (1.x to 1.18).
    id_in_name = re.compile(r"ses_[0-9A-Za-z]+")

    @cached_property
    def data_dir(self) -> Path:
        """`$XDG_DATA_HOME/opencode` wherever it points, as opencode itself
        follows it, else `~/.local/share/opencode`. One on a place another
        user owns or can write to is a root with a problem (roots()): what
        lies there is never removed. Normalised as opencode's own
        path.join does (`/srv/../data` is `/data`)."""
        return Path(os.path.normpath(self.env.data_home / "opencode"))

    @cached_property
    def db_path(self) -> Path:
        return self.data_dir / _DB

    @cached_property
    def _root(self) -> str:
        return str(self.data_dir)

    # -- where ----------------------------------------------------------
    def roots(self) -> list[Root]:
        return [Root.check(self.data_dir, self.name, self.env.uid)]

    def databases(self) -> list[Path]:
        return [self.db_path]

    def watch_dirs(self) -> list[Path]:
        storage = self.data_dir / "storage"
        dirs = [self.data_dir, storage / "session", storage / "message"]
        dirs.extend(Path(e.path) for e in entries(storage / "session") if e.dir and not e.link)
        return dirs

    def listed_dirs(self) -> list[Path]:
        storage = self.data_dir / "storage"
        folders = [storage, *(storage / f for f in _STORAGE_FOLDERS)]
        return [*self.watch_dirs(), *folders, self.data_dir / _TOOL_OUTPUT]

    # -- what -----------------------------------------------------------
    def canonical_id(self, raw: str) -> str | None:
        return raw if isinstance(raw, str) and _ID.fullmatch(raw) else None

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """One pass over the storage and the database for all of them."""
        listing = self._list(names)
        for sid in sorted(listing.found):
            session = self._session(sid, listing)
            if session is not None:
                yield session

    def session_for_path(self, path: str) -> str | None:
        parts = parts_below(path, self.data_dir)
        if parts is None or len(parts) < 3 or parts[0] != "storage":
            return None
        kind, rest = parts[1], parts[2:]
        if kind == "session" and len(rest) == 2 and rest[1].endswith(".json"):
            return self.canonical_id(rest[1].removesuffix(".json"))
        if kind == "message":
            return self.canonical_id(rest[0])
        if kind in ("todo", "session_diff") and len(rest) == 1 and rest[0].endswith(".json"):
            return self.canonical_id(rest[0].removesuffix(".json"))
        return None

    # -- in use ---------------------------------------------------------
    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """A command line naming the id, or any opencode process with the
        database open, except the per-user service (`opencode serve
        --service`), which holds it for every session whether used or not."""
        found = list(procs.naming(session.id))
        for suffix in ("", "-wal"):
            for pid, _mode in procs.holding_open(f"{self.db_path}{suffix}"):
                proc = procs.alive(pid)
                if proc is not None and _is_service(proc.cmdline):
                    continue
                found.append(Holder(pid, HolderKind.PROCESS, f"has {_DB} open"))
        return list(dict.fromkeys(found))

    # -- removal --------------------------------------------------------
    def describe(self, session: Session) -> Described:
        """Its `title` and creation time: from its `session` row, or from
        its session JSON (the older storage)."""
        for artifact in session.artifacts:
            table = artifact.path.rpartition("#")[2]
            if artifact.kind == KIND_ROW and table in _LISTING_TABLES and not artifact.linked:
                row = heads.row_of(self.db_path, table, session.id, ("title", "time_created"))
                if row:
                    return Described(
                        heads.cut(row.get("title")), sqlite.column_time(row.get("time_created"))
                    )
            if artifact.kind == KIND_SESSION and not artifact.linked:
                info = heads.read_json_head(artifact.path)
                if isinstance(info, dict):
                    times = info.get("time")
                    created = times.get("created") if isinstance(times, dict) else None
                    return Described(heads.cut(info.get("title")), sqlite.column_time(created))
        return Described()

    def remove(self, session: Session, remover: Remover) -> None:
        """`opencode session delete` when opencode is installed and uses our
        data dir (1.18 removes every row; 2.x only its own, #50260), then
        whatever rows and files it left ourselves; without it, every row
        (listing rows first), then the files. The session's tool outputs go
        before the part rows that point at them either way (opencode's
        delete leaves them). Every row removed is kept in the trash: ours as
        they go, opencode's read before it runs."""
        if session.unsafe:
            raise RemovalError(session.unsafe)
        self._ensure_db_readable()
        outputs = [a for a in session.artifacts if a.kind == KIND_TOOL_OUTPUT]
        binary = owndelete.binary(self.env, "opencode")
        # A dry run calls no binary: it assumes an installed opencode shares
        # our data dir and reports what a real run would hand to it.
        if binary is not None and not remover.dry_run and not self._same_data_dir(binary):
            binary = None
        if binary is None:
            self._finish(session, remover, handled=(), outputs=outputs)
            return
        rows = _rows(session)
        if rows:
            # Checked before the binary runs, so a refusal leaves the session whole.
            sqlite.ensure_alone({_db(a) for a in rows}, ProcessTable.snapshot(self.env.uid))
        self._ensure_childless(session.id, remover)
        # Before it runs: the part rows it may take are all that connect the
        # session's tool outputs to it (it leaves the files).
        self._remove_outputs(session.id, outputs, remover)
        if remover.dry_run:
            remover.removed_at_once(f"opencode session delete {session.id}")
            self._finish(session, remover, handled=_V2_TABLES, outputs=[])
            return
        before = [r for db, d in _deletions(rows, session.id) for r in sqlite.read_rows(db, d)]
        run = owndelete.run(self.env, [binary, "session", "delete", session.id], _COMMAND_TIMEOUT_S)
        left = load(self, session.id) or Session(self.name, session.id)
        for taken in self._keep_taken(before, session.id, remover):
            remover.removed_at_once(taken)
        files = {a.path for a in session.artifacts if a.kind not in (KIND_ROW, KIND_TOOL_OUTPUT)}
        if files - _paths(left):
            # Files it removed (a JSON-era opencode's) are gone for good.
            remover.removed_at_once(f"opencode session delete {session.id}")
        if run.failure and any(_table(a) == "session_v2" for a in left.artifacts):
            raise RemovalError(
                f"opencode session delete failed ({run.failure}); the session is still listed"
            )
        if run.failure:
            log.warning(
                "opencode session delete failed; finishing", id=session.id, error=run.failure
            )
        self._finish(left, remover, _V2_TABLES, outputs=[])

    def _ensure_db_readable(self) -> None:
        """A database we cannot read may hold this session's rows: removing
        the files alone would leave a session opencode still lists."""
        if not os.path.lexists(self.db_path):
            return
        try:
            with sqlite.reading(self.db_path):
                pass
        except sqlite3.Error as exc:
            raise RemovalError(f"cannot read {self.db_path}: {exc}") from exc

    def _same_data_dir(self, binary: str) -> bool:
        """Whether the installed opencode reads our data dir (`opencode debug
        paths` prints `data <dir>`); another one would delete elsewhere."""
        run = owndelete.run(self.env, [binary, "debug", "paths"], _PATHS_TIMEOUT_S)
        data = None
        for line in run.stdout.splitlines():
            key, _, value = line.strip().partition(" ")
            if key == "data" and value.strip():
                data = value.strip()
        if run.failure or data is None:
            log.warning("cannot tell opencode's data dir; removing without it", error=run.failure)
            return False
        if os.path.realpath(data) != os.path.realpath(self.data_dir):
            log.warning(
                "opencode uses another data dir; removing without it",
                its=data,
                ours=str(self.data_dir),
            )
            return False
        return True

    def _ensure_childless(self, sid: str, remover: Remover) -> None:
        """`opencode session delete` takes a session's children with it; the
        pruner removes children first, so a child here is one made since the
        session was listed: it must not go unlisted and unkept. (A dry run's
        children, which it would have removed first, are gone.)"""
        if not os.path.lexists(self.db_path):
            return
        try:
            with sqlite.reading(self.db_path) as conn:
                children = [
                    child
                    for table in _LISTING_TABLES
                    if "parent_id" in sqlite.columns(conn, table)
                    for (child,) in conn.execute(
                        f"SELECT id FROM {table} WHERE parent_id = ?", (sid,)
                    )
                ]
        except sqlite3.Error as exc:
            raise RemovalError(f"cannot read {self.db_path}: {exc}") from exc
        children = [c for c in children if not remover.gone(str(c))]
        if children:
            raise RemovalError(
                f"has child sessions {', '.join(sorted(set(map(str, children))))}, which "
                "opencode session delete would take too"
            )

    def _keep_taken(self, before: list[TableRows], sid: str, remover: Remover) -> list[str]:
        """Keep in the trash the rows read before `opencode session delete`
        that it took (any it left are ours to delete, and kept then); the
        `<db>#<table>` of each table it took rows of."""
        kept = []
        for rows in before:
            try:
                (now,) = sqlite.read_rows(Path(rows.db), [(rows.table, _key(rows.table), sid)])
            except (RemovalError, ValueError):
                now = TableRows(rows.db, rows.table, rows.columns, ())
            taken = _taken(rows, now)
            if taken.rows:
                remover.keep_rows(taken)
                kept.append(f"{rows.db}#{rows.table}")
        return kept

    def _finish(
        self,
        session: Session,
        remover: Remover,
        handled: tuple[str, ...],
        outputs: list[Artifact],
    ) -> None:
        """Rows (listing rows first, kept in the trash), the tool outputs
        before the part rows that point at them (nothing else connects them
        to the session), then files (the session file first). Rows of
        `handled` tables are the binary's: any it left are reported, never
        written."""
        rows = [a for a in _rows(session) if _table(a) not in handled]
        if rows:
            sqlite.ensure_alone({_db(a) for a in rows}, ProcessTable.snapshot(self.env.uid))
        rows.sort(key=lambda a: _order(_table(a)))
        pointing = [a for a in rows if outputs and _table(a) == _POINTING]
        self._delete_rows(session.id, [a for a in rows if a not in pointing], remover)
        self._remove_outputs(session.id, outputs, remover)
        self._delete_rows(session.id, pointing, remover)
        files = [a for a in session.artifacts if a.kind not in (KIND_ROW, KIND_TOOL_OUTPUT)]
        for artifact in sorted(files, key=lambda a: not a.primary):
            if artifact.linked:
                remover.residual(artifact.path)
            else:
                remover.remove_path(artifact)
        for artifact in session.artifacts:
            if artifact.kind != KIND_ROW:
                continue
            # In a dry run the binary has not run: its rows are not left over.
            left_by_binary = _table(artifact) in handled and not remover.dry_run
            if artifact.linked or left_by_binary:
                remover.residual(artifact.path)
        for path in session.residual:
            remover.residual(path)

    @staticmethod
    def _delete_rows(sid: str, rows: list[Artifact], remover: Remover) -> None:
        """One transaction per database, each row kept in the trash inside it."""
        if not remover.dry_run:
            for db, deletions in _deletions(rows, sid):
                sqlite.delete_rows(db, deletions, keep=remover.keep_rows)
        for artifact in rows:
            remover.removed_at_once(artifact.path)

    def _remove_outputs(self, sid: str, outputs: list[Artifact], remover: Remover) -> None:
        """The session's tool outputs, each unless another session's part
        rows point at it now (a fork made since the listing): it is then
        that session's, and stays. When that cannot be read, they stay and
        are reported."""
        if not outputs:
            return
        try:
            used = self._outputs_used_by_others(sid)
        except sqlite3.Error as exc:
            log.warning("cannot tell who uses tool outputs; left", id=sid, error=str(exc))
            for artifact in outputs:
                remover.residual(artifact.path)
            return
        for artifact in outputs:
            if os.path.basename(artifact.path) in used:
                log.info("tool output used by another session; left", path=artifact.path)
            elif artifact.linked:
                remover.residual(artifact.path)
            else:
                remover.remove_path(artifact)

    def _outputs_used_by_others(self, sid: str) -> set[str]:
        if not os.path.lexists(self.db_path):
            return set()
        with sqlite.reading(self.db_path) as conn:
            refs = _tool_output_refs(conn)
        return {name for name, sids in refs.items() if sids - {sid}}

    # -- listing ----------------------------------------------------------
    def _list(self, only: frozenset[str] | None) -> _Listing:
        """Everything in the data dir that names a session (only those in
        `only` when it is given)."""
        listing = _Listing(linked_root=root_problem(self.env, self.data_dir) is not None)
        storage = self.data_dir / "storage"
        outputs_dir = self.data_dir / _TOOL_OUTPUT
        # Listed whatever `only` says: the part rows are read only when there
        # is a tool output to attribute.
        outputs_linked = listing.linked_root or disk.is_link(outputs_dir)
        outputs = _Folder(str(outputs_dir), outputs_linked, True, listing.unlisted)
        self._list_json(only, listing)
        self._list_leftovers(only, storage, listing)
        self._list_rows(only, listing, outputs.may_hold("tool_"))
        for name, sids in sorted(listing.outputs.items()):
            # A file other sessions point at too (a fork's copied parts) is
            # none of them alone: it stays while any of them does.
            owner = next(iter(sids)) if len(sids) == 1 else None
            path = outputs.has(name) if owner in listing.found else None
            if owner is not None and path is not None:
                file = _File(path, KIND_TOOL_OUTPUT, outputs.linked)
                listing.found[owner].files.append(file)
        base = listing.linked_root or disk.is_link(storage)
        # Whether each storage folder is a link, looked at once per listing
        # rather than once per session; for a scan, what each holds too.
        linked = {folder: base or disk.is_link(storage / folder) for folder in _STORAGE_FOLDERS}
        folders = {
            folder: _Folder(str(storage / folder), linked[folder], only is None, listing.unlisted)
            for folder in _STORAGE_FOLDERS
        }
        for sid, found in listing.found.items():
            found.files.extend(_storage_files(sid, folders, found.unlisted))
        return listing

    def _list_json(self, only: frozenset[str] | None, listing: _Listing) -> None:
        sessions = self.data_dir / "storage" / "session"
        linked = listing.linked_root or disk.is_link(sessions.parent) or disk.is_link(sessions)
        for project in entries(sessions, listing.unlisted):
            if not project.dir:
                continue
            for entry in entries(project.path, listing.unlisted):
                if not entry.name.endswith(".json") or entry.dir:
                    continue
                sid = self.canonical_id(entry.name.removesuffix(".json"))
                if sid is None:
                    log.warning("session file name is not a session id; skipped", path=entry.path)
                    continue
                if only is not None and sid not in only:
                    continue
                found = listing.found.setdefault(sid, _Found())
                found.files.append(_File(entry.path, KIND_SESSION, linked or project.link, True))
                record = None if entry.link else _read_info(entry.path, sid)
                if record is None or record.updated is None:
                    found.undated = True
                if record is not None:
                    found.records.append(record)

    def _list_rows(self, only: frozenset[str] | None, listing: _Listing, outputs: bool) -> None:
        db = self.db_path
        if not os.path.lexists(db):
            return
        try:
            with sqlite.reading(db) as conn:
                listed = [
                    (t, *row) for t in _LISTING_TABLES for row in self._listing_rows(conn, t, only)
                ]
                tables = _session_tables(conn)
                keyed = [
                    (table, _keyed_ids(conn, table, _key(table), only))
                    for table in tables
                    if table not in _LISTING_TABLES
                ]
                refs = _tool_output_refs(conn) if outputs else {}
        except sqlite3.Error as exc:
            log.warning(
                "opencode database unreadable; opencode sessions undated",
                db=str(db),
                error=str(exc),
            )
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
                if self.canonical_id(sid) is not None:
                    listing.found.setdefault(sid, _Found()).rows[table] = None

    def _list_leftovers(
        self, only: frozenset[str] | None, storage: Path, listing: _Listing
    ) -> None:
        """Message dirs, todo and diff files name their session too: what a
        removal stopped half way (or `opencode session delete`) leaves is
        listed, so that the next removal finds and finishes it."""
        names: list[str] = []
        unlisted = listing.unlisted
        for folder, suffix in (("message", ""), ("todo", ".json"), ("session_diff", ".json")):
            if only is not None:
                present = _Folder(str(storage / folder), False, False, unlisted).has
                names.extend(s for s in only if present(f"{s}{suffix}"))
                continue
            names.extend(
                e.name.removesuffix(suffix)
                for e in entries(storage / folder, unlisted)
                if e.name.endswith(suffix) and e.dir == (suffix == "")
            )
        for name in names:
            sid = self.canonical_id(name)
            if sid is not None:
                listing.found.setdefault(sid, _Found())

    def _listing_rows(
        self, conn: sqlite3.Connection, table: str, only: frozenset[str] | None
    ) -> list[tuple[str, _Record]]:
        cols = sqlite.columns(conn, table)
        if "id" not in cols:
            return []
        time_col = next((c for c in ("time_updated", "updated_at") if c in cols), None)
        wanted = [c for c in ("parent_id", time_col, "directory") if c is not None and c in cols]
        sql = f"SELECT {', '.join(['id', *wanted])} FROM {table}"
        rows = conn.execute(*sqlite.among(sql, "id", only))
        found = []
        for row in rows:
            record = dict(zip(["id", *wanted], row, strict=True))
            sid = record["id"]
            if not isinstance(sid, str) or self.canonical_id(sid) is None:
                log.warning(
                    "session row id is not a session id; skipped", table=table, id=repr(sid)[:80]
                )
                continue
            updated = sqlite.column_time(record.get(time_col)) if time_col else None
            directory = record.get("directory")
            directory = directory if isinstance(directory, str) else None
            parent = self._parent(record.get("parent_id"), sid)
            found.append((sid, _Record(updated, parent, directory)))
        return found

    def _parent(self, value: object, sid: str) -> str | None:
        if isinstance(value, str) and value != sid and self.canonical_id(value):
            return value
        return None

    # -- building a session ---------------------------------------------
    def _session(self, sid: str, listing: _Listing) -> Session | None:
        found = listing.found.get(sid)
        if found is None:
            return None
        root = self._root
        seen: set[tuple[int, int]] = set()
        artifacts: list[Artifact] = []
        for file in found.files:
            item = disk.artifact(
                file.path, file.kind, root, primary=file.primary, linked=file.linked, seen=seen
            )
            if item is not None:
                artifacts.append(item)
        times = [r.updated for r in found.records if r.updated is not None]
        updated = max(times) if times else None
        # Message, part and event rows carry no time that says more than the
        # session's own: they are as old as the session.
        file_times = [a.mtime for a in artifacts if a.mtime is not None]
        own_time = updated if updated is not None else max(file_times, default=None)
        linked = listing.linked_root or disk.is_link(self.db_path)
        for table in sorted(found.rows, key=listing.tables.index):
            primary = table in _LISTING_TABLES
            mtime = found.rows[table] if primary else own_time
            artifacts.append(
                Artifact(f"{self.db_path}#{table}", KIND_ROW, 0, mtime, None, primary, linked)
            )
        if not artifacts:
            return None
        parent = next((r.parent for r in found.records if r.parent), None)
        workspace = next((r.directory for r in found.records if r.directory), None)
        return Session(
            agent=self.name,
            id=sid,
            workspace=workspace,
            parent=parent,
            artifacts=artifacts,
            updated=updated,
            undated=found.undated or listing.incomplete,
            bytes=sum(a.bytes for a in artifacts),
            unreadable=unreadable(artifacts, [*listing.unlisted, *found.unlisted]),
        )


ADAPTER = OpencodeAdapter


# -- helpers ------------------------------------------------------------------


class _Folder:
    """One of the storage folders that name sessions' files: its path,
    whether it lies behind a link, and for a scan the names it holds (listed
    once, rather than a lookup per session and message). One that cannot be
    listed or looked into is added to `unlisted`."""

    def __init__(self, path: str, linked: bool, listed: bool, unlisted: Unlisted) -> None:
        self.path = path
        self.linked = linked
        self.unlisted = unlisted
        self._names = _names(path, unlisted) if listed else None

    def has(self, name: str) -> str | None:
        """The path of `name` in this folder when it exists (as anything)."""
        path = f"{self.path}/{name}"
        known = self._names
        if known is not None:
            return path if name in known else None
        try:
            os.lstat(path)
        except OSError as exc:
            if unlisted_error(exc):
                self.unlisted.add(self.path, exc)
            return None
        return path

    def may_hold(self, prefix: str) -> bool:
        """Whether a name starting with `prefix` may be here (True when the
        folder was not listed, or could not be)."""
        known = self._names
        return known is None or any(name.startswith(prefix) for name in known)


def _names(directory: str, unlisted: Unlisted) -> frozenset[str] | None:
    """Every name in `directory`; None when it cannot be listed (each name
    is then looked up on its own; it is added to `unlisted` all the same)."""
    try:
        with disk.scandir(directory) as listing:
            return frozenset(entry.name for entry in listing)
    except FileNotFoundError:
        return frozenset()
    except OSError as exc:
        if unlisted_error(exc) and not disk.is_link(directory):
            unlisted.add(directory, exc)
        return None


def _storage_files(sid: str, folders: dict[str, _Folder], unlisted: Unlisted) -> Iterator[_File]:
    """The part dir of each of the session's messages (named by the message
    file names), its message dir, its todo and diff files, in the order they
    are removed; its message dir is added to `unlisted` when it cannot be
    listed."""
    message = folders["message"]
    messages = message.has(sid)
    if messages is not None:
        # Message names read through a link could name anyone's parts.
        if not (message.linked or disk.is_link(messages)):
            yield from _part_dirs(messages, folders["part"], unlisted)
        # After the part dirs: only its message files name them, so a
        # removal stopped between the two must not have taken it first.
        yield _File(messages, KIND_MESSAGES, message.linked)
    for folder, kind in (("todo", KIND_TODO), ("session_diff", KIND_DIFF)):
        path = folders[folder].has(f"{sid}.json")
        if path is not None:
            yield _File(path, kind, folders[folder].linked)


def _part_dirs(messages: str, parts: _Folder, unlisted: Unlisted) -> Iterator[_File]:
    for entry in entries(messages, unlisted):
        msgid = entry.name.removesuffix(".json")
        if entry.dir or not entry.name.endswith(".json") or not _ID.fullmatch(msgid):
            continue
        path = parts.has(msgid)
        if path is not None:
            yield _File(path, KIND_PARTS, parts.linked)


def _is_service(cmdline: tuple[str, ...]) -> bool:
    return "serve" in cmdline and "--service" in cmdline


def _key(table: str) -> str:
    """The column naming the session in one of the session tables."""
    return _KEYS.get(table, _SESSION_KEY)


def _order(table: str) -> int:
    return _ORDER.index(table) if table in _KEYS else len(_ORDER)


def _session_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of this database that hold sessions' rows, in the order
    they are deleted: the known ones this version has, then any other table
    with a `session_id` column (a later opencode's), by name. Tables that
    are never a session's are not among them, whatever their columns."""
    names = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    found = []
    for (name,) in names:
        if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
            continue
        if name in _SHARED_TABLES or _key(name) not in sqlite.columns(conn, name):
            continue
        found.append(name)
    return sorted(found, key=lambda t: (_order(t), t))


def _keyed_ids(
    conn: sqlite3.Connection, table: str, key: str, only: frozenset[str] | None
) -> set[str]:
    """Ids with rows in `table`."""
    sql = f'SELECT DISTINCT "{key}" FROM "{table}"'
    rows = conn.execute(*sqlite.among(sql, key, only)).fetchall()
    return {r[0] for r in rows if isinstance(r[0], str)}


def _tool_output_refs(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """The tool-output files part rows point at (by file name), each with
    the sessions whose parts do. Every session's parts are read: whether a
    file is one session's alone depends on all of them."""
    if not {"session_id", "data"} <= sqlite.columns(conn, "part"):
        return {}
    refs: dict[str, set[str]] = {}
    rows = conn.execute(
        "SELECT session_id, data FROM part WHERE instr(data, ?) > 0", (_TOOL_OUTPUT,)
    )
    for sid, data in rows:
        if isinstance(data, bytes):
            data = data.decode("utf-8", "replace")
        if not isinstance(sid, str) or not isinstance(data, str):
            continue
        for name in _TOOL_OUTPUT_NAME.findall(data):
            refs.setdefault(name, set()).add(sid)
    return refs


def _read_info(path: str, sid: str) -> _Record | None:
    """Parent, update time and workspace from a 1.x session file; None
    (logged) when it cannot be read (the session is then undated)."""
    handle = disk.open_quietly(path)
    if handle is None:
        log.warning("session file cannot be opened", path=path)
        return None
    try:
        with handle:
            data = handle.read(_JSON_LIMIT + 1)
    except OSError as exc:
        log.warning("session file cannot be read", path=path, error=str(exc))
        return None
    if len(data) > _JSON_LIMIT:
        log.warning("session file too large; undated", path=path)
        return None
    try:
        info = json.loads(data)
    except ValueError:
        log.warning("session file is not JSON (truncated?); undated", path=path)
        return None
    if not isinstance(info, dict) or info.get("id", sid) != sid:
        log.warning("session file names another session; undated", path=path)
        return None
    times = info.get("time")
    updated = sqlite.column_time(times.get("updated")) if isinstance(times, dict) else None
    parent = info.get("parentID")
    directory = info.get("directory")
    return _Record(
        updated,
        parent if isinstance(parent, str) and parent != sid and _ID.fullmatch(parent) else None,
        directory if isinstance(directory, str) else None,
    )


def _paths(session: Session) -> set[str]:
    return {a.path for a in session.artifacts}


def _deletions(rows: list[Artifact], sid: str) -> list[tuple[Path, list[Deletion]]]:
    """The session's rows of each database, table by table, in the order given."""
    by_db: dict[Path, list[Deletion]] = {}
    for artifact in rows:
        table = _table(artifact)
        by_db.setdefault(_db(artifact), []).append((table, _key(table), sid))
    return list(by_db.items())


def _taken(before: TableRows, now: TableRows) -> TableRows:
    """The rows of `before` that are not in `now` (compared on the columns
    both have: the agent's command may have migrated the table)."""
    common = [c for c in before.columns if c in now.columns]
    ours = [before.columns.index(c) for c in common]
    theirs = [now.columns.index(c) for c in common]
    still = {tuple(row[i] for i in theirs) for row in now.rows}
    taken = tuple(row for row in before.rows if tuple(row[i] for i in ours) not in still)
    return TableRows(before.db, before.table, before.columns, taken)


def _rows(session: Session) -> list[Artifact]:
    return [a for a in session.artifacts if a.kind == KIND_ROW and not a.linked]


def _table(artifact: Artifact) -> str:
    return artifact.path.rpartition("#")[2]


def _db(artifact: Artifact) -> Path:
    return Path(artifact.path.rpartition("#")[0])
