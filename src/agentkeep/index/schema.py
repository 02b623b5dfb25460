"""The index's tables as SQLite stores them, and the `ls` text each row keeps.

A name that is not UTF-8 (a str with lone surrogates) is stored as a BLOB
(stored(), text()); the generated `listing` column leaves such a row for
Python to write (written_as_python()).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

SCHEMA_VERSION = 5
# The first SQLite with generated columns (sessions.listing).
SQLITE_NEEDED = (3, 31)

# model.rfc3339() in SQL: datetime.fromtimestamp() rounds to the microsecond
# before it drops the fraction, so a time within half a microsecond of the
# next second prints as that second.
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
# A workspace stored as a BLOB (a name that is not UTF-8, see stored()) is
# quoted as DEL, which written_as_python() sends to Python to write.
_WORKSPACE = "CASE typeof(workspace) WHEN 'blob' THEN char(127) ELSE workspace END"
# So is a session with places that cannot be listed, whose `unreadable`
# list (core.session_json) only Python writes (rare, and a list).
_UNREADABLE = "CASE WHEN unreadable IS NULL THEN '' ELSE char(127) END"
_SESSION_TEXT = (
    f"printf('%s{_SESSION_FORMAT}', {_UNREADABLE}, json_quote(agent), json_quote(id),"
    f" json_quote({_WORKSPACE}), json_quote(parent), json_quote({_RFC3339}), bytes, artifacts)"
)
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS sessions (
    agent TEXT NOT NULL, id TEXT NOT NULL, workspace TEXT, parent TEXT,
    last_activity REAL, bytes INTEGER NOT NULL, artifacts INTEGER NOT NULL,
    unsafe TEXT, disk_bytes INTEGER NOT NULL,
    -- The places that could not be listed (a JSON list), or NULL.
    unreadable TEXT,
    -- The session's `ls` text, written once with its row, not at each `ls`.
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
COLUMNS = (
    "agent, id, workspace, parent, last_activity, bytes, artifacts, unsafe, disk_bytes, unreadable"
)


IDLE_TAIL = '"state": "idle"\t  }'


def written_as_python(text: str) -> bool:
    """True when json_quote() wrote the strings in `text` as Python's json
    does: it escapes `"`, `\\` and control characters alike, and leaves DEL
    and everything past ASCII as they are, which Python escapes."""
    return text.isascii() and "\x7f" not in text


def version(db: sqlite3.Connection) -> int:
    """The schema version `db` was written with (0: a new database)."""
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def one_of(kinds: Iterable[str]) -> str:
    """`kinds` as SQL: `(kind = 'a' OR kind = 'b')`, literals in a fixed
    order: a partial index serves only a query repeating its WHERE term
    exactly, and `kind IN (...)` there costs each insert a temporary table."""
    quoted = (k.replace("'", "''") for k in sorted(kinds))
    terms = [f"kind = '{k}'" for k in quoted]
    return "(" + (" OR ".join(terms) or "0") + ")"


def stored(value: object) -> object:
    """`value` as SQLite can take it: a str that is not UTF-8 (lone
    surrogates, from surrogateescape) as a BLOB of its surrogatepass
    encoding, which decoded() turns back into the very same str."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
    return value


def decoded(value: object) -> Any:
    """A stored string as it was written (see stored())."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value
