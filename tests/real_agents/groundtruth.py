"""What names a session, found by looking for its id everywhere.

The conformance suite's ground truth is computed without agentkeep: every
file and directory under the fake user's tree whose name carries the id,
every file whose content carries it (the shared ones, such as Claude's
`history.jsonl`, are expected to stay), and every row of every table of
every SQLite database in the tree that holds it in any column (read from a
copy, so the agent's database is never touched).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_SQLITE = b"SQLite format 3\x00"
_CONTENT_LIMIT = 32 << 20
_SIDE = ("-wal", "-shm", "-journal")


@dataclass
class Naming:
    """Everything that names one id."""

    names: set[str] = field(default_factory=set)
    contents: set[str] = field(default_factory=set)
    rows: set[str] = field(default_factory=set)

    def everything(self) -> set[str]:
        return self.names | self.contents | self.rows


def _files(roots: Iterable[Path]) -> Iterable[tuple[str, bool]]:
    """(path, is a regular file) of everything below `roots`, links not followed."""
    for root in roots:
        if not root.exists():
            continue
        for top, dirs, files in os.walk(root, followlinks=False):
            for name in dirs:
                yield os.path.join(top, name), False
            for name in files:
                path = os.path.join(top, name)
                yield path, os.path.isfile(path) and not os.path.islink(path)


def _is_sqlite(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == _SQLITE
    except OSError:
        return False


def _rows(db: str, ids: list[str]) -> dict[str, set[str]]:
    """`<db>#<table>` for each table holding each id in any column."""
    found: dict[str, set[str]] = {sid: set() for sid in ids}
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "copy.sqlite")
        shutil.copyfile(db, copy)
        for suffix in _SIDE[:1]:
            if os.path.exists(db + suffix):
                shutil.copyfile(db + suffix, copy + suffix)
        conn = sqlite3.connect(copy)
        try:
            listed = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = [r[0] for r in listed]
            for table in tables:
                cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
                for sid in ids:
                    where = " OR ".join(f'instr(CAST("{c}" AS TEXT), ?) > 0' for c in cols)
                    if not where:
                        continue
                    hit = conn.execute(
                        f'SELECT 1 FROM "{table}" WHERE {where} LIMIT 1', [sid] * len(cols)
                    ).fetchone()
                    if hit:
                        found[sid].add(f"{db}#{table}")
        finally:
            conn.close()
    return found


def naming(roots: Iterable[Path], ids: Iterable[str]) -> dict[str, Naming]:
    """For each id, what names it below `roots`."""
    wanted = sorted(set(ids))
    out = {sid: Naming() for sid in wanted}
    for path, regular in _files(roots):
        name = os.path.basename(path)
        for sid in wanted:
            if sid in name or sid.upper() in name:
                out[sid].names.add(path)
        if not regular or path.endswith(_SIDE):
            continue
        if _is_sqlite(path):
            for sid, rows in _rows(path, wanted).items():
                out[sid].rows |= rows
            continue
        try:
            if os.path.getsize(path) > _CONTENT_LIMIT:
                continue
            data = Path(path).read_bytes()
        except OSError:
            continue
        for sid in wanted:
            if path not in out[sid].names and sid.encode() in data:
                out[sid].contents.add(path)
    return out


def digests(paths: Iterable[str | Path]) -> dict[str, str | None]:
    """sha256 of each file (None: missing), to prove shared files unchanged."""
    out: dict[str, str | None] = {}
    for path in paths:
        try:
            out[str(path)] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except FileNotFoundError:
            out[str(path)] = None
    return out


def tree(roots: Iterable[Path]) -> set[str]:
    """Every path below `roots` (to compare before and after)."""
    return {path for path, _ in _files(roots)}


def covered(path: str, artifacts: Iterable[str]) -> bool:
    """Whether `path` is one of `artifacts` or lies below one of them."""
    return any(path == a or path.startswith(a + "/") for a in artifacts)
