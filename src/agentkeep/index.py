"""The session index: a SQLite cache of every session and its artifacts.

The disk is the truth and the index is a cache, rebuilt from disk at any
time (`scan`); nothing decides a removal from the index alone (prune lists
every session again from the disk under its lease). WAL mode and one
connection per thread let the daemon answer queries while it indexes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentkeep.model import Artifact, Session

# 2: sessions.disk_bytes; 3: sessions.listing; 4: unreadable places; 5: artifacts.disk_bytes
SCHEMA_VERSION = 5
# The first SQLite with generated columns (sessions.listing).
SQLITE_NEEDED = (3, 31)
# Sessions written per statement by a scan.
_BATCH = 500

# `ls` order: oldest activity first, undated sessions last.
_ORDER = "last_activity IS NULL, last_activity, agent, id"

# model.rfc3339() in SQL, to the second it prints: datetime.fromtimestamp()
# rounds to the microsecond half to even before it drops the fraction, so a
# time within half a microsecond of the next second prints as that second
# (tests/test_index.py compares the two on such edge values).
_RFC3339 = """strftime('%Y-%m-%dT%H:%M:%SZ', CASE WHEN last_activity >= 0
    THEN CAST(last_activity AS INTEGER)
        + ((last_activity - CAST(last_activity AS INTEGER)) * 1000000.0 >= 999999.5)
    ELSE CAST(last_activity AS INTEGER)
        - ((last_activity - CAST(last_activity AS INTEGER)) * 1000000.0 < -0.5)
    END, 'unixepoch')"""

# core.session_json() as `json.dumps(rows, indent=2)` writes each row, its
# line breaks as tabs (jsontext), keys in the contract's order, "state" last
# so that a caller can swap the idle default for another state.
_SESSION_FORMAT = "\t".join(
    [
        "  {",
        '    "agent": %s,',
        '    "id": %s,',
        '    "workspace": %s,',
        '    "parent": %s,',
        '    "last_activity": %s,',
        '    "bytes": %d,',
        '    "artifacts": %d,',
        '    "state": "idle"',
        "  }",
    ]
)
# A workspace stored as a BLOB (a name that is not UTF-8, see _insert) is
# quoted as DEL, which written_as_python() sends to Python to write.
_WORKSPACE = "CASE typeof(workspace) WHEN 'blob' THEN char(127) ELSE workspace END"
# So is a session with places that cannot be listed, whose `unreadable`
# list (core.session_json) only Python writes (rare, and a list).
_UNREADABLE = "CASE WHEN unreadable IS NULL THEN '' ELSE char(127) END"
_SESSION_TEXT = (
    f"printf('%s{_SESSION_FORMAT}', {_UNREADABLE}, json_quote(agent), json_quote(id),"
    f" json_quote({_WORKSPACE}), json_quote(parent), json_quote({_RFC3339}), bytes, artifacts)"
)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS sessions (
    agent TEXT NOT NULL, id TEXT NOT NULL, workspace TEXT, parent TEXT,
    last_activity REAL, bytes INTEGER NOT NULL, artifacts INTEGER NOT NULL,
    unsafe TEXT, disk_bytes INTEGER NOT NULL,
    -- The places that could not be listed (a JSON list), or NULL.
    unreadable TEXT,
    -- The session's `ls` text (listing()), written with its row: SQLite
    -- writing 50,000 of them again for each `ls` was a quarter of its time.
    listing TEXT GENERATED ALWAYS AS ({_SESSION_TEXT}) STORED,
    PRIMARY KEY (agent, id)
);
CREATE TABLE IF NOT EXISTS artifacts (
    agent TEXT NOT NULL, session_id TEXT NOT NULL, path TEXT NOT NULL, kind TEXT NOT NULL,
    bytes INTEGER NOT NULL, mtime REAL, root TEXT, is_primary INTEGER NOT NULL,
    linked INTEGER NOT NULL, is_dir INTEGER NOT NULL, disk_bytes INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS artifacts_by_session ON artifacts (agent, session_id);
CREATE INDEX IF NOT EXISTS sessions_by_parent ON sessions (agent, parent);
-- The few sessions with places that cannot be listed (status reads them).
CREATE INDEX IF NOT EXISTS sessions_unreadable ON sessions (agent) WHERE unreadable IS NOT NULL;
CREATE TABLE IF NOT EXISTS dirs (path TEXT PRIMARY KEY, agent TEXT NOT NULL, mtime_ns INTEGER);
-- Each agent's roots and listed directories that could not be listed at the
-- last scan or reconcile (adapters.base.unlisted), with why.
CREATE TABLE IF NOT EXISTS unlisted (agent TEXT NOT NULL, path TEXT NOT NULL, why TEXT NOT NULL);
"""
# An IndexedSession's columns (`listing` aside).
_COLUMNS = (
    "agent, id, workspace, parent, last_activity, bytes, artifacts, unsafe, disk_bytes, unreadable"
)


