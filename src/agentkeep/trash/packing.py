"""Compressing the trash: each entry's files and rows packed into one
archive (trash.archive), after the prune that renamed them in (packing
reads every byte, so never inside a prune's act), and unpacked again
before a restore or a prune writes into the entry.

A kill is survived: the archive is written under a temporary name without
a lease, fsynced and read back whole; then, under the session's leases and
only if entry.json was not written meanwhile (every writer of an entry
writes it first), it is renamed into place and entry.json names it: the one
commit point. Only then are roots/ and rows.sqlite removed, so what is left
beside a committed archive is only ever a copy of what it holds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import structlog

from agentkeep.errors import RemovalError
from agentkeep.leases import LeaseError, take_session
from agentkeep.trash import archive, unpack
from agentkeep.trash.entries import (
    ASIDE,
    ENTRY,
    ROOTS,
    ROWS,
    Packing,
    TrashEntry,
    TrashError,
    entry_dirs,
    read_entry,
)

log = structlog.get_logger("agentkeep.trash")

ARCHIVE = "entry.tar.zst"
# Written before it is complete: '~' names are no reader's (entries.ASIDE).
_PACKING = f"{ASIDE}packing"
_UNPACKING = f"{ASIDE}unpacking"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# Test seam, None in production: called with the step's name at each step
# of packing and unpacking, so a test can kill the process there.
_at_step: Callable[[str], None] | None = None


@dataclass
class Compressed:
    """What one compression run did, entry by entry."""

    packed: list[TrashEntry]
    waiting: int = 0


def waiting(state_dir: Path) -> list[Path]:
    """Entries that hold files or rows beside (or instead of) an archive
    (two lstats each, no entry.json read)."""
    return [path for path in entry_dirs(state_dir) if _unpacked_left(path)]


def _unpacked_left(path: Path) -> bool:
    return os.path.lexists(path / ROOTS) or os.path.lexists(path / ROWS)


def compress(
    paths: Iterable[Path], state_dir: Path, stop: Callable[[], bool] = lambda: False
) -> Compressed:
    """Pack each entry of `paths` that waits, one after the other, until
    `stop` says so; an entry held, changed meanwhile or that cannot be
    packed stays as it was."""
    done = Compressed([])
    for path in paths:
        if stop():
            done.waiting += 1
            continue
        try:
            entry = _pack_entry(state_dir, path)
        except (OSError, TrashError, archive.BadArchive) as exc:
            log.warning("trash entry not compressed", path=str(path), error=str(exc))
            entry = None
        if entry is not None:
            done.packed.append(entry)
        elif _unpacked_left(path):
            done.waiting += 1
    return done


def _step(name: str) -> None:
    if _at_step is not None:
        _at_step(name)


def _ident(path: Path) -> tuple[int, int] | None:
    """entry.json's inode and mtime: every write of it changes them."""
    try:
        st = os.lstat(path / ENTRY)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def _pack_entry(state_dir: Path, path: Path) -> TrashEntry | None:
    """Pack the entry at `path` (see the module): the entry, or None when it
    is not packed (gone, held, written meanwhile, nothing to pack, or
    holding what cannot be packed: then marked so)."""
    ident = _ident(path)
    entry = read_entry(path) if ident is not None else None
    if entry is None or entry.unpackable is not None:
        return None
    if entry.packed is not None:
        _under_lease(state_dir, entry, ident, lambda: _let_go(path, keep=entry.packed))
        return None
    with _open_dir(path) as fd:
        names = [n for n in sorted(os.listdir(fd)) if n not in (ENTRY, ARCHIVE) and n[0] != ASIDE]
        if not names:
            return None
        tmp = f"{_PACKING}.{os.getpid()}.{time.time_ns()}"
        try:
            size, packed = _write_archive(fd, names, tmp)
        except archive.Unpackable as exc:
            unpack.unlink_at(tmp, fd)
            entry.unpackable = str(exc)
            log.info("trash entry stays uncompressed", path=str(path), why=str(exc))
            _under_lease(state_dir, entry, ident, entry.save)
            return None
        except BaseException:
            unpack.unlink_at(tmp, fd)
            raise

        def commit() -> None:
            os.rename(tmp, ARCHIVE, src_dir_fd=fd, dst_dir_fd=fd)
            os.fsync(fd)
            _step("renamed")
            entry.packed = Packing(ARCHIVE, size, packed.original)
            entry.save()  # the commit point
            _step("committed")
            _let_go(path, keep=entry.packed)

        if not _under_lease(state_dir, entry, ident, commit):
            unpack.unlink_at(tmp, fd)
            return None
    log.info("trash entry compressed", path=str(path), bytes=packed.original, packed=size)
    return entry


