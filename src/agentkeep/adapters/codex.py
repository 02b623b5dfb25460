"""Codex CLI: rollouts, the `threads` rows Codex lists sessions by, and the
rest of what names a session under `$CODEX_HOME` (FIELD-NOTES "Codex CLI").

A session is any id that a rollout, a `threads` row, other rows or a TUI
reference names (rows and references alone are what a removal stopped half
way leaves; they are listed so that it can be finished). Rollouts live in
`sessions/YYYY/MM/DD/` (the date is the start, never the activity) and
`archived_sessions/`, plain or `.jsonl.zst`; Codex compresses and
decompresses them under a watcher, so every listing looks for both names.

Codex keeps a database per concern in the root, `<name>_<n>.sqlite` (state,
thread_history, goals, queue, memories, logs in 0.169), and adds tables and
databases between versions: every table of them with a `thread_id` (or
`session_id`) column is read from the schema, never from a list of names, so
the rows a newer Codex writes are the session's too (`<db>#<table>`
artifacts).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO

import structlog
import zstandard

from agentkeep import disk
from agentkeep.adapters import owndelete, sqlite
from agentkeep.adapters.base import Adapter, Known, Remover, Root, listed, load
from agentkeep.adapters.dirs import Unlisted, entries, root_problem, unreadable
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact, Holder, HolderKind, Session
from agentkeep.processes import ProcessTable

log = structlog.get_logger("agentkeep.adapters.codex")

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The id is the last 36 characters before the extension; the timestamp in
# front of it is Codex's business and is not parsed.
_ROLLOUT = re.compile(r"rollout-.+-(?P<id>[0-9A-Za-z-]{36})\.jsonl(?:\.zst)?")
_STATE_DB = re.compile(r"state_\d+\.sqlite")
# Codex names each database `<name>_<schema version>.sqlite`.
_DATABASE = re.compile(r"[a-z][a-z_]*_\d+\.sqlite")
# Table names are put into SQL as they are: anything else is not Codex's.
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TUI_REFS = "tui-thread-reference-capabilities"
_INDEX = "session_index.jsonl"
# session_meta carries the base instructions: tens of KiB is normal.
_META_LIMIT = 4 << 20
_CHUNK = 64 << 10
_INDEX_LINE_LIMIT = 1 << 20
# `codex delete` exists from 0.141 on; an older codex would take "delete" as
# a prompt and start a session, so its version is checked first.
_DELETE_SINCE = (0, 141)
_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_DELETE_TIMEOUT_S = 60.0
_VERSION_TIMEOUT_S = 10.0

KIND_ROLLOUT = "rollout"
KIND_ARCHIVED = "archived-rollout"
KIND_TUI_REF = "tui-reference"
KIND_ROW = "row"
_ROLLOUT_KINDS = (KIND_ROLLOUT, KIND_ARCHIVED)
THREADS = "threads"
THREAD_ID = "thread_id"
# The columns naming a session in any other table: `thread_id` in most,
# `session_id` in some (0.171's session_model_ids, which codex delete clears).
SESSION_ID = "session_id"
_KEYS = (THREAD_ID, SESSION_ID)
# A subagent's edge names both threads; it is each one's row.
SPAWN_EDGES = "thread_spawn_edges"
SPAWN_PARENT, SPAWN_CHILD = "parent_thread_id", "child_thread_id"


@dataclass(frozen=True)
class _Meta:
    """What a rollout's session_meta line says of its session."""

    cwd: str | None
    parent: str | None


@dataclass(frozen=True)
class _File:
    path: Path
    kind: str
    linked: bool


@dataclass(frozen=True)
class _Thread:
    db: Path
    updated: float | None
    cwd: str | None
    parent: str | None


@dataclass
class _Found:
    """Everything one listing found for one id."""

    files: list[_File] = field(default_factory=list)
    threads: list[_Thread] = field(default_factory=list)
    # (database, table) of every other table holding rows of the session.
    rows: list[tuple[Path, str]] = field(default_factory=list)
    spawned_by: str | None = None
    in_index: bool = False


@dataclass
class _Listing:
    found: dict[str, _Found] = field(default_factory=dict)
    # A state database could not be read: a newer update time of any
    # session may hide there.
    incomplete: bool = False
    linked_root: bool = False
    # The root, a rollout dir or tui-thread-reference-capabilities/ could
    # not be listed: any session may have a rollout or a database there
    # (which of them a date dir holds cannot be told), so all are unsafe.
    unlisted: Unlisted = field(default_factory=Unlisted)