IDLE_TAIL = '"state": "idle"\t  }'


def written_as_python(text: str) -> bool:
    """True when json_quote() wrote the strings in `text` as Python's json
    does: it escapes `"`, `\\` and control characters alike, and leaves DEL
    and everything past ASCII as they are, which Python escapes."""
    return text.isascii() and "\x7f" not in text


@dataclass(frozen=True)
class IndexedSession:
    """A session as the index last saw it. last_activity None = undated.
    `bytes` is its apparent size, `disk_bytes` what it takes on disk."""

    agent: str
    id: str
    workspace: str | None
    parent: str | None
    last_activity: float | None
    bytes: int
    artifacts: int
    unsafe: str | None
    disk_bytes: int
    # The places that could not be listed (Session.unreadable).
    unreadable: tuple[str, ...] = ()


def _session(row: Sequence[Any]) -> IndexedSession:
    agent, sid, workspace, parent, activity, size, artifacts, unsafe, disk, unreadable = row
    places = tuple(json.loads(unreadable)) if unreadable else ()
    return IndexedSession(
        agent, sid, _text(workspace), _text(parent), activity, size, artifacts, unsafe, disk, places
    )


@dataclass(slots=True)
class Rows:
    """Sessions as the index stores them: a row per session, a row per
    artifact. Built where the sessions are measured (a scan's worker process
    sends these back: plain tuples pickle far faster than Sessions)."""

    sessions: list[tuple[object, ...]]
    artifacts: list[tuple[object, ...]]
    bytes: int = 0


def rows(sessions: Iterable[Session], restored: Mapping[tuple[str, str], float]) -> Rows:
    done = Rows([], [])
    for s in sessions:
        activity = s.last_activity(restored.get(s.key))
        done.bytes += s.bytes
        disk = sum(a.disk_bytes for a in s.artifacts)
        unreadable = json.dumps(sorted(set(s.unreadable))) if s.unreadable else None
        done.sessions.append(
            (s.agent, s.id, s.workspace, s.parent, activity)
            + (s.bytes, len(s.artifacts), s.unsafe, disk, unreadable)
        )
        done.artifacts += [
            (s.agent, s.id, a.path, a.kind, a.bytes, a.mtime, a.root)
            + (a.primary, a.linked, a.is_dir, a.disk_bytes)
            for a in s.artifacts
        ]
    return done


def batches(
    sessions: Iterable[Session], restored: Mapping[tuple[str, str], float]
) -> Iterator[Rows]:
    """rows() of _BATCH sessions at a time: a batch bounds the memory a scan
    holds, and one statement per session was a sixth of a scan."""
    batch: list[Session] = []
    for session in sessions:
        batch.append(session)
        if len(batch) == _BATCH:
            yield rows(batch, restored)
            batch.clear()
    yield rows(batch, restored)


def _write(db: sqlite3.Connection, done: Rows) -> None:
    _insert(db, f"INSERT INTO sessions ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)", done.sessions)
    _insert(db, "INSERT INTO artifacts VALUES (?,?,?,?,?,?,?,?,?,?,?)", done.artifacts)


def _insert(db: sqlite3.Connection, sql: str, rows: Sequence[tuple[object, ...]]) -> None:
    """executemany, for rows that may hold names that are not UTF-8.

    A file name that is not UTF-8 comes from the OS as a str with lone
    surrogates (surrogateescape), which SQLite's TEXT cannot take; such a
    string is stored as a BLOB of its surrogatepass encoding instead, which
    _text() turns back into the very same str. Tried as TEXT first: a scan
    writes hundreds of thousands of rows, nearly always all UTF-8."""
    db.execute("SAVEPOINT rows")
    try:
        db.executemany(sql, rows)
    except UnicodeEncodeError:
        # executemany stopped at the row it could not bind: undo the rows
        # before it and write them all again, converted.
        db.execute("ROLLBACK TO rows")
        db.executemany(sql, [tuple(map(_stored, row)) for row in rows])
    db.execute("RELEASE rows")