def _write_archive(fd: int, names: list[str], tmp: str) -> tuple[int, archive.Packed]:
    """The archive written under `tmp`, durable, and read back whole: its
    size and what it holds. Raises Unpackable, BadArchive or OSError."""
    out_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=fd)
    with os.fdopen(out_fd, "wb") as out:
        packed = archive.pack(fd, names, out, lambda: _step("packed a member"))
        _step("written")
        out.flush()
        os.fsync(out.fileno())
        size = out.tell()
    _step("synced")
    with _open_file(tmp, fd) as back:
        found = archive.read_back(back)
    if found != packed.tar_bytes:
        raise archive.BadArchive(f"{tmp}: {found} bytes read back of {packed.tar_bytes}")
    return size, packed


def _under_lease(
    state_dir: Path, entry: TrashEntry, ident: tuple[int, int] | None, act: Callable[[], None]
) -> bool:
    """Run `act` holding the session's leases, if entry.json is still the
    one read (`ident`); False when it was not run."""
    try:
        taken = take_session(state_dir, entry.agent, entry.id)
    except LeaseError as exc:
        log.info("trash entry not compressed: lease error", id=entry.id, error=str(exc))
        return False
    if isinstance(taken, str):
        log.info("trash entry not compressed: held", agent=entry.agent, id=entry.id)
        return False
    try:
        if _ident(entry.path) != ident:
            log.info("trash entry changed while compressed", path=str(entry.path))
            return False
        act()
        return True
    finally:
        # leases/ keeps no file per removed session: the last step.
        taken.discard()


def _let_go(path: Path, keep: Packing | None) -> None:
    """Remove everything of the entry but entry.json and its archive (`keep`):
    a copy of what a committed archive holds, or what a kill left. What
    cannot be removed is logged and tried again next time."""
    for name in sorted(os.listdir(path)):
        if name == ENTRY or (keep is not None and name == keep.name):
            continue
        try:
            remove_tree(path, name)
            _step("let go")
        except TrashError as exc:
            log.warning("trash entry keeps a copy beside its archive", error=str(exc))


def unpacked(entry: TrashEntry) -> TrashEntry:
    """The entry as a prune wrote it: its archive unpacked back into its
    directory, entry.json written without it, then the archive removed.
    Call it holding the session's leases. Raises TrashError, or OSError."""
    if entry.packed is None:
        return entry
    with _open_dir(entry.path) as fd:
        remove_tree(entry.path, _UNPACKING)
        os.mkdir(_UNPACKING, 0o700, dir_fd=fd)
        try:
            with _open_file(entry.packed.name, fd) as f, _open_dir(entry.path / _UNPACKING) as tmp:
                unpack.unpack(f, fd, tmp, lambda: _step("unpacking a member"))
        except FileNotFoundError as exc:
            raise TrashError(f"{entry.path / entry.packed.name} is missing") from exc
        except archive.BadArchive as exc:
            raise TrashError(f"{entry.path / entry.packed.name}: {exc}") from exc
        _step("unpacked")
        # Every file unpacked is on the disk before the archive that also
        # holds it is let go.
        os.sync()
        name, entry.packed = entry.packed.name, None
        entry.save()
        _step("uncommitted")
        unpack.unlink_at(name, fd)
        os.rmdir(_UNPACKING, dir_fd=fd)
    return entry


@contextmanager
def _open_dir(path: Path) -> Iterator[int]:
    fd = os.open(path, _DIR)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def _open_file(name: str, dir_fd: int) -> Iterator[BinaryIO]:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        yield f


def remove_tree(path: Path, name: str) -> None:
    """Remove `path/name` link-safely, if it is there. Raises TrashError."""
    # Imported here: reading the trash removes nothing.
    from agentkeep.rmtree import remove_tree_at

    if not os.path.lexists(path / name):
        return
    try:
        residual = remove_tree_at(path, name)
    except RemovalError as exc:
        raise TrashError(f"{path / name} not removed: {exc}") from exc
    if residual:
        raise TrashError(f"{path / name} not removed: {', '.join(residual)}")
