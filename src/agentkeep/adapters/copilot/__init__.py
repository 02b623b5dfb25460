"""GitHub Copilot CLI: a directory per session under `<home>/session-state/`,
its rows in the shared `<home>/session-store.db`, and its big tool outputs
in the tmp dirs (FIELD-NOTES "GitHub Copilot CLI").

`<home>` is $COPILOT_HOME, else ~/.copilot; older installs kept
`session-state` and `session-store.db` in `$XDG_STATE_HOME/.copilot`, and
1.0.102 moves them home and leaves links at the old paths. Both are read; a
directory or database reached both ways is read once, through the path that
is no link, and nothing is ever removed through a link.

Per session `<id>` (a UUID, in the case the caller gave `--session-id`):
- `session-state/<id>/`: `events.jsonl` is what Copilot lists and resumes a
  session by (without it the session is neither listed nor resumable, with
  only it both are): the primary record, removed first. `workspace.yaml`,
  `checkpoints/`, `files/`, `session.db` and the rest go with the directory.
- `session-state/.session-operation-locks/<id>.lock`: Copilot flocks it for
  each operation on the session and waits 30 s for it, so the pruner holds
  it too (lock_files), with every `inuse.<pid>.hold` of the session.
- its rows in every table of `session-store.db` with a `session_id` column
  (`search_index`, FTS5, among them) and `sessions` by `id`. Copilot's own
  `/session delete` leaves them all: rows alone are a session too, so that
  they are found and removed.
- `<ms>-copilot-tool-output-<pid>-<uuid>.txt` directly in a tmp dir: named
  in `events.jsonl`, or written by the process of one of the session's
  `inuse.<pid>` locks (Copilot deletes them when it exits; after a crash the
  events naming them are often never written, and the stale lock is the link
  left). The tmp dirs are not roots: nothing there names a session by its
  name, so they are neither watched nor walked.

In use: `inuse.<pid>.lock` and `.hold` in the session dir of a live pid (a
stale pair of a dead one stays until Copilot resumes the session), or a
command line naming the id (`--resume=<id>`, `--session-id <id>`).

Lineage: `/fork` copies the parent's events into the child, and writes into
each a `session.info` event of `infoType: "fork"`: the child's own says
`Forked from "<name>" (<parent>) as "<name>" (<child>).` Copies of a fork
event name another child, never this session last: only the one ending with
the session's own id makes the link.

Shared, never removed, and residual where they name a removed session:
`logs/*.log` (Copilot keeps 50 process logs of the last 7 days at most),
`sidebar-sessions-state/`, `open-sessions-state.json`,
`command-history-state.json` and `config.json`. Copilot's own package
(`~/.cache/copilot/pkg`, `<home>/pkg`) is never read.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import structlog

from agentkeep import disk
from agentkeep.adapters import heads, sqlite
from agentkeep.adapters.base import Adapter, Known, Remover, Root
from agentkeep.adapters.dirs import directory_artifacts, entries, parts_below, root_problem
from agentkeep.adapters.times import parse_agent_time
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact, Described, Holder, HolderKind, Session
from agentkeep.processes import ProcessTable

log = structlog.get_logger("agentkeep.adapters.copilot")

_T = TypeVar("_T")

_UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
ID = re.compile(_UUID)
STATE = "session-state"
OPLOCKS = ".session-operation-locks"
EVENTS = "events.jsonl"
WORKSPACE = "workspace.yaml"
STORE = "session-store.db"
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
KIND_OPLOCK, KIND_TOOL_OUTPUT, KIND_ROW = "operation-lock", "tool-output", "row"
_INUSE = re.compile(r"inuse\.(\d{1,10})\.(lock|hold)")
_TOOL_OUTPUT = re.compile(rf"\d{{10,17}}-copilot-tool-output-(\d{{1,10}})-{_UUID}\.txt")
_TOOL_OUTPUT_BYTES = re.compile(_TOOL_OUTPUT.pattern.encode())
# The child's own fork event: `Forked from "<name>" (<parent>) as "<name>" (<child>).`
_FORKED = re.compile(rf'^Forked from .*\(({_UUID})\) as ".*" \(({_UUID})\)\.?$', re.DOTALL)
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The FTS5 shadow tables (`<table>_content` holds the session id as `c1`):
# they go with their virtual table, never on their own.
_SHADOW = ("_data", "_idx", "_content", "_docsize", "_config")
SESSIONS, SESSION_ID = "sessions", "session_id"
# events.jsonl is read in pieces this long; a tool output's name is never
# longer than the overlap kept between two pieces of one line.
_PIECE, _OVERLAP = 1 << 20, 256
_SHARED_LIMIT = 32 << 20
_SHARED_FILES = ("open-sessions-state.json", "command-history-state.json", "config.json")


@dataclass(frozen=True)
class _Place:
    """One `session-state` directory, under the root it lies in."""

    root: Path
    state: Path
    linked: bool


@dataclass(frozen=True)
class _Events:
    """What a session's events.jsonl says of it."""

    cwd: str | None = None
    # When the session began: a fork's session.start is the fork's own.
    start: float | None = None
    parent: str | None = None
    outputs: frozenset[str] = frozenset()
    # The first event is not a session.start naming this session.
    undated: bool = False