def _stored(value: object) -> object:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
    return value


def _listed(agent: str | None, idle_before: float | None) -> tuple[str, list[object]]:
    """The WHERE and ORDER BY of Index.listing(), and their arguments."""
    where, args = _where(agent, idle_before)
    return f"{where} ORDER BY {_ORDER}", args


def _where(agent: str | None, idle_before: float | None) -> tuple[str, list[object]]:
    """The WHERE of Index.listing(), and its arguments."""
    terms: list[str] = []
    args: list[object] = []
    if agent is not None:
        terms.append("agent = ?")
        args.append(agent)
    if idle_before is not None:
        terms.append("last_activity < ?")
        args.append(idle_before)
    return (" WHERE " + " AND ".join(terms) if terms else ""), args


def _text(value: object) -> Any:
    """A stored string as it was written (see _insert)."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


class Replacement:
    """The sessions a scan adds inside Index.replacing(), with what it
    counted per agent: (sessions, artifacts, bytes)."""

    def __init__(self, db: sqlite3.Connection, agents: Sequence[str]) -> None:
        self._db = db
        self.counts: dict[str, tuple[int, int, int]] = {agent: (0, 0, 0) for agent in agents}

    def add(self, agent: str, parts: Iterable[Rows]) -> None:
        n, arts, total = self.counts[agent]
        for done in parts:
            _write(self._db, done)
            n, arts, total = n + len(done.sessions), arts + len(done.artifacts), total + done.bytes
        self.counts[agent] = (n, arts, total)


def _version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def _one_of(kinds: Iterable[str]) -> str:
    """`kinds` as SQL: `(kind = 'a' OR kind = 'b')`, literals in a fixed
    order. A partial index is used only by a query that repeats its WHERE
    term exactly, and `kind IN (...)` there costs each insert an ephemeral
    table (three times what the whole index costs)."""
    quoted = (k.replace("'", "''") for k in sorted(kinds))
    terms = [f"kind = '{k}'" for k in quoted]
    return "(" + (" OR ".join(terms) or "0") + ")"


def recorded_unreadable(path: Path) -> dict[str, list[str]]:
    """Index.unreadable() of the index at `path`, opened read-only (never
    made); nothing when there is none, or it is another version's."""
    if not os.path.exists(path):  # Path.exists raises where the state dir cannot be searched
        return {}
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return {}
    try:
        if _version(db) != SCHEMA_VERSION:
            return {}
        return _unreadable(db, None)
    except sqlite3.Error:
        return {}
    finally:
        db.close()


def _unreadable(db: sqlite3.Connection, agent: str | None) -> dict[str, list[str]]:
    """Every place recorded as not listable, by agent (each sorted; only
    agents with some): the agents' own (Index.set_unlisted) and those their
    sessions name."""
    where, args = ("WHERE agent = ?", [agent]) if agent is not None else ("", [])
    on = "AND sessions.agent = ?" if agent is not None else ""
    rows = db.execute(
        f"SELECT agent, path FROM unlisted {where} UNION"
        " SELECT sessions.agent, place.value FROM sessions, json_each(sessions.unreadable)"
        f" AS place WHERE sessions.unreadable IS NOT NULL {on}",
        args * 2,
    )
    found: dict[str, set[str]] = {}
    for name, path in rows:
        found.setdefault(name, set()).add(_text(path))
    return {name: sorted(paths) for name, paths in sorted(found.items())}


