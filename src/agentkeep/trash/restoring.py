"""Restore: a session, and its ancestors still in the trash, put back where
they were, files and database rows. Everything is checked first, and
nothing moves unless all of it can; the session's leases are held
throughout (leases.take_session), so it never races a prune or an expiry."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentkeep import rootsafety
from agentkeep.adapters import sqlite
from agentkeep.adapters.sqlite import TableRows
from agentkeep.errors import RemovalError
from agentkeep.history import Record
from agentkeep.leases import LeaseError, Taken, take_session
from agentkeep.processes import ProcessTable
from agentkeep.trash.entries import (
    ROOTS,
    NoSuchEntry,
    RestoreConflict,
    RestoreRefused,
    TrashEntry,
    TrashError,
    entry_of,
    read_entry,
)
from agentkeep.trash.expiry import discard
from agentkeep.trash.moveback import restore_tree
from agentkeep.trash.packing import unpacked
from agentkeep.trash.restored import record_restored
from agentkeep.trash.rows import saved_rows

log = structlog.get_logger("agentkeep.trash")

# A session back from the trash, in the record of what went.
RESTORED = "restored"


@dataclass
class RestoreResult:
    """The entries put back (the session first), the bytes and paths moved."""

    entries: list[TrashEntry]
    bytes: int = 0
    paths: list[str] = field(default_factory=list)


def _chain(state_dir: Path, agent: str, session_id: str) -> list[TrashEntry]:
    """The session's entry, then each ancestor's still in the trash, each
    read from its own directory alone."""
    entry = entry_of(state_dir, agent, session_id)
    if entry is None:
        raise NoSuchEntry(f"no {agent} session {session_id} in the trash")
    chain = [entry]
    seen = {entry.id}
    while entry.parent is not None and entry.parent not in seen:
        parent = entry_of(state_dir, agent, entry.parent)
        if parent is None:
            break
        entry = parent
        seen.add(entry.id)
        chain.append(entry)
    return chain


def _lease_all(state_dir: Path, chain: list[TrashEntry]) -> list[Taken]:
    """Every entry's session taken (leases.take_session), or RestoreRefused."""
    taken: list[Taken] = []
    try:
        for entry in chain:
            try:
                one = take_session(state_dir, entry.agent, entry.id)
            except LeaseError as exc:
                raise RestoreRefused(f"{entry.agent} {entry.id}: {exc}") from exc
            if isinstance(one, str):
                raise RestoreRefused(f"{entry.agent} {entry.id} is held")
            taken.append(one)
    except BaseException:
        for one in taken:
            one.release()
        raise
    return taken


def restore(state_dir: Path, agent: str, session_id: str, *, now: float) -> RestoreResult:
    """Put a session, and its ancestors still in the trash, back (see the
    module). RestoreConflict when anything would be overwritten (a file, a
    row with the same key that differs); RestoreRefused when a lease is
    held, a destination is not safe to write into or a database is in use;
    NoSuchEntry when the session is not in the trash."""
    chain = _chain(state_dir, agent, session_id)
    leases = _lease_all(state_dir, chain)
    try:
        # Read again under the leases: an expire may have removed one meanwhile.
        current = [e for e in (read_entry(e.path) for e in chain if e.path.is_dir()) if e]
        if not current or current[0].id != session_id:
            raise NoSuchEntry(f"no {agent} session {session_id} in the trash")
        # A compressed entry is first unpacked: files go back by link-then-unlink.
        current = [unpacked(e) for e in current]
        rows = {id(e): saved_rows(e) for e in current}
        _check(current, rows)
        # Recorded before anything moves: a restored session must never look
        # idle, even when the restore stops half way.
        record_restored(state_dir, [(e.agent, e.id) for e in current], now)
        result = RestoreResult(entries=current)
        record = Record(state_dir)
        for entry in reversed(current):
            result.bytes += _put_back(entry, rows[id(entry)])
            result.paths += [os.path.join(entry.roots[i.root], i.rel) for i in entry.items]
            discard(entry.path)
            log.info("restored from the trash", agent=entry.agent, id=entry.id)
            record.add(entry.gone(RESTORED, now))
        return result
    finally:
        for lease in leases:
            lease.release()


def _check(entries: list[TrashEntry], rows: dict[int, dict[str, list[TableRows]]]) -> None:
    """Everything restore needs, checked before anything moves."""
    unsafe = [p for e in entries for root in e.roots.values() if (p := _destination_problem(root))]
    if unsafe:
        raise RestoreRefused("not restoring into an unsafe place: " + "; ".join(unsafe))
    databases = sorted({db for e in entries for db in rows[id(e)]})
    if databases:
        try:
            sqlite.ensure_alone([Path(db) for db in databases], ProcessTable.snapshot())
        except RemovalError as exc:
            raise RestoreRefused(str(exc)) from exc
    conflicts: list[str] = []
    for entry in entries:
        for n, root in sorted(entry.roots.items()):
            conflicts += restore_tree(entry.path / ROOTS / str(n), root, act=False)[0]
        for db, saved in rows[id(entry)].items():
            conflicts += _rows_back(db, saved, act=False)
    if conflicts:
        raise RestoreConflict(conflicts)


def _put_back(entry: TrashEntry, rows: dict[str, list[TableRows]]) -> int:
    """Move one entry's files back (the bytes moved), then write its rows
    back: the files first, so that a row an agent lists the session by never
    stands without them (the reverse of the removal's order)."""
    moved = 0
    for n, root in sorted(entry.roots.items()):
        _make_root(root)
        prefix = f"{n}/"
        times = {k[len(prefix) :]: t for k, t in entry.dir_times.items() if k.startswith(prefix)}
        moved += restore_tree(entry.path / ROOTS / str(n), root, act=True, times=times)[1]
    for db, saved in rows.items():
        conflicts = _rows_back(db, saved, act=True)
        if conflicts:
            raise RestoreConflict(conflicts)
    return moved


def _rows_back(db: str, saved: list[TableRows], *, act: bool) -> list[str]:
    try:
        return sqlite.write_back(Path(db), saved, act=act)
    except RemovalError as exc:
        raise TrashError(str(exc)) from exc


def _destination_problem(root: str) -> str | None:
    """Why files must not be put back under `root`, checked like an agent
    root; a root that is gone (a reboot emptied /tmp) by the way to it,
    which restore then makes, 0700."""
    uid = os.getuid()
    if os.path.lexists(root):
        return rootsafety.root_problem(root, uid)
    parent = os.path.dirname(root)
    while parent != os.path.dirname(parent) and not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    return rootsafety.way_problem(parent, uid)


def _make_root(root: str) -> None:
    """Make a root that is gone, each missing directory 0700 and ours; a
    directory someone else planted meanwhile is refused, never used."""
    missing: list[str] = []
    path = root
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
    problem = rootsafety.root_problem(root, os.getuid())
    if problem is not None:
        raise RestoreRefused(f"not restoring into an unsafe place: {problem}")
