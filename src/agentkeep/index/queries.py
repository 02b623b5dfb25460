"""Reading the index: sessions, their `ls` text and artifacts, and what a
reconcile recorded (directory signatures, places that cannot be listed)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentkeep.index.rows import BATCH
from agentkeep.index.schema import COLUMNS, SCHEMA_VERSION, decoded, one_of, version
from agentkeep.index.store import Store
from agentkeep.model import Artifact

# `ls` order: oldest activity first, undated sessions last.
_ORDER = "last_activity IS NULL, last_activity, agent, id"


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
    workspace, parent = decoded(workspace), decoded(parent)
    return IndexedSession(
        agent, sid, workspace, parent, activity, size, artifacts, unsafe, disk, places
    )


def _artifact(row: Sequence[Any]) -> Artifact:
    path, kind, size, mtime, root, primary, linked, is_dir = row
    return Artifact(
        decoded(path), kind, size, mtime, decoded(root), bool(primary), bool(linked), bool(is_dir)
    )


def _terms(agent: str | None, idle_before: float | None) -> tuple[list[str], list[object]]:
    """The terms of a WHERE choosing `agent`'s sessions idle since before
    `idle_before` (each when given), and their arguments."""
    chosen = [("agent = ?", agent), ("last_activity < ?", idle_before)]
    return [t for t, arg in chosen if arg is not None], [a for _, a in chosen if a is not None]


def _where(
    agent: str | None, idle_before: float | None, order: str = ""
) -> tuple[str, list[object]]:
    """_terms() as a WHERE (and `order`'s ORDER BY), and its arguments."""
    terms, args = _terms(agent, idle_before)
    where = " WHERE " + " AND ".join(terms) if terms else ""
    return where + (f" ORDER BY {order}" if order else ""), args


def recorded_unreadable(path: Path) -> dict[str, list[str]]:
    """Index.unreadable() of the index at `path`, opened read-only (never
    made); nothing when there is none, or it is another version's."""
    if not os.path.exists(path):  # Path.exists raises where the state dir cannot be searched
        return {}
    try:
        with closing(
            sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=5)
        ) as db:
            return _unreadable(db, None) if version(db) == SCHEMA_VERSION else {}
    except sqlite3.Error:
        return {}


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
        found.setdefault(name, set()).add(decoded(path))
    return {name: sorted(paths) for name, paths in sorted(found.items())}