class Index:
    """`evidence_kinds`: the kinds of artifact that holders() reads (every
    agent's), kept in a partial index: listing 50,000 sessions reads a few
    thousand of their 300,000 artifacts, and a scan pays nothing for it."""

    def __init__(
        self, path: Path, evidence_kinds: Iterable[str] = (), *, memory: bool = False
    ) -> None:
        self.path = path
        # In memory: one database every thread of this process shares (a
        # connection held open keeps it), for a disk that cannot take it.
        self._uri = f"file:agentkeep-index-{id(self)}?mode=memory&cache=shared" if memory else None
        self._local = threading.local()
        self._evidence = frozenset(evidence_kinds)
        self._keep = self._connect() if memory else None
        db = self._db()
        self._drop_other_schema(db)
        db.executescript(_SCHEMA)  # each statement is idempotent; executescript commits
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._index_evidence(db)

    def _drop_other_schema(self, db: sqlite3.Connection) -> None:
        """An index another version wrote (another schema; 0 is a new
        database) is dropped: it is a cache, so the next reconcile finds no
        agent indexed and scans them all."""
        if _version(db) in (0, SCHEMA_VERSION):
            return
        with self._tx() as tx:
            if _version(tx) not in (0, SCHEMA_VERSION):  # another process may have done it
                for table in ("sessions", "artifacts", "dirs", "unlisted"):
                    tx.execute(f"DROP TABLE IF EXISTS {table}")
                tx.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _index_evidence(self, db: sqlite3.Connection) -> None:
        """Made, or made again where another version's kinds differ."""
        want = "CREATE INDEX artifacts_evidence ON artifacts (agent) WHERE " + _one_of(
            self._evidence
        )
        if self._evidence_sql(db) == want:
            return
        with self._tx() as tx:
            if self._evidence_sql(tx) != want:  # another process may have made it meanwhile
                tx.execute("DROP INDEX IF EXISTS artifacts_evidence")
                tx.execute(want)

    @staticmethod
    def _evidence_sql(db: sqlite3.Connection) -> str | None:
        row = db.execute("SELECT sql FROM sqlite_master WHERE name = 'artifacts_evidence'")
        found = row.fetchone()
        return None if found is None else str(found[0])

    # -- connections ----------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._connect()
            self._local.db = db
        return db

    def _connect(self) -> sqlite3.Connection:
        if self._uri is not None:
            return sqlite3.connect(self._uri, uri=True, timeout=30, isolation_level=None)
        fresh = not self.path.exists()
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        if fresh:
            os.chmod(self.path, 0o600)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            # After SQLITE_FULL SQLite has rolled back already; a second
            # ROLLBACK would replace the real error with its own.
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- writing --------------------------------------------------------
    def replace_agent(
        self, agent: str, sessions: Iterable[Session], restored: dict[tuple[str, str], float]
    ) -> tuple[int, int, int]:
        """Make the index hold exactly `sessions` for `agent` (a scan of one
        agent). Returns (sessions, artifacts, bytes)."""
        with self.replacing([agent]) as replacement:
            replacement.add(agent, batches(sessions, restored))
        return replacement.counts[agent]

    @contextmanager
    def replacing(self, agents: Sequence[str]) -> Iterator[Replacement]:
        """One transaction in which the index comes to hold exactly the
        sessions added for each of `agents` (a scan)."""
        with self._tx() as db:
            marks = ",".join("?" * len(agents))
            db.execute(f"DELETE FROM sessions WHERE agent IN ({marks})", list(agents))
            db.execute(f"DELETE FROM artifacts WHERE agent IN ({marks})", list(agents))
            yield Replacement(db, agents)

    def put(
        self,
        sessions: Iterable[Session],
        restored: Mapping[tuple[str, str], float] | None = None,
        gone: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Insert or replace `sessions` and forget `gone` ((agent, id) each),
        in one transaction (idempotent: a watcher may repeat it)."""
        sessions = list(sessions)
        with self._tx() as db:
            for agent, session_id in [*gone, *(s.key for s in sessions)]:
                self._delete(db, agent, session_id)
            _write(db, rows(sessions, restored or {}))

    def delete(self, keys: Iterable[tuple[str, str]]) -> None:
        """Forget the sessions of `keys` ((agent, id) each), in one transaction."""
        with self._tx() as db:
            for agent, session_id in keys:
                self._delete(db, agent, session_id)

    def forget_agents(self, keep: Iterable[str]) -> None:
        """Drop every agent not in `keep` (disabled agents, removed stores)."""
        keep = list(keep)
        marks = ",".join("?" * len(keep)) or "''"
        with self._tx() as db:
            db.execute(f"DELETE FROM sessions WHERE agent NOT IN ({marks})", keep)
            db.execute(f"DELETE FROM artifacts WHERE agent NOT IN ({marks})", keep)
            db.execute(f"DELETE FROM dirs WHERE agent NOT IN ({marks})", keep)
            db.execute(f"DELETE FROM unlisted WHERE agent NOT IN ({marks})", keep)

    @staticmethod
    def _delete(db: sqlite3.Connection, agent: str, session_id: str) -> None:
        db.execute("DELETE FROM sessions WHERE agent = ? AND id = ?", (agent, session_id))
        db.execute("DELETE FROM artifacts WHERE agent = ? AND session_id = ?", (agent, session_id))

    # -- directory signatures (cheap warm reconcile) ---------------------
    def dir_signatures(self, agent: str) -> dict[str, int | None]:
        rows = self._db().execute("SELECT path, mtime_ns FROM dirs WHERE agent = ?", (agent,))
        return {_text(path): mtime for path, mtime in rows}

    def set_dir_signatures(self, agent: str, signatures: dict[str, int | None]) -> None:
        """Record `agent`'s listed directories (path -> mtime_ns) for the next reconcile."""
        self._replace("dirs", agent, [(p, agent, m) for p, m in signatures.items()])

    # -- places that cannot be listed ------------------------------------
    def set_unlisted(self, agent: str, unlisted: Mapping[str, str]) -> None:
        """What adapters.base.unlisted() found of `agent` now (path -> why)."""
        self._replace("unlisted", agent, [(agent, path, why) for path, why in unlisted.items()])

    def _replace(self, table: str, agent: str, rows: list[tuple[object, ...]]) -> None:
        """Make `table` (of three columns) hold exactly `rows` for `agent`."""
        with self._tx() as db:
            db.execute(f"DELETE FROM {table} WHERE agent = ?", (agent,))
            _insert(db, f"INSERT INTO {table} VALUES (?,?,?)", rows)

    def unlisted(self, agent: str) -> dict[str, str]:
        """What set_unlisted() last recorded of `agent`."""
        rows = self._db().execute("SELECT path, why FROM unlisted WHERE agent = ?", (agent,))
        return {_text(path): why for path, why in rows}

    def unreadable(self, agent: str | None = None) -> dict[str, list[str]]:
        """Every place recorded as not listable (_unreadable)."""
        return _unreadable(self._db(), agent)

    # -- reading --------------------------------------------------------
    def sessions(self, agent: str | None = None) -> list[IndexedSession]:
        """Oldest activity first; undated sessions last."""
        return list(self.each_session(agent))

    def each_session(self, agent: str | None = None) -> Iterator[IndexedSession]:
        """sessions(), read as it is iterated: a total over every session
        never holds them all."""
        tail, args = _listed(agent, None)
        cursor = self._db().execute(f"SELECT {_COLUMNS} FROM sessions{tail}", args)
        while batch := cursor.fetchmany(_BATCH):
            yield from map(_session, batch)

    def listing(
        self, agent: str | None = None, idle_before: float | None = None
    ) -> list[tuple[str, str, str]]:
        """(agent, id, text) of every session, in `sessions()` order: the text
        is the contract's `ls` object with state "idle" as the CLI prints it,
        folded (_SESSION_TEXT), unless written_as_python() says otherwise (a
        string that is not ASCII). Written by SQLite with the row, so that
        listing tens of thousands of sessions costs no Python per field, nor
        writing each again. Only sessions idle since before `idle_before`
        when it is given (undated ones never)."""
        return list(self.listing_rows(agent, idle_before))

    def listing_rows(
        self, agent: str | None = None, idle_before: float | None = None
    ) -> Iterator[tuple[str, str, str]]:
        """listing(), read from SQLite a batch at a time as it is iterated
        (ls at 50,000 sessions never holds every session's text)."""
        tail, args = _listed(agent, idle_before)
        cursor = self._db().execute(f"SELECT agent, id, listing FROM sessions{tail}", args)
        while batch := cursor.fetchmany(_BATCH):
            yield from batch

    def listing_ids(
        self, agent: str | None = None, idle_before: float | None = None
    ) -> dict[str, Iterator[str]]:
        """The ids listing() lists, by agent (in no order), each agent's read
        from SQLite a batch at a time as it is iterated: ls at 50,000
        sessions never holds them all."""
        if agent is not None:
            agents = [agent]
        else:
            agents = [a for (a,) in self._db().execute("SELECT DISTINCT agent FROM sessions")]
        return {a: self._ids(a, idle_before) for a in agents}

    def _ids(self, agent: str, idle_before: float | None) -> Iterator[str]:
        where, args = _where(agent, idle_before)
        cursor = self._db().execute(f"SELECT id FROM sessions{where}", args)
        while batch := cursor.fetchmany(_BATCH):
            for (sid,) in batch:
                yield sid

    def begin_reading(self) -> None:
        """What this thread reads from here to end_reading() is one snapshot
        of the index (ls's ids, their states, then their texts as they are
        sent), whatever other threads write meanwhile."""
        db = self._db()
        if not db.in_transaction:
            db.execute("BEGIN")

    def end_reading(self) -> None:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None and db.in_transaction:
            db.execute("COMMIT")

    def sessions_of(self, agent: str, ids: Iterable[str]) -> list[IndexedSession]:
        """The indexed sessions of `agent` among `ids` (in no order), in one query."""
        rows = self._db().execute(
            f"SELECT {_COLUMNS} FROM sessions"
            " WHERE agent = ? AND id IN (SELECT value FROM json_each(?))",
            (agent, json.dumps(list(ids))),
        )
        return [_session(row) for row in rows]

    def get(self, agent: str, session_id: str) -> IndexedSession | None:
        row = (
            self._db()
            .execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE agent = ? AND id = ?", (agent, session_id)
            )
            .fetchone()
        )
        return _session(row) if row else None

    def artifacts(self, agent: str, session_id: str) -> list[Artifact]:
        rows = self._db().execute(
            "SELECT path, kind, bytes, mtime, root, is_primary, linked, is_dir FROM artifacts"
            " WHERE agent = ? AND session_id = ? ORDER BY is_primary DESC, path",
            (agent, session_id),
        )
        return [
            Artifact(_text(p), k, b, m, _text(r), bool(pr), bool(li), bool(d))
            for p, k, b, m, r, pr, li, d in rows
        ]

    def all_artifacts(
        self, agent: str | None = None, kinds: Iterable[str] | None = None
    ) -> dict[tuple[str, str], list[Artifact]]:
        """Artifacts of every session in one query (for listing many
        sessions), only of `kinds` when given."""
        where, args = [], []
        if agent is not None:
            where.append("agent = ?")
            args.append(agent)
        if kinds is not None:
            kinds = list(kinds)
            if self._evidence and self._evidence.issuperset(kinds):
                where.append(_one_of(self._evidence))  # the partial index's own term
            marks = ",".join("?" * len(kinds)) or "NULL"  # IN (NULL) matches nothing
            where.append(f"kind IN ({marks})")
            args += kinds
        sql = (
            "SELECT agent, session_id, path, kind, bytes, mtime, root, is_primary, linked, is_dir"
            " FROM artifacts" + (" WHERE " + " AND ".join(where) if where else "")
        )
        out: dict[tuple[str, str], list[Artifact]] = {}
        for a, sid, p, k, b, m, r, pr, li, d in self._db().execute(sql, args):
            art = Artifact(_text(p), k, b, m, _text(r), bool(pr), bool(li), bool(d))
            out.setdefault((a, sid), []).append(art)
        return out

    def artifact_times(self, agent: str) -> Iterator[tuple[str, str, float | None]]:
        """(session id, path, mtime) of every file-system artifact, streamed."""
        rows = self._db().execute(
            "SELECT session_id, path, mtime FROM artifacts WHERE agent = ? AND root IS NOT NULL",
            (agent,),
        )
        for sid, path, mtime in rows:
            yield sid, _text(path), mtime

    def kind_totals(self) -> Iterator[tuple[str, str, str, int, int]]:
        """(agent, session id, kind, bytes, disk bytes) of every session's
        artifacts of each kind, streamed (`du --by kind`)."""
        rows = self._db().execute(
            "SELECT agent, session_id, kind, sum(bytes), sum(disk_bytes) FROM artifacts"
            " GROUP BY agent, session_id, kind"
        )
        while batch := rows.fetchmany(_BATCH):
            yield from batch

    def children(self, agent: str, session_id: str) -> list[str]:
        rows = self._db().execute(
            "SELECT id FROM sessions WHERE agent = ? AND parent = ? ORDER BY id",
            (agent, session_id),
        )
        return [r[0] for r in rows]

    def count(self, agent: str | None = None) -> int:
        """How many sessions the index holds (of `agent` when given)."""
        where, args = _where(agent, None)
        return int(self._db().execute(f"SELECT count(*) FROM sessions{where}", args).fetchone()[0])