class CodexAdapter(Adapter):
    name = "codex"
    evidence_kinds = frozenset(_ROLLOUT_KINDS)
    id_in_name = _UUID

    @cached_property
    def root(self) -> Path:
        value = self.env.get("CODEX_HOME")
        # A relative CODEX_HOME would depend on the daemon's cwd: ignored.
        if value and os.path.isabs(value):
            return Path(value)
        return self.env.home / ".codex"

    # -- where ----------------------------------------------------------
    def roots(self) -> list[Root]:
        return [Root.check(self.root, self.name, self.env.uid)]

    def watch_dirs(self) -> list[Path]:
        root = self.root
        dirs = [root, root / "sessions", root / "archived_sessions"]
        for year in _real_dirs(root / "sessions"):
            dirs.append(year)
            for month in _real_dirs(year):
                dirs.append(month)
                dirs.extend(_real_dirs(month))
        return dirs

    def listed_dirs(self) -> list[Path]:
        return [*self.watch_dirs(), self.root / _TUI_REFS]

    # -- what -----------------------------------------------------------
    def canonical_id(self, raw: str) -> str | None:
        if not isinstance(raw, str):
            return None
        lowered = raw.lower()
        return lowered if _UUID.fullmatch(lowered) else None

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """One pass over the date dirs and databases for all of them."""
        listing = self._list(names)
        for sid in sorted(listing.found):
            found = listing.found[sid]
            if names is None and not found.files and not found.threads:
                # Only rows: what a removal stopped half way leaves (or rows
                # `codex delete` left, reported residual when it ran). Not a
                # session Codex lists, nor one a scan shows; listed by name
                # they are, so that a journal can finish a removal.
                continue
            session = self._session(sid, listing)
            if session is not None:
                yield session

    def session_for_path(self, path: str) -> str | None:
        try:
            rel = Path(path).relative_to(self.root)
        except ValueError:
            return None
        parts = rel.parts
        if len(parts) >= 2 and parts[0] in ("sessions", "archived_sessions"):
            return _id_from_name(parts[-1])
        if len(parts) == 2 and parts[0] == _TUI_REFS:
            return parts[1] if _UUID.fullmatch(parts[1]) else None
        return None

    def databases(self, unlisted: Unlisted | None = None) -> list[Path]:
        return [
            Path(e.path)
            for e in entries(self.root, unlisted)
            if _DATABASE.fullmatch(e.name) and not e.dir
        ]

    # -- in use ---------------------------------------------------------
    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """A command line naming the id, or a process with a rollout open
        (Codex keeps the rollout open while it appends to it)."""
        found = list(procs.naming(session.id))
        for path, pid in _open_rollouts(session.artifacts, procs):
            found.append(Holder(pid, HolderKind.PROCESS, f"has {os.path.basename(path)} open"))
        return list(dict.fromkeys(found))

    def may_hold(self, evidence: Sequence[Artifact], procs: ProcessTable) -> bool:
        # A rollout is evidence only while a process has it open.
        return next(_open_rollouts(evidence, procs), None) is not None

    # -- removal --------------------------------------------------------
    def remove(self, session: Session, remover: Remover) -> None:
        """`codex delete --force` when Codex is installed and still lists the
        session (it knows its own layout), then whatever it left; else the
        `threads` row first, the files next, every other row last
        (invariant 5). Every row goes into the trash either way (keep_rows)."""
        if session.unsafe:
            raise RemovalError(session.unsafe)
        # Checked before any change, on every path: a state database we cannot
        # read may hold this session's row, and the check after `codex delete`
        # could not see it either.
        self._ensure_state_readable()
        binary = owndelete.binary(self.env, "codex")
        # `codex delete` finds a session by its row or its rollout and fails
        # without both; rows alone are removed here.
        if binary is not None and not any(_listed_by(a) for a in session.artifacts):
            binary = None
        # Every check comes before the first change, so a refused removal
        # leaves the session whole (never a file without its row).
        # `codex delete` writes every database of Codex's.
        if binary is not None:
            dbs = set(self.databases())
        else:
            dbs = {_db(a) for a in session.artifacts if a.kind == KIND_ROW and not a.linked}
        if dbs:
            sqlite.ensure_alone(dbs, ProcessTable.snapshot(self.env.uid))
        if binary is not None:
            self._ensure_no_subagents(session, remover)
        if binary is not None and remover.dry_run:
            # A dry run calls no binary, not even for its version: it reports
            # what a real run moves and hands to `codex delete`.
            self._remove_rollouts(session, remover)
            remover.removed_at_once(_delete_command(session.id))
            _report_linked(session, remover)
            return
        if binary is not None and self._can_delete(binary):
            self._remove_with_binary(session, remover, binary)
        else:
            self._remove_directly(session, remover)

    def _can_delete(self, binary: str) -> bool:
        run = owndelete.run(self.env, [binary, "--version"], _VERSION_TIMEOUT_S)
        match = _VERSION_RE.search(run.stdout)
        if run.failure or match is None:
            log.warning("cannot tell the codex version; removing without it", error=run.failure)
            return False
        version = (int(match[1]), int(match[2]))
        if version < _DELETE_SINCE:
            log.info("codex has no delete command; removing without it", version=match[0])
            return False
        return True

    def _ensure_no_subagents(self, session: Session, remover: Remover) -> None:
        """`codex delete` removes the session's subagent threads with it: one
        still on disk would go unlisted, unjournaled and untrashed. agentkeep
        removes descendants first (invariant 3), so this only refuses what
        changed since the plan (a dry run's removed children are gone)."""
        children = frozenset(c for c in self._spawned_children(session.id) if not remover.gone(c))
        present = listed(self, children) if children else {}
        for child in sorted(present):
            s = present[child]
            if s is None:
                continue
            if any(_listed_by(a) for a in s.artifacts):
                raise RemovalError(
                    f"subagent thread {child} is still present: codex delete would remove it too"
                )

    def _remove_with_binary(self, session: Session, remover: Remover, binary: str) -> None:
        rows = [a for a in session.artifacts if a.kind == KIND_ROW and not a.linked]
        _keep(session.id, rows, remover)
        self._remove_rollouts(session, remover)
        command = _delete_command(session.id)
        run = owndelete.run(self.env, [binary, *command.split()[1:]], _DELETE_TIMEOUT_S)
        # `codex delete` is not transactional (#39919): list again from disk.
        left = load(self, session.id)
        left_rows = {a.path for a in left.artifacts if a.kind == KIND_ROW} if left else set()
        if not run.failure or left_rows != {a.path for a in rows}:
            # Its rows were kept and its rollouts moved first: the trash
            # holds all the command took.
            remover.removed_at_once(command, kept=True)
        if left is None:
            return
        listed = [a for a in left.artifacts if _table(a) == THREADS]
        if run.failure and listed:
            raise RemovalError(f"codex delete failed ({run.failure}); the session is still listed")
        if run.failure:
            log.warning("codex delete failed half way; finishing", id=session.id, error=run.failure)
        for artifact in sorted(left.artifacts, key=lambda a: not a.primary):
            if artifact.kind == KIND_ROW or artifact.linked:
                # Rows Codex left are its own to explain: never written here.
                remover.residual(artifact.path)
            else:
                remover.remove_path(artifact)
        for path in left.residual:
            remover.residual(path)

    def _remove_rollouts(self, session: Session, remover: Remover) -> None:
        """The rollouts go first, into the trash, before `codex delete` runs:
        Codex 0.169 neither lists nor resumes a thread whose rollout is gone
        (FIELD-NOTES), so a removal stopped here leaves nothing Codex offers,
        and the trash keeps the rollout that `codex delete` would unlink
        (it removes the rows without it)."""
        for artifact in session.artifacts:
            if artifact.kind in _ROLLOUT_KINDS:
                remover.remove_path(artifact)

    def _remove_directly(self, session: Session, remover: Remover) -> None:
        rows = [a for a in session.artifacts if a.kind == KIND_ROW and not a.linked]
        threads = [a for a in rows if _table(a) == THREADS]
        others = [a for a in rows if _table(a) != THREADS]
        _delete(session.id, threads, remover)
        files = [a for a in session.artifacts if a.kind != KIND_ROW]
        for artifact in sorted(files, key=lambda a: not a.primary):
            if artifact.linked:
                remover.residual(artifact.path)
            else:
                remover.remove_path(artifact)
        _delete(session.id, others, remover)
        for artifact in session.artifacts:
            if artifact.kind == KIND_ROW and artifact.linked:
                remover.residual(artifact.path)
        for path in session.residual:
            remover.residual(path)

    def _ensure_state_readable(self) -> None:
        for db in self.databases():
            if not _STATE_DB.fullmatch(db.name):
                continue
            try:
                with sqlite.reading(db):
                    pass
            except sqlite3.Error as exc:
                raise RemovalError(f"cannot read {db}: {exc}") from exc

    def _spawned_children(self, sid: str) -> frozenset[str]:
        children: set[str] = set()
        for db in self.databases():
            try:
                with sqlite.reading(db) as conn:
                    if {SPAWN_PARENT, SPAWN_CHILD} <= sqlite.columns(conn, SPAWN_EDGES):
                        sql = f"SELECT {SPAWN_CHILD} FROM {SPAWN_EDGES} WHERE {SPAWN_PARENT} = ?"
                        children.update(r[0] for r in conn.execute(sql, (sid,)))
            except sqlite3.Error as exc:
                raise RemovalError(f"cannot read {db}: {exc}") from exc
        return frozenset(c for c in children if isinstance(c, str) and _UUID.fullmatch(c))

    # -- listing ----------------------------------------------------------
    def _list(self, only: frozenset[str] | None) -> _Listing:
        """Everything under the root that names a session (only those in
        `only` when it is given)."""
        root = self.root
        listing = _Listing(linked_root=root_problem(self.env, root) is not None)
        for sid, file in self._rollouts(only, listing):
            listing.found.setdefault(sid, _Found()).files.append(file)
        for db in self.databases(listing.unlisted):
            try:
                self._read_database(db, only, listing)
            except sqlite3.Error as exc:
                if _STATE_DB.fullmatch(db.name):
                    log.warning(
                        "state database unreadable; codex sessions undated",
                        db=str(db),
                        error=str(exc),
                    )
                    listing.incomplete = True
                else:
                    log.warning(
                        "codex database unreadable; its rows not attributed",
                        db=str(db),
                        error=str(exc),
                    )
        # What a removal stopped half way leaves (rows, a TUI reference)
        # still names the session: it is listed, so the next removal finds
        # and finishes it.
        for entry in entries(root / _TUI_REFS, listing.unlisted):
            if _UUID.fullmatch(entry.name) and (only is None or entry.name in only):
                file = _File(Path(entry.path), KIND_TUI_REF, listing.linked_root)
                listing.found.setdefault(entry.name, _Found()).files.append(file)
        # session_index.jsonl only ever names: it never makes a session.
        for sid in self._index_ids(only):
            if sid in listing.found:
                listing.found[sid].in_index = True
        return listing

    def _read_database(self, db: Path, only: frozenset[str] | None, listing: _Listing) -> None:
        """Every table of `db` that holds sessions' rows, found from its
        schema: `threads` by `id`, the spawn edges by either thread, any other
        table by its `thread_id` or `session_id` column. One read transaction, so a table
        is never seen from two moments."""
        with sqlite.reading(db) as conn:
            conn.execute("BEGIN")
            for table in _tables(conn):
                cols = sqlite.columns(conn, table)
                if table == THREADS and "id" in cols:
                    for sid, thread in self._threads(conn, db, cols, only):
                        listing.found.setdefault(sid, _Found()).threads.append(thread)
                elif table == SPAWN_EDGES and {SPAWN_PARENT, SPAWN_CHILD} <= cols:
                    for parent, child in _edges(conn, only):
                        for sid in (parent, child):
                            if only is None or sid in only:
                                listing.found.setdefault(sid, _Found()).rows.append((db, table))
                        if only is None or child in only:
                            listing.found[child].spawned_by = parent
                else:
                    for key in (k for k in _KEYS if k in cols):
                        sql = f"SELECT DISTINCT {key} FROM {table}"
                        for (sid,) in conn.execute(*sqlite.among(sql, key, only)):
                            if isinstance(sid, str) and _UUID.fullmatch(sid):
                                listing.found.setdefault(sid, _Found()).rows.append((db, table))

    def _rollouts(
        self, only: frozenset[str] | None, listing: _Listing
    ) -> Iterator[tuple[str, _File]]:
        root = self.root
        top = listing.linked_root
        sessions = root / "sessions"
        for year, y_link in _dirs(sessions, top or disk.is_link(sessions), listing):
            for month, m_link in _dirs(year, y_link, listing):
                for day, d_link in _dirs(month, m_link, listing):
                    yield from _rollouts_in(day, KIND_ROLLOUT, only, d_link, listing)
        archived = root / "archived_sessions"
        archived_link = top or disk.is_link(archived)
        yield from _rollouts_in(archived, KIND_ARCHIVED, only, archived_link, listing)

    def _threads(
        self, conn: sqlite3.Connection, db: Path, cols: set[str], only: frozenset[str] | None
    ) -> list[tuple[str, _Thread]]:
        # parent_thread_id: a column of older versions (0.169 keeps the edge
        # in thread_spawn_edges instead).
        wanted = [
            c for c in ("updated_at", "updated_at_ms", "cwd", "parent_thread_id") if c in cols
        ]
        sql = f"SELECT {', '.join(['id', *wanted])} FROM {THREADS}"
        rows = conn.execute(*sqlite.among(sql, "id", only))
        records = [dict(zip(["id", *wanted], row, strict=True)) for row in rows]
        found = []
        for record in records:
            sid = record["id"]
            if not isinstance(sid, str) or not _UUID.fullmatch(sid):
                log.warning(
                    "threads row id is not a canonical UUID; skipped", db=str(db), id=repr(sid)[:80]
                )
                continue
            cwd = record.get("cwd")
            cwd = cwd if isinstance(cwd, str) else None
            parent = record.get("parent_thread_id")
            parent = parent if isinstance(parent, str) and _UUID.fullmatch(parent) else None
            found.append((sid, _Thread(db, _thread_time(record), cwd, parent)))
        return found

    def _index_ids(self, only: frozenset[str] | None) -> set[str]:
        """Ids session_index.jsonl names: reported as residual, never edited
        (it is Codex's own list of names, shared by every session)."""
        handle = disk.open_quietly(self.root / _INDEX)
        if handle is None:
            return set()
        ids: set[str] = set()
        with handle:
            while line := handle.readline(_INDEX_LINE_LIMIT):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                sid = record.get("id") if isinstance(record, dict) else None
                if isinstance(sid, str) and _UUID.fullmatch(sid) and (only is None or sid in only):
                    ids.add(sid)
        return ids

    # -- building a session ---------------------------------------------
    def _session(self, sid: str, listing: _Listing) -> Session | None:
        found = listing.found.get(sid)
        if found is None:
            return None
        root = str(self.root)
        seen: set[tuple[int, int]] = set()
        artifacts: list[Artifact] = []
        meta: _Meta | None = None
        for file in sorted(found.files, key=lambda f: str(f.path)):
            is_rollout = file.kind in _ROLLOUT_KINDS
            item = disk.artifact(
                file.path, file.kind, root, primary=is_rollout, linked=file.linked, seen=seen
            )
            if item is None:
                continue  # gone since it was listed
            artifacts.append(item)
            if meta is None and is_rollout and not file.linked:
                meta = _read_meta(file.path, sid)
        times = [t.updated for t in found.threads if t.updated is not None]
        updated = max(times) if times else None
        file_times = [a.mtime for a in artifacts if a.mtime is not None]
        # Other rows have no time of their own: they are as old as the session
        # (rows left with nothing else are undated: kept until purged).
        own_time = updated if updated is not None else max(file_times, default=None)
        for thread in found.threads:
            artifacts.append(self._row(thread.db, THREADS, thread.updated, True, listing))
        for db, table in dict.fromkeys(found.rows):
            artifacts.append(self._row(db, table, own_time, False, listing))
        if not artifacts:
            return None
        parent = meta.parent if meta else None
        workspace = meta.cwd if meta else None
        for thread in found.threads:
            parent = parent or (thread.parent if thread.parent != sid else None)
            workspace = workspace or thread.cwd
        if found.spawned_by != sid:
            parent = parent or found.spawned_by
        return Session(
            agent=self.name,
            id=sid,
            workspace=workspace,
            parent=parent,
            artifacts=artifacts,
            updated=updated,
            undated=listing.incomplete,
            bytes=sum(a.bytes for a in artifacts),
            residual=[str(self.root / _INDEX)] if found.in_index else [],
            unreadable=unreadable(artifacts, listing.unlisted),
        )

    def _row(
        self, db: Path, table: str, mtime: float | None, primary: bool, listing: _Listing
    ) -> Artifact:
        return Artifact(
            path=f"{db}#{table}",
            kind=KIND_ROW,
            bytes=0,
            mtime=mtime,
            root=None,
            primary=primary,
            linked=listing.linked_root or disk.is_link(db),
        )


