"""Measuring the disk without changing it: artifact sizes and times.

Every read here uses lstat and never follows a link below the path it was
given, so a scan cannot be led out of an agent's root; every directory is
opened O_NOATIME (invariant 10). Reading a file's data and listing a
directory are fsio's; whether a root is safe to use, rootsafety's.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import time
from collections.abc import Iterable
from typing import NamedTuple

from agentkeep.fsio import LIST_FLAGS, open_noatime, scandir
from agentkeep.model import Artifact


class Tree(NamedTuple):
    """What a walk of one path found: bytes (st_size of every file), the
    newest mtime, whether every entry could be read, and disk_bytes (as `du`
    counts: st_blocks * 512 of every entry), each inode counted once. A
    tuple: one is made per artifact scanned, at half a dataclass's cost."""

    bytes: int
    mtime: float | None
    complete: bool
    is_dir: bool
    disk_bytes: int = 0


def measure(path: str | os.PathLike[str], seen: set[tuple[int, int]] | None = None) -> Tree | None:
    """Measure `path`, a link as the link itself (nothing is followed);
    None when it does not exist. The newest mtime counts directories too;
    `seen` collects (dev, ino) of multiply-linked files, counted once."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return Tree(0, None, False, False)
    if seen is None:
        seen = set()
    if not stat.S_ISDIR(st.st_mode):
        if st.st_nlink > 1 and _seen_before(st, seen):
            return Tree(0, st.st_mtime, True, False)
        return Tree(st.st_size, st.st_mtime, True, False, st.st_blocks * 512)
    before = set(seen)
    tree = _measure_by_path(os.fspath(path), st, seen)
    if tree is None:  # deeper than PATH_MAX: walk by descriptors instead
        seen.clear()
        seen.update(before)
        tree = _measure_by_fd(os.fspath(path), st, seen)
    return tree


def newest_file_mtime(path: str | os.PathLike[str]) -> float | None:
    """The newest mtime of anything at or below `path` but directories (a
    write moves one; removing entries, as an interrupted removal of ours
    did, moves only directories'). -inf when there are only directories;
    None when it cannot all be read (it never lets a session look idle)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return -math.inf
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return st.st_mtime
    newest = -math.inf
    stack = [os.fspath(path)]
    while stack:
        current = stack.pop()
        try:
            with scandir(current) as entries:
                for entry in entries:
                    est = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(est.st_mode):
                        stack.append(f"{current}/{entry.name}")
                    else:
                        newest = max(newest, est.st_mtime)
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return newest


def _measure_by_path(path: str, st: os.stat_result, seen: set[Ident]) -> Tree | None:
    """The fast walk, by path; None when a path grows too long to use. A
    scan's hottest loop: each directory is listed inline, not through
    scandir()'s context manager (a fifth of the walk)."""
    total, blocks, newest, complete = 0, st.st_blocks, st.st_mtime, True
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            fd = open_noatime(current, LIST_FLAGS)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                return None
            complete = False
            continue
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    except OSError:
                        complete = False
                        continue
                    if est.st_mtime > newest:
                        newest = est.st_mtime
                    if stat.S_ISDIR(est.st_mode):
                        stack.append(current + "/" + entry.name)
                        blocks += est.st_blocks
                    elif est.st_nlink == 1 or not _seen_before(est, seen):
                        total += est.st_size
                        blocks += est.st_blocks
        except OSError:
            complete = False
        finally:
            os.close(fd)
    return Tree(total, newest, complete, True, blocks * 512)


def _measure_by_fd(path: str, st: os.stat_result, seen: set[Ident]) -> Tree:
    """The same walk relative to one directory descriptor at a time (a
    DirCursor), for trees deeper than a path can name."""
    total, blocks, newest, complete = 0, st.st_blocks, st.st_mtime, True
    try:
        cursor = DirCursor.open(path)
    except OSError:
        return Tree(0, None, False, True)
    with cursor:
        levels: list[list[tuple[str, Ident]]] = [[]]
        entries = _entries_at(cursor.fd)
        while True:
            if entries is None:
                complete = False
            for name, est in entries or []:
                newest = max(newest, est.st_mtime)
                if stat.S_ISDIR(est.st_mode):
                    levels[-1].append((name, ident_of(est)))
                    blocks += est.st_blocks
                elif est.st_nlink == 1 or not _seen_before(est, seen):
                    total += est.st_size
                    blocks += est.st_blocks
            while levels and not levels[-1]:
                levels.pop()
                if levels:
                    try:
                        cursor.up()
                    except OSError:
                        return Tree(total, newest, False, True, blocks * 512)
            if not levels:
                break
            name, ident = levels[-1].pop()
            try:
                cursor.down(name, ident)
            except OSError:
                complete, entries = False, []
                continue
            levels.append([])
            entries = _entries_at(cursor.fd)
    return Tree(total, newest, complete, True, blocks * 512)


def _entries_at(fd: int) -> list[tuple[str, os.stat_result]] | None:
    """(name, lstat) of every entry of the directory open at `fd`; None when
    it cannot be listed."""
    found: list[tuple[str, os.stat_result]] = []
    try:
        names = os.listdir(fd)
    except OSError:
        return None
    for name in names:
        try:
            found.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return found


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Ident = tuple[int, int]


def ident_of(st: os.stat_result) -> Ident:
    """What tells one inode from every other: (device, inode)."""
    return (st.st_dev, st.st_ino)


class TreeChanged(OSError):
    """A directory is not the one seen a moment ago: something moved it."""


class DirCursor:
    """A position in a directory tree held by one descriptor, opened
    O_NOATIME. Going down opens one component with O_NOFOLLOW and checks it
    is the directory lstat saw; going up opens ".." and checks it is the one
    we came from. Only the current level is open, so depth costs no
    descriptors, and the walk is never led through a link."""

    def __init__(self, fd: int, base: str) -> None:
        self.fd = fd
        self.base = base
        self.names: list[str] = []
        self._idents: list[Ident] = [ident_of(os.fstat(fd))]

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> DirCursor:
        """Start at `path`, which may itself be a link (a root like /tmp on
        macOS is one); below it nothing is followed."""
        fd = open_noatime(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return cls(fd, os.fspath(path))
        except BaseException:
            os.close(fd)
            raise

    @property
    def ident(self) -> Ident:
        """The current directory's ident_of()."""
        return self._idents[-1]

    def path(self, name: str | None = None) -> str:
        """The current directory's path, or its entry `name`'s."""
        # "/".join, not os.path.join: this runs per entry in trees 10,000 deep.
        parts = [self.base.rstrip("/"), *self.names]
        if name is not None:
            parts.append(name)
        return "/".join(parts) if len(parts) > 1 else self.base

    def down(self, name: str, expect: Ident | None = None) -> os.stat_result:
        """Into the directory `name` (TreeChanged when it is not `expect`)."""
        fd = open_noatime(name, _DIR_FLAGS, dir_fd=self.fd)
        st = os.fstat(fd)
        if expect is not None and ident_of(st) != expect:
            os.close(fd)
            raise TreeChanged(errno.ESTALE, "replaced while being walked", self.path(name))
        os.close(self.fd)
        self.fd = fd
        self.names.append(name)
        self._idents.append(ident_of(st))
        return st

    def up(self) -> None:
        """Into the parent (TreeChanged when it is not the one we came from)."""
        fd = open_noatime("..", _DIR_FLAGS, dir_fd=self.fd)
        if ident_of(os.fstat(fd)) != self._idents[-2]:
            os.close(fd)
            raise TreeChanged(errno.ESTALE, "moved while being walked", self.path())
        os.close(self.fd)
        self.fd = fd
        self.names.pop()
        self._idents.pop()

    def close(self) -> None:
        """Close the descriptor held."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> DirCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def exists_at(name: str, dir_fd: int) -> bool:
    """Whether `name` is in the directory open at `dir_fd` (a link counts:
    it is never followed)."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _size(st: os.stat_result, seen: set[tuple[int, int]]) -> int:
    if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode) and _seen_before(st, seen):
        return 0
    return st.st_size


def _seen_before(st: os.stat_result, seen: set[tuple[int, int]]) -> bool:
    """Whether this inode (of a file with several links) was counted
    already; it is counted from now on, in both sizes."""
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return True
    seen.add(key)
    return False


def artifact(
    path: str | os.PathLike[str],
    kind: str,
    root: str | os.PathLike[str] | None,
    *,
    primary: bool = False,
    linked: bool = False,
    seen: set[tuple[int, int]] | None = None,
    foreign: bool = False,
) -> Artifact | None:
    """Measure `path` into an Artifact; None when it does not exist. A tree
    not read completely gets mtime None: the session is undated, never idle."""
    tree = measure(path, seen)
    if tree is None:
        return None
    return Artifact(
        path=os.fspath(path),
        kind=kind,
        bytes=tree.bytes,
        mtime=tree.mtime if tree.complete else None,
        root=os.fspath(root) if root is not None else None,
        primary=primary,
        linked=linked,
        is_dir=tree.is_dir,
        foreign=foreign,
        disk_bytes=tree.disk_bytes,
    )


def is_link(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a symbolic link (False when it cannot be looked up)."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


# A directory's mtime comes from a coarse clock (FAT: 2 s steps): one read
# this soon after a change may change again and keep it, so cannot vouch.
RACY_NS = 2_000_000_000


def signed(
    dirs: Iterable[str | os.PathLike[str]],
) -> tuple[dict[str, int | None], dict[str, int | None]]:
    """dir_mtimes(dirs), and the signature to keep: None for an mtime too
    recent to vouch (RACY_NS), which no later mtime equals, so that
    directory is looked at again next time."""
    read_at = time.time_ns()
    mtimes = dir_mtimes(dirs)
    racy = read_at - RACY_NS
    return mtimes, {d: None if m is not None and m >= racy else m for d, m in mtimes.items()}


def dir_mtimes(dirs: Iterable[str | os.PathLike[str]]) -> dict[str, int | None]:
    """Each directory's mtime in ns (None when it cannot be read): an entry
    made or removed changes it."""
    sigs: dict[str, int | None] = {}
    for d in (os.fspath(p) for p in dirs):
        try:
            sigs[d] = os.stat(d).st_mtime_ns
        except OSError:
            sigs[d] = None
    return sigs