class Queries(Store):
    """The index's reads."""

    def dir_signatures(self, agent: str) -> dict[str, int | None]:
        """What set_dir_signatures() last recorded of `agent`."""
        rows = self._db().execute("SELECT path, mtime_ns FROM dirs WHERE agent = ?", (agent,))
        return {decoded(path): mtime for path, mtime in rows}

    def unlisted(self, agent: str) -> dict[str, str]:
        """What set_unlisted() last recorded of `agent`."""
        rows = self._db().execute("SELECT path, why FROM unlisted WHERE agent = ?", (agent,))
        return {decoded(path): why for path, why in rows}

    def unreadable(self, agent: str | None = None) -> dict[str, list[str]]:
        """Every place recorded as not listable (_unreadable)."""
        return _unreadable(self._db(), agent)

    def sessions(self, agent: str | None = None) -> list[IndexedSession]:
        """Oldest activity first; undated sessions last."""
        return list(self.each_session(agent))

    def each_session(self, agent: str | None = None) -> Iterator[IndexedSession]:
        """sessions(), read as it is iterated: a total over every session
        never holds them all."""
        tail, args = _where(agent, None, _ORDER)
        return map(_session, self._stream(f"SELECT {COLUMNS} FROM sessions{tail}", args))

    def listing_rows(
        self, agent: str | None = None, idle_before: float | None = None
    ) -> Iterator[tuple[str, str, str]]:
        """(agent, id, text) of every session (idle since before
        `idle_before` when given; undated ones never), in `sessions()` order,
        read a batch at a time. The text is the contract's `ls` object with
        state "idle", folded (schema._SESSION_TEXT), unless
        written_as_python() says otherwise; SQLite wrote it with the row."""
        tail, args = _where(agent, idle_before, _ORDER)
        return self._stream(f"SELECT agent, id, listing FROM sessions{tail}", args)

    def listing_ids(
        self, agent: str | None = None, idle_before: float | None = None
    ) -> dict[str, Iterator[str]]:
        """The ids listing_rows() lists, by agent (in no order), each read a
        batch at a time."""
        agents = (
            [agent] if agent is not None else self._column("SELECT DISTINCT agent FROM sessions")
        )
        return {a: self._ids(a, idle_before) for a in agents}

    def _ids(self, agent: str, idle_before: float | None) -> Iterator[str]:
        where, args = _where(agent, idle_before)
        return (sid for (sid,) in self._stream(f"SELECT id FROM sessions{where}", args))

    def begin_reading(self) -> None:
        """What this thread reads until end_reading() is one snapshot of
        the index, whatever other threads write meanwhile."""
        db = self._db()
        if not db.in_transaction:
            db.execute("BEGIN")

    def end_reading(self) -> None:
        """End this thread's snapshot (begin_reading())."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None and db.in_transaction:
            db.execute("COMMIT")

    def sessions_of(self, agent: str, ids: Iterable[str]) -> list[IndexedSession]:
        """The indexed sessions of `agent` among `ids` (in no order), in one query."""
        rows = self._db().execute(
            f"SELECT {COLUMNS} FROM sessions"
            " WHERE agent = ? AND id IN (SELECT value FROM json_each(?))",
            (agent, json.dumps(list(ids))),
        )
        return [_session(row) for row in rows]

    def get(self, agent: str, session_id: str) -> IndexedSession | None:
        """The indexed session `session_id` of `agent`, or None."""
        sql = f"SELECT {COLUMNS} FROM sessions WHERE agent = ? AND id = ?"
        row = self._db().execute(sql, (agent, session_id)).fetchone()
        return _session(row) if row else None

    def artifacts(self, agent: str, session_id: str) -> list[Artifact]:
        """The session's artifacts, its primary ones first, then by path."""
        rows = self._db().execute(
            "SELECT path, kind, bytes, mtime, root, is_primary, linked, is_dir FROM artifacts"
            " WHERE agent = ? AND session_id = ? ORDER BY is_primary DESC, path",
            (agent, session_id),
        )
        return list(map(_artifact, rows))

    def all_artifacts(
        self, agent: str | None = None, kinds: Iterable[str] | None = None
    ) -> dict[tuple[str, str], list[Artifact]]:
        """Artifacts of every session in one query (for listing many
        sessions), only of `kinds` when given."""
        where, args = _terms(agent, None)
        if kinds is not None:
            kinds = list(kinds)
            if self._evidence and self._evidence.issuperset(kinds):
                where.append(one_of(self._evidence))  # the partial index's own term
            marks = ",".join("?" * len(kinds)) or "NULL"  # IN (NULL) matches nothing
            where.append(f"kind IN ({marks})")
            args += kinds
        sql = (
            "SELECT agent, session_id, path, kind, bytes, mtime, root, is_primary, linked, is_dir"
            " FROM artifacts" + (" WHERE " + " AND ".join(where) if where else "")
        )
        out: dict[tuple[str, str], list[Artifact]] = {}
        for agent_, sid, *row in self._db().execute(sql, args):
            out.setdefault((agent_, sid), []).append(_artifact(row))
        return out

    def artifact_times(self, agent: str) -> Iterator[tuple[str, str, float | None]]:
        """(session id, path, mtime) of every file-system artifact, streamed."""
        rows = self._db().execute(
            "SELECT session_id, path, mtime FROM artifacts WHERE agent = ? AND root IS NOT NULL",
            (agent,),
        )
        for sid, path, mtime in rows:
            yield sid, decoded(path), mtime

    def kind_totals(self) -> Iterator[tuple[str, str, str, int, int]]:
        """(agent, session id, kind, bytes, disk bytes) of every session's
        artifacts of each kind, streamed (`du --by kind`)."""
        return self._stream(
            "SELECT agent, session_id, kind, sum(bytes), sum(disk_bytes) FROM artifacts"
            " GROUP BY agent, session_id, kind"
        )

    def children(self, agent: str, session_id: str) -> list[str]:
        """The ids of the sessions whose parent is `session_id`, sorted."""
        sql = "SELECT id FROM sessions WHERE agent = ? AND parent = ? ORDER BY id"
        return self._column(sql, agent, session_id)

    def count(self, agent: str | None = None) -> int:
        """How many sessions the index holds (of `agent` when given)."""
        where, args = _where(agent, None)
        return int(self._db().execute(f"SELECT count(*) FROM sessions{where}", args).fetchone()[0])

    def _stream(self, sql: str, args: Sequence[object] = ()) -> Iterator[Any]:
        """The rows of `sql`, fetched BATCH at a time as they are iterated."""
        cursor = self._db().execute(sql, args)
        while batch := cursor.fetchmany(BATCH):
            yield from batch

    def _column(self, sql: str, *args: object) -> list[Any]:
        return [row[0] for row in self._db().execute(sql, args)]