@dataclass
class _Rows:
    """A session's rows: (database, table, behind a link), and what its
    `sessions` row says."""

    tables: list[tuple[Path, str, bool]] = field(default_factory=list)
    updated: float | None = None
    cwd: str | None = None
    undated: bool = False


@dataclass
class _Listing:
    """One look at everything shared by the sessions listed together."""

    rows: dict[str, _Rows] = field(default_factory=dict)
    # A database could not be read: a newer time or a row may hide there.
    incomplete: bool = False
    # Tool outputs in the tmp dirs: (path, root, linked) by the writer's pid.
    outputs: dict[int, list[tuple[str, str, bool]]] = field(default_factory=dict)
    # The shared files (logs, state) and the ids each of them names.
    shared: dict[str, frozenset[str]] = field(default_factory=dict)


class CopilotAdapter(Adapter):
    name = "copilot"
    evidence_kinds = frozenset({KIND_INUSE_LOCK, KIND_INUSE_HOLD})
    id_in_name = ID

    @cached_property
    def home(self) -> Path:
        value = self.env.get("COPILOT_HOME")
        if value and (value == "~" or value.startswith("~/")):
            value = str(self.env.home) + value[1:]
        if value and os.path.isabs(value):
            return Path(value)
        return self.env.home / ".copilot"

    @cached_property
    def legacy(self) -> Path:
        return self.env.xdg("XDG_STATE_HOME", ".local/state") / ".copilot"

    @cached_property
    def tmp_dirs(self) -> list[Path]:
        """The tmp dirs Copilot may have written to, each real dir once."""
        return self.env.tmp_dirs

    def roots(self) -> list[Root]:
        return [
            Root.check(self.home, "home", self.env.uid),
            Root.check(self.legacy, "legacy", self.env.uid),
        ]

    def watch_dirs(self) -> list[Path]:
        dirs = []
        for place in self._places():
            dirs.append(place.state)
            if (place.state / OPLOCKS).is_dir():
                dirs.append(place.state / OPLOCKS)
        return dirs

    def canonical_id(self, raw: str) -> str | None:
        # Copilot keeps the case `--session-id` was given in: the name is the id.
        return raw if isinstance(raw, str) and ID.fullmatch(raw) else None

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        places = self._places()
        listing = self._listing(names)
        ids = set(names) if names is not None else self._ids(places, listing)
        for sid in sorted(ids):
            session = self._session(sid, places, listing)
            if session is not None:
                yield session

    def _ids(self, places: list[_Place], listing: _Listing) -> set[str]:
        """Every id a session dir, an operation lock or a row names."""
        ids: set[str] = set(listing.rows)
        for place in places:
            for entry in entries(place.state):
                if entry.name == OPLOCKS:
                    continue
                sid = self.canonical_id(entry.name)
                if sid is None or not entry.dir:
                    log.info("skipped: not a copilot session dir", path=entry.path)
                    continue
                ids.add(sid)
            for entry in entries(place.state / OPLOCKS):
                sid = self.canonical_id(entry.name.removesuffix(".lock"))
                if sid is not None and entry.name.endswith(".lock"):
                    ids.add(sid)
        return ids

    def session_for_path(self, path: str) -> str | None:
        for place in self._places():
            parts = parts_below(path, place.state)
            if not parts:
                continue
            if parts[0] == OPLOCKS:
                if len(parts) == 2 and parts[1].endswith(".lock"):
                    return self.canonical_id(parts[1].removesuffix(".lock"))
                return None
            return self.canonical_id(parts[0])
        return None

    def databases(self) -> list[Path]:
        return [path for path, _ in self._stores()]

    # -- in use ---------------------------------------------------------
    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """A command line naming the id, or an `inuse.<pid>` lock of a pid
        that is alive (a reused pid keeps the session: never guess toward
        deleting)."""
        found = list(procs.naming(session.id))
        for pid in sorted(_inuse_pids(session.artifacts)):
            if procs.alive(pid) is not None:
                found.append(Holder(pid, HolderKind.REGISTRY, f"inuse.{pid}.lock"))
        return found

    def lock_files(self, session: Session) -> list[Path]:
        """The operation lock Copilot flocks for every operation on the
        session, and the `.hold` each process using it keeps flocked: held,
        the session is in use. Only those that exist are named (the pruner
        would make a missing one, in Copilot's directory)."""
        sid = self.canonical_id(session.id)
        if sid is None:
            return []
        found = [
            place.state / OPLOCKS / f"{sid}.lock"
            for place in self._places()
            if not place.linked and os.path.lexists(place.state / OPLOCKS / f"{sid}.lock")
        ]
        found += [
            Path(a.path) for a in session.artifacts if a.kind == KIND_INUSE_HOLD and not a.linked
        ]
        return found

    def describe(self, session: Session) -> Described:
        """Its name (workspace.yaml's `name`, Copilot's own or the user's)
        else its first prompt (the first `user.message` event), and its
        session.start's time, from the heads of those files."""
        by_name = {os.path.basename(a.path): a.path for a in session.artifacts if not a.linked}
        name = _yaml_name(by_name[WORKSPACE]) if WORKSPACE in by_name else None
        if EVENTS not in by_name:
            return Described(name)
        started: float | None = None
        for record in heads.head_records(by_name[EVENTS]):
            data = record.get("data")
            data = data if isinstance(data, dict) else {}
            if record.get("type") == "session.start":
                started = parse_agent_time(data.get("startTime") or record.get("timestamp"))
            elif record.get("type") == "user.message":
                return Described(name or heads.cut(heads.text_of(data.get("content"))), started)
        return Described(name, started)

    # -- removal --------------------------------------------------------
    def remove(self, session: Session, remover: Remover) -> None:
        """The files first, events.jsonl ahead of them (invariant 5), then
        the rows: only while no process has the database open (every running
        Copilot keeps it open). Otherwise the rows stay, reported, and the
        session they make is removed by a later run."""
        # Checked before any change: a database that cannot be read may hold
        # the session's rows, and looking again could not see them either.
        for db, _ in self._stores():
            try:
                with sqlite.reading(db):
                    pass
            except sqlite3.Error as exc:
                raise RemovalError(f"cannot read {db}: {exc}") from exc
        files = [a for a in session.artifacts if a.kind != KIND_ROW]
        for artifact in sorted(files, key=lambda a: not a.primary):
            if artifact.linked:
                remover.residual(artifact.path)
            else:
                remover.remove_path(artifact)
        rows = [a for a in session.artifacts if a.kind == KIND_ROW]
        by_db: dict[Path, list[Artifact]] = defaultdict(list)
        for artifact in rows:
            if artifact.linked:
                remover.residual(artifact.path)
            else:
                by_db[Path(artifact.path.rpartition("#")[0])].append(artifact)
        if by_db:
            self._remove_rows(session.id, by_db, remover)
        for path in session.residual:
            remover.residual(path)

    def _remove_rows(self, sid: str, by_db: dict[Path, list[Artifact]], remover: Remover) -> None:
        try:
            sqlite.ensure_alone(by_db, ProcessTable.snapshot(self.env.uid))
        except RemovalError as exc:
            log.info("rows left until the database is free", id=sid, reason=str(exc))
            for artifact in (a for group in by_db.values() for a in group):
                remover.residual(artifact.path)
            return
        for db, artifacts in by_db.items():
            tables = [a.path.rpartition("#")[2] for a in artifacts]
            # Rows keyed by the session first, its `sessions` row last.
            deletions = [
                (t, "id" if t == SESSIONS else SESSION_ID, sid)
                for t in sorted(tables, key=lambda t: t == SESSIONS)
            ]
            if not remover.dry_run:
                sqlite.delete_rows(db, deletions, keep=remover.keep_rows)
            for artifact in artifacts:
                remover.removed_at_once(artifact.path)

    # -- where ----------------------------------------------------------
    def _places(self) -> list[_Place]:
        """Each real `session-state` dir once: through the path that is no
        link when there is one (the link 1.0.102 leaves at the legacy path
        names the same dir). One only reached through a link is read, its
        sessions never removed."""
        found = []
        for root in (self.home, self.legacy):
            state = root / STATE
            if state.is_dir():
                linked = root_problem(self.env, root) is not None or disk.is_link(state)
                found.append(_Place(root, state, linked))
        return _once(found, lambda p: (p.state, p.linked))

    def _stores(self) -> list[tuple[Path, bool]]:
        """Each real session-store.db once, and whether it lies behind a link."""
        found = []
        for root in (self.home, self.legacy):
            db = root / STORE
            if sqlite.is_database_file(db):
                found.append((db, root_problem(self.env, root) is not None or disk.is_link(db)))
        return _once(found, lambda s: s)

    # -- listing --------------------------------------------------------
    def _listing(self, only: frozenset[str] | None) -> _Listing:
        listing = _Listing()
        for db, linked in self._stores():
            try:
                _read_rows(db, linked, only, listing)
            except sqlite3.Error as exc:
                log.warning(
                    "session-store.db unreadable; copilot sessions undated",
                    db=str(db),
                    error=str(exc),
                )
                listing.incomplete = True
        self._list_outputs(listing)
        for root in _once([self.home, self.legacy], lambda r: (r, disk.is_link(r))):
            self._list_shared(root, listing)
        return listing

    def _list_outputs(self, listing: _Listing) -> None:
        for tmp in self.tmp_dirs:
            linked = root_problem(self.env, tmp) is not None
            for entry in entries(tmp):
                match = _TOOL_OUTPUT.fullmatch(entry.name)
                if match is None or entry.dir:
                    continue
                try:
                    st = os.lstat(entry.path)
                except OSError:
                    continue
                if entry.link or st.st_uid != self.env.uid:
                    log.info("skipped a tool output that is not the user's file", path=entry.path)
                    continue
                pid = int(match[1])
                listing.outputs.setdefault(pid, []).append((entry.path, str(tmp), linked))

    def _list_shared(self, root: Path, listing: _Listing) -> None:
        """What the shared files name: read whole at each look, as they are
        small and few (Copilot itself deletes process logs past 50 or a week)."""
        logs = [Path(e.path) for e in entries(root / "logs") if e.name.endswith(".log")]
        state = [Path(e.path) for e in entries(root / "sidebar-sessions-state")]
        for path in [*logs, *state, *(root / name for name in _SHARED_FILES)]:
            named = ID.findall(_read_bounded(path).decode("utf-8", "replace"))
            if named:
                listing.shared[str(path)] = frozenset(named)

    def _session(self, sid: str, places: list[_Place], listing: _Listing) -> Session | None:
        seen: set[tuple[int, int]] = set()
        artifacts: list[Artifact] = []
        read: list[_Events] = []
        for place in places:
            found, events_read = self._in_place(sid, place, seen)
            artifacts += found
            read += [events_read] if events_read is not None else []
        events = read[0] if read else _Events()
        rows = listing.rows.get(sid, _Rows())
        artifacts += _outputs(events.outputs, _inuse_pids(artifacts), listing, seen)
        file_times = [a.mtime for a in artifacts if a.mtime is not None]
        own_time = rows.updated if rows.updated is not None else max(file_times, default=None)
        for db, table, linked in rows.tables:
            mtime = rows.updated if table == SESSIONS else own_time
            artifacts.append(Artifact(f"{db}#{table}", KIND_ROW, 0, mtime, None, False, linked))
        if not artifacts:
            return None
        # Primary records first across places too (invariant 5).
        artifacts.sort(key=lambda a: not a.primary)
        return Session(
            agent=self.name,
            id=sid,
            workspace=events.cwd or rows.cwd,
            parent=events.parent,
            artifacts=artifacts,
            updated=rows.updated,
            undated=events.undated or rows.undated or listing.incomplete,
            bytes=sum(a.bytes for a in artifacts),
            residual=_naming(sid, listing),
        )

    def _in_place(
        self, sid: str, place: _Place, seen: set[tuple[int, int]]
    ) -> tuple[list[Artifact], _Events | None]:
        """The session's dir and operation lock in one place, and what its
        events say (None: no events.jsonl there)."""
        root, directory = str(place.root), place.state / sid
        artifacts: list[Artifact] = []
        events = None
        if directory.is_dir():
            listed = directory_artifacts(
                str(directory), root, primary=EVENTS, kinds=KINDS, linked=place.linked, seen=seen
            )
            artifacts += [_inuse_kind(a) for a in listed]
            if os.path.lexists(directory / EVENTS) and not place.linked:
                events = _read_events(directory / EVENTS, sid)
        elif os.path.lexists(directory):
            log.info("skipped: not a session directory", path=str(directory))
        lock = disk.artifact(
            place.state / OPLOCKS / f"{sid}.lock", KIND_OPLOCK, root, linked=place.linked, seen=seen
        )
        if lock is not None:
            artifacts.append(lock)
        return artifacts, events


