"""Writing the index: a scan's sessions replacing an agent's, a watcher's
changes, the directories and places a reconcile lists. Each write is one
transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from agentkeep.index.rows import Rows, batches, rows
from agentkeep.index.schema import COLUMNS, stored
from agentkeep.index.store import Store
from agentkeep.model import Session


def _write(db: sqlite3.Connection, done: Rows) -> None:
    """Insert the rows of `done`."""
    _insert(db, f"INSERT INTO sessions ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)", done.sessions)
    _insert(db, "INSERT INTO artifacts VALUES (?,?,?,?,?,?,?,?,?,?,?)", done.artifacts)


def _insert(db: sqlite3.Connection, sql: str, rows: Sequence[tuple[object, ...]]) -> None:
    """executemany; rows holding a name that is not UTF-8 (which TEXT
    cannot take) go again as schema.stored() keeps them. TEXT is tried
    first: nearly every row is UTF-8."""
    db.execute("SAVEPOINT rows")
    try:
        db.executemany(sql, rows)
    except UnicodeEncodeError:
        # executemany stopped at the row it could not bind: undo the rows
        # before it and write them all again, converted.
        db.execute("ROLLBACK TO rows")
        db.executemany(sql, [tuple(map(stored, row)) for row in rows])
    db.execute("RELEASE rows")


class Replacement:
    """The sessions a scan adds inside Index.replacing(), with what it
    counted per agent: (sessions, artifacts, bytes)."""

    def __init__(self, db: sqlite3.Connection, agents: Sequence[str]) -> None:
        self._db = db
        self.counts: dict[str, tuple[int, int, int]] = {agent: (0, 0, 0) for agent in agents}

    def add(self, agent: str, parts: Iterable[Rows]) -> None:
        """Write `parts` as sessions of `agent`, counting them."""
        n, arts, total = self.counts[agent]
        for done in parts:
            _write(self._db, done)
            n, arts, total = n + len(done.sessions), arts + len(done.artifacts), total + done.bytes
        self.counts[agent] = (n, arts, total)


class Writing(Store):
    """The index's writes."""

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
            for table in ("sessions", "artifacts", "dirs", "unlisted"):
                db.execute(f"DELETE FROM {table} WHERE agent NOT IN ({marks})", keep)

    @staticmethod
    def _delete(db: sqlite3.Connection, agent: str, session_id: str) -> None:
        """Forget one session and its artifacts, inside a transaction."""
        db.execute("DELETE FROM sessions WHERE agent = ? AND id = ?", (agent, session_id))
        db.execute("DELETE FROM artifacts WHERE agent = ? AND session_id = ?", (agent, session_id))

    def set_dir_signatures(self, agent: str, signatures: dict[str, int | None]) -> None:
        """Record `agent`'s listed directories (path -> mtime_ns) for the next reconcile."""
        self._replace("dirs", agent, [(p, agent, m) for p, m in signatures.items()])

    def set_unlisted(self, agent: str, unlisted: Mapping[str, str]) -> None:
        """What adapters.base.unlisted() found of `agent` now (path -> why)."""
        self._replace("unlisted", agent, [(agent, path, why) for path, why in unlisted.items()])

    def _replace(self, table: str, agent: str, rows: list[tuple[object, ...]]) -> None:
        """Make `table` (of three columns) hold exactly `rows` for `agent`."""
        with self._tx() as db:
            db.execute(f"DELETE FROM {table} WHERE agent = ?", (agent,))
            _insert(db, f"INSERT INTO {table} VALUES (?,?,?)", rows)
