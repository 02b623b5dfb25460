"""Looking again after a removal: what still names a session that was removed.

An adapter removes what it knows of a session. An agent's next version may
write a kind of artifact the adapter does not know yet, and a removal may
leave something behind; either must show in the report's `residual`, never
vanish (CONTRACT "JSON shapes": `residual` comes from looking again). So
once a run has removed sessions, each agent looks again, from the disk:

- the adapter lists the removed sessions again: whatever it still finds;
- every table of the agent's databases with an id column (`id`, `*_id`,
  `*Id`) holding a removed id: `<database>#<table>`;
- every file or directory below the agent's roots whose name carries a
  removed id (the adapter's `id_in_name` finds ids in names).

Reading only: databases are opened read-only, names are listed without a
stat, links are never followed, and the walk stops at MAX_DEPTH below a root
and at directories that belong to another session (their names carry an id
that is not one removed): the rest of a big home is never walked.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections import defaultdict
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
    found: dict[str, set[str]] = defaultdict(set)
    for session in adapter.sessions(wanted):
        found[session.id].update(a.path for a in session.artifacts)
        found[session.id].update(session.residual)
    for db in adapter.databases():
        for sid, where in _rows(db, wanted):
            found[sid].add(where)
    pattern = adapter.id_in_name
    if pattern is not None:
        for sid, path in _names(adapter, pattern, wanted):
            found[sid].add(path)
    for sid in sorted(found):
        for what in sorted(found[sid]):
            yield sid, what


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
                mine = named & ids
                for sid in sorted(mine):
                    yield sid, path
                if mine or not is_dir or depth + 1 >= MAX_DEPTH:
                    continue  # found (what is below goes with it), or too deep
                if named:
                    continue  # another session's own directory
                stack.append((path, depth + 1))


def _ids_in(adapter: Adapter, pattern: re.Pattern[str], name: str) -> set[str]:
    found = set()
    for match in pattern.finditer(name):
        sid = adapter.canonical_id(match.group(0))
        if sid is not None:
            found.add(sid)
    return found


def _entries(directory: str, *, follow: bool) -> list[tuple[str, bool]]:
    """(name, is a directory) of each entry, a link never counted as one."""
    try:
        with fsio.scandir(directory, follow=follow) as listing:
            return [(e.name, e.is_dir(follow_symlinks=False)) for e in listing]
    except OSError:
        return []