ADAPTER = CodexAdapter


# -- helpers ------------------------------------------------------------------


def _id_from_name(name: str) -> str | None:
    """The session id a rollout file name ends with; None unless it is a
    canonical lowercase UUID (Codex writes no other)."""
    match = _ROLLOUT.fullmatch(name)
    if match is None or not _UUID.fullmatch(match["id"]):
        return None
    return match["id"]


def _dirs(path: Path, linked: bool, listing: _Listing) -> Iterator[tuple[Path, bool]]:
    """Subdirectories of `path`; one reached through a link is walked (its
    files are reported as linked, never removed)."""
    if not os.path.isdir(path):
        return
    for entry in entries(path, listing.unlisted):
        if entry.dir:
            yield Path(entry.path), linked or entry.link


def _real_dirs(path: Path) -> list[Path]:
    return [Path(e.path) for e in entries(path) if e.dir and not e.link]


def _rollouts_in(
    directory: Path, kind: str, only: frozenset[str] | None, linked: bool, listing: _Listing
) -> Iterator[tuple[str, _File]]:
    for entry in entries(directory, listing.unlisted):
        if not entry.name.startswith("rollout-"):
            continue
        sid = _id_from_name(entry.name)
        if sid is None:
            log.warning("rollout name without a session id; skipped", path=entry.path)
            continue
        if only is not None and sid not in only:
            continue
        if entry.dir and not entry.link:
            log.warning("a directory named like a rollout; skipped", path=entry.path)
            continue
        yield sid, _File(Path(entry.path), kind, linked)


