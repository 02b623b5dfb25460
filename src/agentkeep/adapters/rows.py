"""A session's database rows as artifacts (`<db>#<table>`, one per table,
no root, no bytes, dated by the agent's time for the session), kept in the
trash and deleted: only rows whose key column (`Keys`) is the session's id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from agentkeep.adapters import sqlite
from agentkeep.adapters.base import Remover
from agentkeep.model import Artifact
from agentkeep.processes import ProcessTable

KIND = "row"

# The columns of a table that name a session (a table or column a version
# does not have names none: sqlite.delete_rows skips it).
Keys = Callable[[str], Sequence[str]]


def row(db: Path | str, table: str, mtime: float | None, primary: bool, linked: bool) -> Artifact:
    """The artifact of a session's rows in `table`."""
    return Artifact(f"{db}#{table}", KIND, 0, mtime, None, primary, linked)


def is_row(artifact: Artifact) -> bool:
    """Whether `artifact` stands for rows."""
    return artifact.kind == KIND


def db_of(artifact: Artifact) -> Path:
    """The database of a row artifact."""
    return Path(artifact.path.rpartition("#")[0])


def table_of(artifact: Artifact) -> str:
    """The table of a row artifact."""
    return artifact.path.rpartition("#")[2]


def ours(artifacts: Iterable[Artifact]) -> list[Artifact]:
    """The row artifacts agentkeep may delete: those not behind a link."""
    return [a for a in artifacts if is_row(a) and not a.linked]


def ensure_alone(rows: Iterable[Artifact], uid: int) -> None:
    """RemovalError when another process has a database of `rows` open
    (sqlite.ensure_alone): checked before anything of the session changes."""
    if databases := {db_of(a) for a in rows}:
        sqlite.ensure_alone(databases, ProcessTable.snapshot(uid))


def _by_database(
    sid: str, rows: Iterable[Artifact], keys: Keys
) -> dict[Path, list[sqlite.Deletion]]:
    grouped: dict[Path, list[sqlite.Deletion]] = {}
    for artifact in rows:
        table = table_of(artifact)
        grouped.setdefault(db_of(artifact), []).extend((table, key, sid) for key in keys(table))
    return grouped


def keep(sid: str, rows: Sequence[Artifact], keys: Keys, remover: Remover) -> None:
    """Hand the rows an agent's own command is about to delete to the trash
    (not in a dry run). RemovalError when they cannot be read or kept: the
    command must not run then."""
    if remover.dry_run:
        return
    for db, deletions in _by_database(sid, rows, keys).items():
        for kept in sqlite.read_rows(db, deletions):
            if kept.rows:
                remover.keep_rows(kept)


def delete(sid: str, rows: Sequence[Artifact], keys: Keys, remover: Remover) -> None:
    """Delete the rows in the order given, one transaction per database,
    each table's rows kept in the trash inside it; each reported removed."""
    if not remover.dry_run:
        for db, deletions in _by_database(sid, rows, keys).items():
            sqlite.delete_rows(db, deletions, keep=remover.keep_rows)
    for artifact in rows:
        remover.removed_at_once(artifact.path)