ADAPTER = CopilotAdapter


# -- helpers ------------------------------------------------------------------


def _once(items: list[_T], key: Callable[[_T], tuple[Path, bool]]) -> list[_T]:
    """Each real path once: the first of those not behind a link, else the
    first (in the order given: home before legacy)."""
    chosen: dict[str, _T] = {}
    for item in sorted(items, key=lambda i: key(i)[1]):
        chosen.setdefault(os.path.realpath(key(item)[0]), item)
    return [item for item in items if item in chosen.values()]


def _outputs(
    named: frozenset[str], pids: set[int], listing: _Listing, seen: set[tuple[int, int]]
) -> list[Artifact]:
    """The tool outputs its events name, and those written by a process
    that had the session open (one of its `inuse.<pid>` locks)."""
    found = []
    for pid, files in listing.outputs.items():
        for path, root, linked in files:
            if pid in pids or os.path.basename(path) in named:
                item = disk.artifact(path, KIND_TOOL_OUTPUT, root, linked=linked, seen=seen)
                if item is not None:
                    found.append(item)
    return found


def _inuse_kind(artifact: Artifact) -> Artifact:
    match = _INUSE.fullmatch(os.path.basename(artifact.path))
    if match is None:
        return artifact
    return artifact._replace(kind=KIND_INUSE_LOCK if match[2] == "lock" else KIND_INUSE_HOLD)