def _thread_time(record: dict[str, object]) -> float | None:
    """The newest of updated_at and updated_at_ms (Codex keeps seconds in one
    and, since migration 25, milliseconds in the other). A value present but
    unreadable, or no value at all, makes the row undated."""
    values = [record[c] for c in ("updated_at", "updated_at_ms") if record.get(c) is not None]
    times = [sqlite.column_time(v) for v in values]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


def _read_meta(path: Path, sid: str) -> _Meta | None:
    """Workspace and parent from the rollout's first line; None (logged)
    when it cannot be read. The id comes from the file name either way."""
    line = _first_line(path)
    if line is None:
        return None
    try:
        record = json.loads(line)
    except ValueError:
        log.warning("rollout first line is not JSON; parent and workspace unknown", path=str(path))
        return None
    payload = (
        record.get("payload")
        if isinstance(record, dict) and record.get("type") == "session_meta"
        else None
    )
    if not isinstance(payload, dict):
        log.warning("rollout does not start with session_meta", path=str(path))
        return None
    if payload.get("id") != sid:
        log.warning(
            "session_meta names another id; ignored",
            path=str(path),
            id=repr(payload.get("id"))[:80],
        )
        return None
    cwd = payload.get("cwd")
    return _Meta(cwd if isinstance(cwd, str) else None, _meta_parent(payload, sid))


