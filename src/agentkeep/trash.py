"""The trash: pruned sessions wait here, restorable, until they expire.

An entry is `<state>/trash/<agent>/<encoded id>/` holding `entry.json` and
`roots/<n>/<path relative to root n>`: what was on the state dir's file
system is renamed in (nothing copied), the rest is removed at once and the
entry is marked partial. Restore never overwrites: it checks every
destination first, then moves files back by link-then-unlink and recreates
directories by mkdir, each of which fails rather than replace what appeared
meanwhile. Restore and expiry take the session's lease exclusively, so they
never act on a session someone holds, nor race a prune of it.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog

from agentkeep import disk
from agentkeep.adapters import sqlite
from agentkeep.adapters.base import valid_name
from agentkeep.adapters.sqlite import TableRows
from agentkeep.disk import DirCursor
from agentkeep.errors import RemovalError
from agentkeep.leases import LeaseError, Taken, encode_id, hold_exclusive, take_session
from agentkeep.paths import ensure_private_dir
from agentkeep.processes import ProcessTable
from agentkeep.statefiles import write_json

log = structlog.get_logger("agentkeep.trash")

_ENTRY = "entry.json"
_ROOTS = "roots"
# The database rows removed with the session: one table per (database,
# table) they came from, named in `tables`, with the columns they had.
_ROWS = "rows.sqlite"
_RESTORED = "restored.json"
# Entries being discarded are renamed to "~...": '~' never occurs in an
# encoded id, so such a name is never an entry, and a discard that stopped
# half way is finished by the next expire.
_ASIDE = "~"


class TrashError(Exception):
    """The trash's own state cannot be read or written."""


class RestoreConflict(TrashError):
    """Restoring would overwrite something; nothing (more) was moved."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__("would overwrite: " + ", ".join(paths))
        self.paths = paths


class RestoreRefused(TrashError):
    """The session's lease is held (or cannot be checked): it is in use."""


class NoSuchEntry(TrashError):
    """No trash entry for this session."""


@dataclass(frozen=True)
class TrashItem:
    root: int
    rel: str


