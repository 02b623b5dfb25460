"""The index's database: one connection per thread, write transactions,
and the schema made (or another version's dropped) when it is opened."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from agentkeep.index.schema import SCHEMA, SCHEMA_VERSION, one_of, version


class Store:
    """The database at `path` (or in memory), for the writes and queries
    Index adds. The artifacts of `evidence_kinds` (what holders() reads) are
    in a partial index: `ls` reads a few of every session's artifacts."""

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
        db.executescript(SCHEMA)  # each statement is idempotent; executescript commits
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._index_evidence(db)

    def _drop_other_schema(self, db: sqlite3.Connection) -> None:
        """An index of another schema (0: a new database) is dropped: a
        cache, which the next reconcile fills again."""
        if version(db) in (0, SCHEMA_VERSION):
            return
        with self._tx() as tx:
            if version(tx) not in (0, SCHEMA_VERSION):  # another process may have done it
                for table in ("sessions", "artifacts", "dirs", "unlisted"):
                    tx.execute(f"DROP TABLE IF EXISTS {table}")
                tx.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _index_evidence(self, db: sqlite3.Connection) -> None:
        """Made, or made again where another version's kinds differ."""
        want = "CREATE INDEX artifacts_evidence ON artifacts (agent) WHERE " + one_of(
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
        """This thread's connection in one write transaction (BEGIN IMMEDIATE)."""
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
        """Close this thread's connection (the next use opens another)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