def _inuse_pids(artifacts: Iterable[Artifact]) -> set[int]:
    pids = set()
    for artifact in artifacts:
        if artifact.kind in (KIND_INUSE_LOCK, KIND_INUSE_HOLD):
            match = _INUSE.fullmatch(os.path.basename(artifact.path))
            if match is not None:
                pids.add(int(match[1]))
    return pids


def _read_events(path: Path, sid: str) -> _Events:
    """The session's workspace, the parent its own fork event names and the
    tool outputs named anywhere in it, read in pieces (a transcript can be
    tens of MB). A first event that is not the session.start of this
    session makes it undated; a cut or malformed later line is skipped."""
    handle = disk.open_quietly(path)
    if handle is None:
        return _Events()
    outputs: set[str] = set()
    parent: str | None = None
    with handle:
        head = handle.readline(_PIECE)
        first = _first_event(head, sid, path)
        tail, starts_line = b"", True
        for piece in itertools.chain([head], iter(lambda: handle.readline(_PIECE), b"")):
            outputs.update(m[0].decode() for m in _TOOL_OUTPUT_BYTES.finditer(tail + piece))
            ends_line = piece.endswith(b"\n")
            if starts_line and ends_line and b"Forked from" in piece:
                parent = _fork_parent(piece, sid) or parent
            starts_line = ends_line
            tail = b"" if ends_line else piece[-_OVERLAP:]
    # A fork's copied events name its parent's tool outputs, written before
    # the fork began: those stay the parent's.
    if first.start is not None:
        outputs = {name for name in outputs if int(name.split("-", 1)[0]) / 1000 >= first.start}
    return dataclasses.replace(first, parent=parent, outputs=frozenset(outputs))