def _meta_parent(payload: dict[str, object], sid: str) -> str | None:
    """A fork's source (its history may not be copied) before a subagent's
    spawning thread; both must stay while this session stays."""
    source = payload.get("source")
    subagent = source.get("subagent") if isinstance(source, dict) else None
    spawn = subagent.get("thread_spawn") if isinstance(subagent, dict) else None
    candidates = [payload.get("forked_from_id")]
    if isinstance(spawn, dict):
        candidates.append(spawn.get("parent_thread_id"))
    for candidate in candidates:
        if isinstance(candidate, str) and _UUID.fullmatch(candidate) and candidate != sid:
            return candidate
    return None


def _first_line(path: Path) -> bytes | None:
    handle = disk.open_quietly(path)
    if handle is None:
        log.warning("rollout cannot be opened", path=str(path))
        return None
    try:
        with handle:
            if path.name.endswith(".zst"):
                with zstandard.ZstdDecompressor().stream_reader(handle, closefd=False) as stream:
                    return _read_line(stream, path)
            return _read_line(handle, path)
    except (OSError, zstandard.ZstdError) as exc:
        log.warning("rollout cannot be read", path=str(path), error=str(exc))
        return None


def _read_line(stream: IO[bytes], path: Path) -> bytes | None:
    """The first line, read in chunks and never more than _META_LIMIT."""
    buffer = bytearray()
    while len(buffer) < _META_LIMIT:
        chunk = stream.read(_CHUNK)
        if not chunk:
            return bytes(buffer)
        newline = chunk.find(b"\n")
        if newline >= 0:
            buffer += chunk[:newline]
            return bytes(buffer)
        buffer += chunk
    log.warning("rollout first line too long; parent and workspace unknown", path=str(path))
    return None


