"""Restore: a session, and its ancestors still in the trash, put back where
they were, files and database rows. Everything is checked first, and
nothing moves unless all of it can; the session's leases are held
throughout (leases.take_session), so it never races a prune or an expiry.
Files go back by link-then-unlink and directories by mkdir, each of which
fails rather than replace what appeared meanwhile (never an overwrite)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentkeep import rootsafety
from agentkeep.adapters import sqlite
from agentkeep.adapters.sqlite import TableRows
from agentkeep.disk import DirCursor
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
from agentkeep.trash.packing import unpacked
from agentkeep.trash.restored import record_restored
from agentkeep.trash.writing import saved_rows

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
    while (up := chain[-1].parent) is not None and up not in {e.id for e in chain}:
        if (parent := entry_of(state_dir, agent, up)) is None:
            break
        chain.append(parent)
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


@dataclass
class _Level:
    name: str
    pending: list[str]
    dst: bool  # the destination cursor stands in this level's destination
    # The trash directory's stat when its destination was made here: its
    # mode and times are put back once everything is inside.
    created: os.stat_result | None = None


def restore_tree(
    src_root: Path, dst_root: str, *, act: bool, times: dict[str, tuple[int, int]] | None = None
) -> tuple[list[str], int]:
    """Check (act=False) or move back (act=True) the tree `src_root` into
    `dst_root`: the conflicting destinations and the bytes moved. `times`:
    the recorded times of directories below `dst_root`, by relative path,
    for those made again. The destination is walked like a removal
    (invariant 6): a link on the way is a conflict, never followed; an
    existing directory is merged into, any other existing name conflicts."""
    if not src_root.is_dir():
        return [], 0
    try:
        dst: DirCursor | None = DirCursor.open(dst_root)
    except FileNotFoundError:
        dst = None
    except NotADirectoryError:
        return [dst_root], 0
    conflicts: list[str] = []
    nbytes = 0
    try:
        with DirCursor.open(src_root) as src:
            levels = [_Level("", os.listdir(src.fd), dst=dst is not None)]
            while levels:
                level = levels[-1]
                if level.pending:
                    nbytes += _restore_entry(src, dst, level, levels, conflicts, act=act)
                    continue
                levels.pop()
                if not levels:
                    break
                if level.dst and dst is not None:
                    if level.created is not None:
                        rel = "/".join(lv.name for lv in levels[1:] + [level])
                        own = (level.created.st_atime_ns, level.created.st_mtime_ns)
                        os.fchmod(dst.fd, stat.S_IMODE(level.created.st_mode))
                        os.utime(dst.fd, ns=(times or {}).get(rel, own))
                    dst.up()
                src.up()
                if act:
                    os.rmdir(level.name, dir_fd=src.fd)
    finally:
        if dst is not None:
            dst.close()
    return conflicts, nbytes


def _restore_entry(
    src: DirCursor,
    dst: DirCursor | None,
    level: _Level,
    levels: list[_Level],
    conflicts: list[str],
    *,
    act: bool,
) -> int:
    name = level.pending.pop()
    st = os.stat(name, dir_fd=src.fd, follow_symlinks=False)
    dst_st: os.stat_result | None = None
    if level.dst and dst is not None:
        try:
            dst_st = os.stat(name, dir_fd=dst.fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
    here = dst.path(name) if dst is not None else name
    if stat.S_ISDIR(st.st_mode):
        if dst_st is not None and not stat.S_ISDIR(dst_st.st_mode):
            conflicts.append(here)
            return 0
        if not act and dst_st is None:
            return 0  # nothing there: nothing below can be overwritten
        assert dst is not None
        created = None
        if dst_st is None:
            with _no_overwrite(here):
                os.mkdir(name, 0o700, dir_fd=dst.fd)
            dst_st = os.stat(name, dir_fd=dst.fd, follow_symlinks=False)
            created = st
        dst.down(name, (dst_st.st_dev, dst_st.st_ino))
        src.down(name, (st.st_dev, st.st_ino))
        if act and st.st_mode & stat.S_IRWXU != stat.S_IRWXU:
            # Its own mode goes to the destination; the trash copy must let
            # us take its entries out.
            os.fchmod(src.fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
        levels.append(_Level(name, os.listdir(src.fd), dst=True, created=created))
        return 0
    if dst_st is not None:
        conflicts.append(here)
        return 0
    if act:
        assert dst is not None
        # link fails when the name exists: nothing is ever replaced, even if
        # it appeared after the check. follow_symlinks=False links a link.
        with _no_overwrite(here):
            os.link(name, name, src_dir_fd=src.fd, dst_dir_fd=dst.fd, follow_symlinks=False)
        os.unlink(name, dir_fd=src.fd)
        return st.st_size
    return 0


@contextmanager
def _no_overwrite(path: str) -> Iterator[None]:
    try:
        yield
    except FileExistsError as exc:
        raise RestoreConflict([path]) from exc