@dataclass
class TrashEntry:
    agent: str
    id: str
    parent: str | None
    trashed_at: float
    expires_at: float
    bytes: int
    partial: bool
    roots: dict[int, str]
    items: list[TrashItem]
    last_activity: float | None
    path: Path
    # "<root n>/<rel>" -> (atime_ns, mtime_ns) of each directory on the way to
    # what was moved in, as it was before the first move changed it: restore
    # gives the directories it makes again their own times back.
    dir_times: dict[str, tuple[int, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "id": self.id,
            "parent": self.parent,
            "trashed_at": self.trashed_at,
            "expires_at": self.expires_at,
            "bytes": self.bytes,
            "partial": self.partial,
            "roots": {str(n): root for n, root in self.roots.items()},
            "items": [{"root": i.root, "rel": i.rel} for i in self.items],
            "last_activity": self.last_activity,
            "dir_times": {rel: list(times) for rel, times in self.dir_times.items()},
        }

    @classmethod
    def from_json(cls, data: Any, path: Path) -> TrashEntry:
        """Raises ValueError (or TypeError, KeyError) for anything malformed."""
        roots = {int(n): _text(root) for n, root in dict(data["roots"]).items()}
        if any(n < 0 or not os.path.isabs(root) for n, root in roots.items()):
            raise ValueError("roots must be absolute paths")
        items = [TrashItem(int(i["root"]), _text(i["rel"])) for i in data["items"]]
        if any(i.root not in roots for i in items):
            raise ValueError("an item names an unknown root")
        parent = data.get("parent")
        last = data.get("last_activity")
        dir_times = {
            _text(rel): (_whole(times[0]), _whole(times[1]))
            for rel, times in dict(data.get("dir_times", {})).items()
        }
        return cls(
            agent=_text(data["agent"]),
            id=_text(data["id"]),
            parent=None if parent is None else _text(parent),
            trashed_at=_number(data["trashed_at"]),
            expires_at=_number(data["expires_at"]),
            bytes=int(data["bytes"]),
            partial=bool(data["partial"]),
            roots=roots,
            items=items,
            last_activity=None if last is None else _number(last),
            path=path,
            dir_times=dir_times,
        )


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


@dataclass
class RestoreResult:
    """The entries put back (the session first, then its ancestors) and the
    bytes moved."""

    entries: list[TrashEntry]
    bytes: int = 0
    paths: list[str] = field(default_factory=list)


def trash_dir(state_dir: Path) -> Path:
    return state_dir / "trash"


def entry_dir(state_dir: Path, agent: str, session_id: str) -> Path:
    if not valid_name(agent):
        raise ValueError(f"invalid agent name {agent!r}")
    return trash_dir(state_dir) / agent / encode_id(session_id)


def _read_entry(path: Path) -> TrashEntry | None:
    """The entry in directory `path`; None (logged) when it is missing,
    unreadable, malformed or does not match the directory it lies in."""
    try:
        entry = TrashEntry.from_json(json.loads(disk.read_regular(path / _ENTRY)), path)
    except FileNotFoundError:
        log.warning("trash entry without entry.json skipped", path=str(path))
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("trash entry unreadable, skipped", path=str(path), error=str(exc))
        return None
    if entry.agent != path.parent.name or encode_id(entry.id) != path.name:
        log.warning("trash entry does not match its directory, skipped", path=str(path))
        return None
    return entry


class TrashWriter:
    """One entry being written by a prune. entry.json is rewritten (atomically)
    before anything is moved under a root it did not name yet or into a
    directory it made, and when it is closed. Restore moves back each
    root's whole tree, with the times of the directories it makes again:
    so a prune that stops half way leaves an entry that restore understands
    and that puts back everything moved. Only the items and bytes (what
    `trash` lists) of the moves after the last write are missing from it.
    A write after every move was two thirds of a prune's time into the
    trash."""

    def __init__(self, entry: TrashEntry) -> None:
        self.entry = entry
        self.path = entry.path
        # A root named since the last write (written before its first move).
        self._new_root = False
        # The roots/<n> directories made and checked by this writer.
        self._ready: set[int] = set()

    def _save(self) -> None:
        write_json(self.path / _ENTRY, self.entry.to_json())
        self._new_root = False

    def root_number(self, root: str) -> int:
        """The number of `root` in the entry; a new one is written by the
        destination() that comes before anything is moved under it."""
        for n, known in self.entry.roots.items():
            if known == root:
                return n
        n = max(self.entry.roots, default=-1) + 1
        self.entry.roots[n] = root
        self._new_root = True
        return n

    def destination(self, n: int, chain: list[tuple[str, os.stat_result]]) -> int:
        """A descriptor of `roots/<n>/<chain...>`, creating the directories
        (with the modes of the ones they stand for, and always writable by
        us, and their times recorded for restore); the caller closes it.
        The entry is written before it returns when it names a new root or
        made a directory: nothing is moved where it does not say."""
        if n not in self._ready:
            ensure_private_dir(ensure_private_dir(self.path / _ROOTS) / str(n))
            self._ready.add(n)
        cursor = DirCursor.open(self.path / _ROOTS / str(n))
        made = False
        try:
            rel = str(n)
            for name, st in chain:
                rel = f"{rel}/{name}"
                try:
                    os.mkdir(name, 0o700, dir_fd=cursor.fd)
                    created = True
                except FileExistsError:
                    created = False
                cursor.down(name)
                if created:
                    os.fchmod(cursor.fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
                    self.entry.dir_times.setdefault(rel, (st.st_atime_ns, st.st_mtime_ns))
                    made = True
            if made or self._new_root:
                self._save()
        except BaseException:
            cursor.close()
            raise
        fd, cursor.fd = cursor.fd, -1
        return fd

    def moved(self, n: int, rel: str, nbytes: int) -> None:
        """Counted in the entry, written with the next write (see the class)."""
        self.entry.items.append(TrashItem(n, rel))
        self.entry.bytes += nbytes

    def add_rows(self, rows: TableRows) -> None:
        """Keep `rows` (removed with the session) in the entry, durably,
        before they are deleted. Raises sqlite3.Error or OSError."""
        conn = sqlite3.connect(self.path / _ROWS, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS tables (n INTEGER PRIMARY KEY,"
                " db TEXT NOT NULL, name TEXT NOT NULL, columns TEXT NOT NULL)"
            )
            cols = json.dumps(list(rows.columns))
            found = conn.execute(
                "SELECT n FROM tables WHERE db = ? AND name = ? AND columns = ?",
                (rows.db, rows.table, cols),
            ).fetchone()
            if found is None:
                n = conn.execute(
                    "INSERT INTO tables (db, name, columns) VALUES (?, ?, ?)",
                    (rows.db, rows.table, cols),
                ).lastrowid
                names = ", ".join(f"c{i}" for i in range(len(rows.columns)))
                conn.execute(f"CREATE TABLE t{n} ({names})")
            else:
                n = found[0]
            marks = ", ".join("?" for _ in rows.columns)
            conn.executemany(f"INSERT INTO t{n} VALUES ({marks})", rows.rows)
            conn.execute("COMMIT")
        finally:
            conn.close()
        os.chmod(self.path / _ROWS, 0o600)

    def mark_partial(self, what: str) -> None:
        if not self.entry.partial:
            log.info("trash entry partial", agent=self.entry.agent, id=self.entry.id, what=what)
            self.entry.partial = True
            self._save()

    def close(self) -> None:
        self._save()

    def __enter__(self) -> TrashWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_entry(
    state_dir: Path,
    agent: str,
    session_id: str,
    *,
    parent: str | None,
    keep_for: float,
    now: float,
    last_activity: float | None = None,
) -> TrashWriter:
    """Start (or continue: a journal's retry, a session trashed again) the
    entry of one session, kept for `keep_for` seconds from `now`. Call it
    under the session's exclusive lease, like the removal it serves. Raises
    TrashError when an existing entry cannot be read (it is never replaced
    blindly), OSError when the entry cannot be written."""
    path = entry_dir(state_dir, agent, session_id)
    for directory in (state_dir, trash_dir(state_dir), path.parent, path):
        ensure_private_dir(directory)
    if os.path.lexists(path / _ENTRY):
        entry = _read_entry(path)
        if entry is None:
            raise TrashError(f"{path / _ENTRY} cannot be read; move it away to trash this session")
        entry.parent = parent if parent is not None else entry.parent
    else:
        entry = TrashEntry(agent, session_id, parent, now, now, 0, False, {}, [], None, path)
    entry.trashed_at = now
    entry.expires_at = now + keep_for
    entry.last_activity = last_activity if last_activity is not None else entry.last_activity
    writer = TrashWriter(entry)
    writer._save()
    return writer


def _agent_dirs(state_dir: Path) -> list[Path]:
    try:
        children = sorted(trash_dir(state_dir).iterdir())
    except FileNotFoundError:
        return []
    return [p for p in children if valid_name(p.name) and p.is_dir() and not p.is_symlink()]


def _entry_dirs(state_dir: Path) -> Iterator[Path]:
    for agent_dir in _agent_dirs(state_dir):
        for path in sorted(agent_dir.iterdir()):
            if not path.name.startswith(_ASIDE) and path.is_dir() and not path.is_symlink():
                yield path


def list_entries(state_dir: Path) -> list[TrashEntry]:
    """Every readable entry, oldest first; unreadable ones are logged and skipped."""
    entries = [e for e in map(_read_entry, _entry_dirs(state_dir)) if e is not None]
    return sorted(entries, key=lambda e: (e.trashed_at, e.agent, e.id))


def _discard(path: Path) -> None:
    """Remove an entry directory: renamed aside first, so it stops being an
    entry at once, then removed link-safely; leftovers go next expire."""
    aside = f"{_ASIDE}{path.name}~{os.getpid()}~{time.time_ns()}"
    os.rename(path, path.parent / aside)
    _remove_aside(path.parent, aside)


def _remove_aside(agent_dir: Path, name: str) -> None:
    # Imported here: a scan reads the trash's restore times, and only
    # expiry, emptying and restore remove.
    from agentkeep.rmtree import remove_tree_at

    try:
        residual = remove_tree_at(agent_dir, name)
    except RemovalError as exc:
        log.warning("trash entry not fully removed", path=str(agent_dir / name), error=str(exc))
        return
    if residual:
        log.warning("trash entry left residue", path=str(agent_dir / name), residual=residual)


class Expiry:
    """The trash's expiry: run() removes every entry whose time is up, each
    under its session's lease held exclusively (a held session's entry
    waits for the next run). Run again and again (by each prune, by the
    daemon hourly), a run that can find nothing due reads no entry: reading
    each entry of a trash of 3,000 sessions cost 0.7 CPU-s, so a trash of
    50,000 cost the daemon some 0.2 CPU-s a minute while nothing happened.
    It keeps the soonest expiry of the entries it last read, and the mtimes
    of the trash's directories before it read them: an entry added or
    removed moves its agent directory's mtime. An entry written again in
    place (a session trashed again before its entry expired) only moves its
    expiry later, unless the trash was set shorter meanwhile: it then waits
    at most until the soonest expiry known."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._known: tuple[dict[str, int | None], float] | None = None

    def run(self, now: float) -> list[TrashEntry]:
        # Taken before the entries are read: a change meanwhile shows next
        # time, as does one in a directory signed None (disk.signed: its
        # mtime too recent to vouch that it will not change unseen).
        mtimes, signature = self._signature()
        if self._known is not None and self._known[0] == mtimes and now < self._known[1]:
            return []
        entries = list_entries(self.state_dir)
        expired = _discard_due(self.state_dir, entries, lambda e: e.expires_at <= now, [])
        gone = {(e.agent, e.id) for e in expired}
        left = [e.expires_at for e in entries if (e.agent, e.id) not in gone]
        self._known = (signature, min(left, default=math.inf))
        return expired

    def _signature(self) -> tuple[dict[str, int | None], dict[str, int | None]]:
        return disk.signed([trash_dir(self.state_dir), *_agent_dirs(self.state_dir)])

    def known(self) -> list[Any] | None:
        """What the last read found, as JSON: for a prune in a process of
        its own to start from (daemon.child), and to hand back."""
        return None if self._known is None else [self._known[0], self._known[1]]

    def trust(self, known: list[Any] | None) -> None:
        """Start from `known` (from known(), here or in another process).
        Sound whatever its age: it is used only while the trash's mtimes
        are still the ones it was read with."""
        self._known = None if known is None else (dict(known[0]), float(known[1]))


def empty(state_dir: Path, *, trashed_before: float | None = None) -> Emptied:
    """Remove every entry now (`agentkeep trash --empty`), or those trashed
    before `trashed_before`, under the session's lease like expiry: an entry
    whose lease is held stays (in `held`)."""
    held: list[TrashEntry] = []
    due: Callable[[TrashEntry], bool] = (
        (lambda e: True) if trashed_before is None else (lambda e: e.trashed_at < trashed_before)
    )
    return Emptied(_discard_due(state_dir, list_entries(state_dir), due, held), held)


@dataclass
class Emptied:
    removed: list[TrashEntry]
    held: list[TrashEntry]


def _discard_due(
    state_dir: Path,
    entries: list[TrashEntry],
    due: Callable[[TrashEntry], bool],
    held: list[TrashEntry],
) -> list[TrashEntry]:
    """Remove each of `entries` that `due` says, under its session's lease;
    `held` collects those whose lease someone holds."""
    expired: list[TrashEntry] = []
    for entry in entries:
        if not due(entry):
            continue
        try:
            taken = take_session(state_dir, entry.agent, entry.id)
        except LeaseError:
            continue
        if isinstance(taken, str):
            log.info("trash entry held, kept", agent=entry.agent, id=entry.id)
            held.append(entry)
            continue
        try:
            # Read again under the lease: a restore may have taken it meanwhile.
            current = _read_entry(entry.path) if entry.path.is_dir() else None
            if current is None or not due(current):
                continue
            try:
                _discard(current.path)
            except OSError as exc:
                log.warning("trash entry cannot be removed", path=str(current.path), error=str(exc))
                continue
            taken.discard()  # the session is gone for good: its lease file too
            expired.append(current)
        finally:
            taken.release()
    for agent_dir in _agent_dirs(state_dir):
        for path in agent_dir.iterdir():
            if path.name.startswith(_ASIDE):
                _remove_aside(agent_dir, path.name)
    return expired


# -- restore -----------------------------------------------------------------


@dataclass
class _Level:
    name: str
    pending: list[str]
    # The destination cursor stands in this level's destination.
    dst: bool
    # The trash directory's stat when restore created its destination: its
    # mode and times are put back once everything is inside.
    created: os.stat_result | None = None


def _restore_tree(
    src_root: Path, dst_root: str, *, act: bool, times: dict[str, tuple[int, int]] | None = None
) -> tuple[list[str], int]:
    """Check (act=False) or move back (act=True) the tree `src_root` into
    `dst_root`. Returns the conflicting destinations and the bytes moved.
    `times` are the recorded times of directories below `dst_root` (by
    their path relative to it): a directory restore makes again gets them.

    The destination is walked like a removal (invariant 6): a link on the way
    is a conflict, never followed. Directories that exist are merged into;
    a destination file that exists in any form is a conflict.
    """
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
            _no_overwrite(here, lambda: os.mkdir(name, 0o700, dir_fd=dst.fd))
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
        _no_overwrite(
            here,
            lambda: os.link(
                name, name, src_dir_fd=src.fd, dst_dir_fd=dst.fd, follow_symlinks=False
            ),
        )
        os.unlink(name, dir_fd=src.fd)
        return st.st_size
    return 0


def _no_overwrite(path: str, step: Any) -> None:
    try:
        step()
    except FileExistsError as exc:
        raise RestoreConflict([path]) from exc


def _chain(state_dir: Path, agent: str, session_id: str) -> list[TrashEntry]:
    """The session's entry, then each ancestor's still in the trash, each
    read from its own directory (reading the whole trash cost a restore
    0.2 ms an entry: seconds after a big prune)."""
    entry = _entry_of(state_dir, agent, session_id)
    if entry is None:
        raise NoSuchEntry(f"no {agent} session {session_id} in the trash")
    chain = [entry]
    seen = {entry.id}
    while entry.parent is not None and entry.parent not in seen:
        parent = _entry_of(state_dir, agent, entry.parent)
        if parent is None:
            break
        entry = parent
        seen.add(entry.id)
        chain.append(entry)
    return chain


def _entry_of(state_dir: Path, agent: str, session_id: str) -> TrashEntry | None:
    path = entry_dir(state_dir, agent, session_id)
    if not path.is_dir() or path.is_symlink():
        return None
    return _read_entry(path)


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
    """Put a session, and its ancestors still in the trash, back where they
    were, files and database rows. Everything is checked first, and nothing
    moves unless all of it can: RestoreConflict when anything would be
    overwritten (a file, a row with the same key that differs), RestoreRefused
    when a lease is held, a destination root is not safe to write into (it is
    not the user's, others can write to it, a link on the way is not theirs)
    or a database is in use; NoSuchEntry when the session is not in the trash."""
    chain = _chain(state_dir, agent, session_id)
    leases = _lease_all(state_dir, chain)
    try:
        # Read again under the leases: an expire may have removed one meanwhile.
        current = [e for e in (_read_entry(e.path) for e in chain if e.path.is_dir()) if e]
        if not current or current[0].id != session_id:
            raise NoSuchEntry(f"no {agent} session {session_id} in the trash")
        rows = {id(e): saved_rows(e) for e in current}
        _check(current, rows)
        # Recorded before anything moves: a restored session must never look
        # idle, even when the restore stops half way.
        _record_restored(state_dir, [(e.agent, e.id) for e in current], now)
        result = RestoreResult(entries=current)
        for entry in reversed(current):
            result.bytes += _put_back(entry, rows[id(entry)])
            result.paths += [os.path.join(entry.roots[i.root], i.rel) for i in entry.items]
            _discard(entry.path)
            log.info("restored from the trash", agent=entry.agent, id=entry.id)
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
            conflicts += _restore_tree(entry.path / _ROOTS / str(n), root, act=False)[0]
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
        moved += _restore_tree(entry.path / _ROOTS / str(n), root, act=True, times=times)[1]
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
    """Why files must not be put back under `root`: it is checked like an
    agent root (the user's, not writable by others, no link on the way that
    is not theirs); a root that is gone (a reboot emptied /tmp) is checked
    by the way to it, which restore then makes, 0700, as the user's."""
    uid = os.getuid()
    if os.path.lexists(root):
        return disk.root_problem(root, uid)
    parent = os.path.dirname(root)
    while parent != os.path.dirname(parent) and not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    return disk.way_problem(parent, uid)


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
    problem = disk.root_problem(root, os.getuid())
    if problem is not None:
        raise RestoreRefused(f"not restoring into an unsafe place: {problem}")


def saved_rows(entry: TrashEntry) -> dict[str, list[TableRows]]:
    """The rows the entry keeps, by database. Raises TrashError when they
    cannot be read (restore then moves nothing)."""
    path = entry.path / _ROWS
    if not os.path.lexists(path):
        return {}
    if not sqlite.is_database_file(path):
        raise TrashError(f"{path} is not a regular file")
    out: dict[str, list[TableRows]] = {}
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            listed = conn.execute("SELECT n, db, name, columns FROM tables ORDER BY n").fetchall()
            for n, db, name, cols in listed:
                values = tuple(tuple(r) for r in conn.execute(f"SELECT * FROM t{int(n)}"))
                columns = tuple(json.loads(cols))
                out.setdefault(db, []).append(TableRows(db, name, columns, values))
        finally:
            conn.close()
    except (sqlite3.Error, ValueError, TypeError) as exc:
        raise TrashError(f"{path} cannot be read: {exc}") from exc
    return out


def _read_restored(path: Path) -> dict[str, float]:
    try:
        data = json.loads(disk.read_regular(path))
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return {_text(key): _number(value) for key, value in data.items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.error("restore times unreadable", path=str(path), error=str(exc))
        raise TrashError(f"{path} cannot be read: {exc}") from exc


def _record_restored(state_dir: Path, keys: list[tuple[str, str]], now: float) -> None:
    path = state_dir / _RESTORED
    with hold_exclusive(state_dir / f"{_RESTORED}.lock"):
        times = _read_restored(path)
        times.update({f"{agent}/{session_id}": now for agent, session_id in keys})
        write_json(path, times)


def restored_at(state_dir: Path) -> dict[tuple[str, str], float]:
    """When each restored session was last restored (activity for its prune).

    Raises TrashError when the record cannot be read: the caller must not
    prune then, since a restored session would look idle (never guess in the
    direction of deleting).
    """
    times: dict[tuple[str, str], float] = {}
    for key, value in _read_restored(state_dir / _RESTORED).items():
        agent, sep, session_id = key.partition("/")
        if sep and session_id:
            times[(agent, session_id)] = value
    return times