def _table(artifact: Artifact) -> str | None:
    return artifact.path.rpartition("#")[2] if artifact.kind == KIND_ROW else None


def _db(artifact: Artifact) -> Path:
    return Path(artifact.path.rpartition("#")[0])


def _report_linked(session: Session, remover: Remover) -> None:
    for artifact in session.artifacts:
        if artifact.linked:
            remover.residual(artifact.path)


def _listed_by(artifact: Artifact) -> bool:
    """A record Codex finds a session by: its rollout or its `threads` row."""
    return not artifact.linked and (artifact.kind in _ROLLOUT_KINDS or _table(artifact) == THREADS)


def _delete_command(sid: str) -> str:
    # --force: without a terminal Codex refuses to confirm ("cannot confirm
    # session deletion without an interactive terminal"); it takes a UUID.
    return f"codex delete --force {sid}"


def _tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of a database whose names can be put into SQL as they are."""
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return sorted(n for n in names if isinstance(n, str) and _TABLE_NAME.fullmatch(n))


def _edges(conn: sqlite3.Connection, only: frozenset[str] | None) -> list[tuple[str, str]]:
    """(parent, child) of the spawn edges naming one of `only` (all of them
    when None), each a canonical id."""
    sql = f"SELECT {SPAWN_PARENT}, {SPAWN_CHILD} FROM {SPAWN_EDGES}"
    params: tuple[str, ...] = ()
    if only is not None:
        among = "IN (SELECT value FROM json_each(?))"
        sql += f" WHERE {SPAWN_PARENT} {among} OR {SPAWN_CHILD} {among}"
        ids = json.dumps(sorted(only))
        params = (ids, ids)
    return [
        (parent, child)
        for parent, child in conn.execute(sql, params)
        if isinstance(parent, str)
        and isinstance(child, str)
        and _UUID.fullmatch(parent)
        and _UUID.fullmatch(child)
    ]


def _deletions(sid: str, artifact: Artifact) -> list[sqlite.Deletion]:
    """The rows of the session that a row artifact stands for."""
    table = _table(artifact) or ""
    if table == THREADS:
        return [(THREADS, "id", sid)]
    if table == SPAWN_EDGES:
        return [(SPAWN_EDGES, SPAWN_CHILD, sid), (SPAWN_EDGES, SPAWN_PARENT, sid)]
    return [(table, key, sid) for key in _KEYS]


def _by_database(artifacts: list[Artifact]) -> dict[Path, list[Artifact]]:
    grouped: dict[Path, list[Artifact]] = {}
    for artifact in artifacts:
        grouped.setdefault(_db(artifact), []).append(artifact)
    return grouped


def _keep(sid: str, rows: list[Artifact], remover: Remover) -> None:
    """Hand the rows an agent's own command is about to delete to the trash,
    read as they are now (nothing in a dry run)."""
    if remover.dry_run:
        return
    for db, artifacts in _by_database(rows).items():
        deletions = [d for a in artifacts for d in _deletions(sid, a)]
        for kept in sqlite.read_rows(db, deletions):
            if kept.rows:
                remover.keep_rows(kept)


def _delete(sid: str, rows: list[Artifact], remover: Remover) -> None:
    """Delete the rows, one transaction per database, each kept in the trash
    inside it."""
    for db, artifacts in _by_database(rows).items():
        if not remover.dry_run:
            deletions = [d for a in artifacts for d in _deletions(sid, a)]
            sqlite.delete_rows(db, deletions, keep=remover.keep_rows)
        for artifact in artifacts:
            remover.removed_at_once(artifact.path)


def _open_rollouts(artifacts: Iterable[Artifact], procs: ProcessTable) -> Iterator[tuple[str, int]]:
    """(path, pid) of each rollout among `artifacts` a process has open."""
    for artifact in artifacts:
        if artifact.kind in _ROLLOUT_KINDS:
            for pid, _mode in procs.holding_open(artifact.path):
                yield artifact.path, pid
