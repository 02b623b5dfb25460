"""Looking again after a removal: what still names a session that was removed.

An artifact kind the adapter does not know, or something a removal left,
must show in the report's `residual`, never vanish. So each agent looks
again from the disk: the adapter lists the removed sessions again; every
table of its databases with an id column holding a removed id
(`<database>#<table>`); every entry below its roots whose name carries a
removed id (`id_in_name`).

Reading only: databases read-only, links never followed, and the walk stops
at MAX_DEPTH and at directories named for another session.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Collection, Iterator
from pathlib import Path

import structlog

from agentkeep import fsio
from agentkeep.adapters import sqlite
from agentkeep.adapters.base import Adapter

log = structlog.get_logger("agentkeep.lookagain")

# Below a root, a name that carries a session's id lies this deep at most in
# every layout seen (Claude's `projects/<key>/<id>/subagents/<file>`).
MAX_DEPTH = 5
_ID_COLUMN = re.compile(r"(?:^id|_id|Id|ID)$")


def residual(adapter: Adapter, ids: Collection[str]) -> Iterator[tuple[str, str]]:
    """(id, what) for everything that still names one of the removed `ids`."""
    if not ids:
        return
    wanted = frozenset(ids)
    # Only what names a session still: most often nothing, of thousands.
    found: set[tuple[str, str]] = set()
    for s in adapter.sessions(wanted):
        found.update((s.id, what) for what in [*(a.path for a in s.artifacts), *s.residual])
    for db in adapter.databases():
        found.update(_rows(db, wanted))
    if adapter.id_in_name is not None:
        found.update(_names(adapter, adapter.id_in_name, wanted))
    yield from sorted(found)


def _rows(db: Path, ids: frozenset[str]) -> Iterator[tuple[str, str]]:
    """(id, `<db>#<table>`) for each table with an id column holding an id."""
    if not os.path.lexists(db):
        return
    try:
        with sqlite.reading(db) as conn:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            hits: set[tuple[str, str]] = set()
            for table in tables:
                id_columns = [c for c in sqlite.columns(conn, table) if _ID_COLUMN.search(c)]
                for column in sorted(id_columns):
                    sql = f'SELECT DISTINCT "{column}" FROM "{table}"'
                    for (value,) in conn.execute(*sqlite.among(sql, f'"{column}"', ids)):
                        if isinstance(value, str) and value in ids:
                            hits.add((value, f"{db}#{table}"))
    except sqlite3.Error as exc:
        # A database that cannot be read may hold rows: say so, do not guess.
        log.warning("cannot look again in a database", db=str(db), error=str(exc))
        yield from ((sid, f"{db} (unreadable: {exc})") for sid in sorted(ids))
        return
    yield from sorted(hits)


def _names(
    adapter: Adapter, pattern: re.Pattern[str], ids: frozenset[str]
) -> Iterator[tuple[str, str]]:
    """(id, path) for each entry below the adapter's roots named with an id."""
    roots = sorted({os.fspath(r.path) for r in adapter.roots()})
    # A root inside another (Claude's projects dir in its config dir) is
    # walked as part of the outer one.
    outer = [r for r in roots if not any(r.startswith(o.rstrip("/") + "/") for o in roots)]
    for root in outer:
        stack = [(root, 0)]
        while stack:
            directory, depth = stack.pop()
            # A link at a root itself is the user's own (Root.check).
            for name, is_dir in _entries(directory, follow=depth == 0):
                named = _ids_in(adapter, pattern, name)
                path = f"{directory}/{name}"
                yield from ((sid, path) for sid in named & ids)
                # Named for a session: what is below goes with it, or is another's.
                if is_dir and not named and depth + 1 < MAX_DEPTH:
                    stack.append((path, depth + 1))


def _ids_in(adapter: Adapter, pattern: re.Pattern[str], name: str) -> set[str]:
    ids = (adapter.canonical_id(match.group(0)) for match in pattern.finditer(name))
    return {sid for sid in ids if sid is not None}


def _entries(directory: str, *, follow: bool) -> list[tuple[str, bool]]:
    """(name, is a directory) of each entry, a link never counted as one."""
    try:
        with fsio.scandir(directory, follow=follow) as listing:
            return [(e.name, e.is_dir(follow_symlinks=False)) for e in listing]
    except OSError:
        return []
