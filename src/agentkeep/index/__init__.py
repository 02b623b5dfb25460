"""The session index: a SQLite cache of every session and its artifacts.

The disk is the truth and the index is a cache, rebuilt from disk at any
time (`scan`); nothing decides a removal from the index alone (prune lists
every session again from the disk under its lease). WAL mode and one
connection per thread let the daemon answer queries while it indexes.

Modules: schema (the tables, the `ls` text SQLite keeps with each row),
rows (sessions as rows), store (connections, transactions), writing, queries.
"""

from __future__ import annotations

from agentkeep.index.queries import IndexedSession, Queries, recorded_unreadable
from agentkeep.index.rows import Rows, batches
from agentkeep.index.schema import IDLE_TAIL, SCHEMA_VERSION, SQLITE_NEEDED, written_as_python
from agentkeep.index.writing import Writing

__all__ = [
    "IDLE_TAIL",
    "SCHEMA_VERSION",
    "SQLITE_NEEDED",
    "Index",
    "IndexedSession",
    "Rows",
    "batches",
    "recorded_unreadable",
    "written_as_python",
]


class Index(Writing, Queries):
    """The index at `path` (Store), with its writes and its reads."""