def _first_event(line: bytes, sid: str, path: Path) -> _Events:
    """The workspace and start the first event gives; undated when it is
    not the session.start of this session."""
    if not line.strip():
        return _Events()
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        log.info("malformed first event; the session is undated", path=str(path))
        return _Events(undated=True)
    data = record.get("data") if isinstance(record, dict) else None
    if not isinstance(data, dict) or record.get("type") != "session.start":
        log.info("first event is no session.start; the session is undated", path=str(path))
        return _Events(undated=True)
    if data.get("sessionId") != sid:
        named = str(data.get("sessionId"))[:80]
        log.info("events name another session; undated", path=str(path), names=named)
        return _Events(undated=True)
    context = data.get("context")
    cwd = context.get("cwd") if isinstance(context, dict) else None
    ok = isinstance(cwd, str) and os.path.isabs(cwd) and "\0" not in cwd
    start = parse_agent_time(data.get("startTime") or record.get("timestamp"))
    return _Events(cwd=cwd if ok else None, start=start)


def _fork_parent(line: bytes, sid: str) -> str | None:
    """The parent a fork event of this session's own names; None for any
    other line (a fork event copied from an ancestor names another child)."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    data = record.get("data") if isinstance(record, dict) else None
    if record.get("type") != "session.info" or not isinstance(data, dict):
        return None
    message = data.get("message")
    if data.get("infoType") != "fork" or not isinstance(message, str):
        return None
    match = _FORKED.match(message)
    if match is None or match[2] != sid or match[1] == sid:
        return None
    return match[1]


def _read_rows(db: Path, linked: bool, only: frozenset[str] | None, listing: _Listing) -> None:
    """Every table of `db` keyed by session: `sessions` by `id` (with its
    time and cwd), any other by `session_id`, read from the schema (a later
    Copilot's tables too). One read transaction."""
    with sqlite.reading(db) as conn:
        conn.execute("BEGIN")
        for table in _session_tables(conn):
            if table == SESSIONS:
                _read_sessions(conn, db, linked, only, listing)
                continue
            sql = f'SELECT DISTINCT {SESSION_ID} FROM "{table}"'
            for (sid,) in conn.execute(*sqlite.among(sql, SESSION_ID, only)):
                if isinstance(sid, str) and ID.fullmatch(sid):
                    listing.rows.setdefault(sid, _Rows()).tables.append((db, table, linked))


def _read_sessions(
    conn: sqlite3.Connection,
    db: Path,
    linked: bool,
    only: frozenset[str] | None,
    listing: _Listing,
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
        rows = listing.rows.setdefault(sid, _Rows())
        rows.tables.append((db, SESSIONS, linked))
        updated = sqlite.column_time(record.get("updated_at"))
        if updated is None:
            rows.undated = True
        elif rows.updated is None or updated > rows.updated:
            rows.updated = updated
        cwd = record.get("cwd")
        if isinstance(cwd, str) and os.path.isabs(cwd) and rows.cwd is None:
            rows.cwd = cwd


def _session_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables holding sessions' rows, `sessions` last (its row is what
    the others reference): any table with a `session_id` column, but never
    an FTS5 shadow table (its rows go with its virtual table)."""
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    names = [n for n in names if isinstance(n, str) and _TABLE_NAME.fullmatch(n)]
    virtual = {
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
        )
    }
    found = []
    for name in sorted(names):
        if any(name == v + suffix for v in virtual for suffix in _SHADOW):
            continue
        cols = sqlite.columns(conn, name)
        if (name == SESSIONS and "id" in cols) or SESSION_ID in cols:
            found.append(name)
    return sorted(found, key=lambda n: n == SESSIONS)


def _read_bounded(path: Path) -> bytes:
    """A shared file's bytes (none when missing, a link, or too big to be a
    file of Copilot's state)."""
    handle = disk.open_quietly(path)
    if handle is None:
        return b""
    with handle:
        data = handle.read(_SHARED_LIMIT + 1)
    return b"" if len(data) > _SHARED_LIMIT else data


def _naming(sid: str, listing: _Listing) -> list[str]:
    """The shared files that name the session."""
    return sorted(path for path, ids in listing.shared.items() if sid in ids)


def _yaml_name(path: str) -> str | None:
    """workspace.yaml's top-level `name`, a plain or quoted scalar on its
    own line (a block scalar, or anything else, is no name)."""
    for line in (heads.read_head(path, heads.HEAD) or b"").decode("utf-8", "replace").splitlines():
        if not line.startswith("name:"):
            continue
        value = line[len("name:") :].strip()
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        elif value.startswith("'") and value.endswith("'") and len(value) > 1:
            value = value[1:-1].replace("''", "'")
        elif value[:1] in ("|", ">", "&", "*", "!"):
            return None
        return heads.cut(value)
    return None
