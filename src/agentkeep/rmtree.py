"""Link-safe removal of a path and everything below it, relative to a root.

Invariant 6: every path is opened relative to its root's descriptor, no
component between root and leaf may be a link (O_NOFOLLOW on each), and
what lies behind one is residual, never removed; a link at the leaf or in a
tree is unlinked as a link. No mount point is crossed, moved or emptied,
judged by mount id (mounts.py: a bind mount keeps st_dev); one is left,
residual, with its parents. Trees are walked by one descriptor, down by
name and up by "..", each step checked against the (st_dev, st_ino) seen
before, so a directory swapped mid-walk is never followed, at any depth.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agentkeep import mounts
from agentkeep.disk import DirCursor, Ident, TreeChanged, ident_of
from agentkeep.disk import _size as inode_size
from agentkeep.errors import RemovalError

# Test seams, None in production.
# Called with a path just before it is acted on (unlinked, descended into,
# moved), after it was looked at: a test can swap it for a link, or raise.
_before_leaf: Callable[[str], None] | None = None
# Given a path and the id of the mount it really lies on, returns the id to
# use instead: a test fakes a mount point where it cannot make one.
_mount_id_override: Callable[[str, int], int] | None = None

_OWNER_RWX = stat.S_IRWXU
# A directory opened where a link or file now stands.
_NOT_A_DIR = (errno.ELOOP, errno.ENOTDIR)


def _mount_of(cursor: DirCursor, name: str | None = None) -> int:
    """The mount `name` (not followed) in the cursor's directory lies on, or
    the directory's own when `name` is None."""
    if name is None:
        return _overridden(cursor.path(), mounts.mount_id(cursor.fd))
    found = mounts.mount_id(name, dir_fd=cursor.fd, follow_symlinks=False)
    return _overridden(cursor.path(name), found)


def mount_at(path: str) -> int:
    """The mount `path` lies on."""
    return _overridden(path, mounts.mount_id(path))


def _overridden(path: str, found: int) -> int:
    return found if _mount_id_override is None else _mount_id_override(path, found)


@dataclass
class _Level:
    subdirs: list[tuple[str, Ident]] = field(default_factory=list)
    # Something below stays (an error, a mount point): this directory
    # cannot be removed, nor any above it.
    keep: bool = False


@dataclass
class Walk:
    """Removes (or, in a dry run, counts) one leaf and everything below it."""

    root_mount: int
    dry_run: bool
    seen: set[tuple[int, int]]
    bytes: int = 0
    found: bool = False
    # Something was really removed (not in a dry run).
    acted: bool = False
    residuals: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self, cursor: DirCursor, leaf: str) -> bool:
        """Remove `leaf` in the cursor's directory; True when it is gone (or
        would be). The cursor ends where it started, or the walk is aborted
        with TreeChanged when the way back up is gone."""
        top = _Level()
        top.keep = not self._entry(cursor, leaf, top)
        levels = [top]
        while levels:
            level = levels[-1]
            if level.subdirs:
                name, ident = level.subdirs.pop()
                child = self._descend(cursor, name, ident, level)
                if child is not None:
                    levels.append(child)
                continue
            levels.pop()
            if not levels:
                break
            name = cursor.names[-1]
            cursor.up()
            if level.keep or not self._rmdir(cursor, name):
                levels[-1].keep = True
        return not top.keep

    def _entry(self, cursor: DirCursor, name: str, level: _Level) -> bool:
        """Act on one entry: unlink a non-directory, queue a directory. True
        when it is gone or queued."""
        try:
            st = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
        except FileNotFoundError:
            return True
        except OSError as exc:
            return self._fail(cursor.path(name), exc)
        self.found = True
        is_dir = stat.S_ISDIR(st.st_mode)
        try:
            if _before_leaf is not None:
                _before_leaf(cursor.path(name))
            # Invariant 6: a mount point (a bind mount of the same file system
            # too) is never descended into, unlinked or moved. Only a
            # directory, or what a dry run counts, needs a look at its mount:
            # the kernel refuses to unlink a mount point (EBUSY, below).
            if (is_dir or self.dry_run) and _mount_of(cursor, name) != self.root_mount:
                self.residuals.append(cursor.path(name))
                return False
            if is_dir:
                level.subdirs.append((name, ident_of(st)))
                return True
            if not self.dry_run and not self._unlink(cursor, name):
                return False
            self.bytes += inode_size(st, self.seen)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            return self._fail(cursor.path(name), exc)

    def _unlink(self, cursor: DirCursor, name: str) -> bool:
        """Unlink a non-directory (never following: a link goes alone, its
        target stays); False when it is a mount point, which stays."""
        try:
            os.unlink(name, dir_fd=cursor.fd)
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            # A file bind-mounted here (or one the system holds in use).
            self.residuals.append(cursor.path(name))
            return False
        self.acted = True
        return True

    def _descend(self, cursor: DirCursor, name: str, ident: Ident, level: _Level) -> _Level | None:
        try:
            st = cursor.down(name, ident)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if not isinstance(exc, TreeChanged) and exc.errno not in _NOT_A_DIR:
                level.keep |= not self._fail(cursor.path(name), exc)
                return None
            # Swapped since it was listed: take it as it is now, once. A link
            # is unlinked as a link; another directory is left for next run.
            again = _Level()
            gone = self._entry(cursor, name, again)
            if again.subdirs:
                gone = self._fail(cursor.path(name), exc)
            level.keep |= not gone
            return None
        try:
            mounted = _mount_of(cursor) != self.root_mount
        except OSError as exc:
            return _Level(keep=not self._fail(cursor.path(), exc))
        if mounted:
            # Mounted over between its listing and now (a directory bound
            # onto itself keeps its identity): left, like any mount point.
            self.residuals.append(cursor.path())
            cursor.up()
            level.keep = True
            return None
        child = _Level()
        try:
            self._writable(cursor, st)
            names = os.listdir(cursor.fd)
        except OSError as exc:
            child.keep = not self._fail(cursor.path(), exc)
            return child
        for entry in names:
            if not self._entry(cursor, entry, child):
                child.keep = True
        return child

    def _writable(self, cursor: DirCursor, st: os.stat_result) -> None:
        """A read-only directory of ours (a Go module cache) cannot be
        emptied until we may write it."""
        if not self.dry_run and st.st_mode & _OWNER_RWX != _OWNER_RWX and st.st_uid == os.geteuid():
            os.fchmod(cursor.fd, stat.S_IMODE(st.st_mode) | _OWNER_RWX)

    def _rmdir(self, cursor: DirCursor, name: str) -> bool:
        if self.dry_run:
            return True
        try:
            os.rmdir(name, dir_fd=cursor.fd)
            self.acted = True
        except FileNotFoundError:
            pass
        except OSError as exc:
            return self._fail(cursor.path(name), exc)
        return True

    def _fail(self, path: str, exc: OSError) -> bool:
        self.errors.append(f"{path}: {type(exc).__name__}: {exc.strerror or exc}")
        return False


@dataclass
class Parent:
    """Where a leaf lies: a cursor at its parent, checked link-free."""

    cursor: DirCursor
    root_mount: int
    # (name, stat) of each component between root and leaf, for the trash.
    chain: list[tuple[str, os.stat_result]]


def relative_parts(root: str, path: str) -> list[str]:
    """The components of `path` below `root`; RemovalError if it is not below."""
    prefix = root.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise RemovalError(f"{path} does not lie below its root {root}")
    parts = [p for p in path[len(prefix) :].split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise RemovalError(f"{path} is not a path below its root {root}")
    return parts


def open_parent(root: str, parts: list[str], residual: Callable[[], None]) -> Parent | None:
    """A cursor at the leaf's parent, or None when the leaf is gone already or
    lies behind a link or a mount point (then `residual` is called).
    Raises RemovalError when the way cannot be checked."""
    try:
        cursor = DirCursor.open(root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RemovalError(f"{root}: {type(exc).__name__}: {exc.strerror or exc}") from exc
    parent = None
    try:
        root_mount = _mount_of(cursor)
        chain: list[tuple[str, os.stat_result]] = []
        for name in parts[:-1]:
            try:
                st = cursor.down(name)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno not in _NOT_A_DIR:
                    raise
                residual()  # a link on the way: what lies behind it is not ours
                return None
            if _mount_of(cursor) != root_mount:
                residual()  # a mount point on the way: nothing below it is ours
                return None
            chain.append((name, st))
        parent = Parent(cursor, root_mount, chain)
        return parent
    except OSError as exc:
        raise RemovalError(f"{cursor.path()}: {type(exc).__name__}: {exc.strerror or exc}") from exc
    finally:
        if parent is None:
            cursor.close()


class Parents:
    """Cursors at the parents of leaves, kept open for a batch of removals
    (a prune's sessions share a few parents). A kept cursor is used again
    only while its path (lstat) still names the directory it holds: one
    moved or swapped since is opened, and checked, afresh (open_parent)."""

    # At most this many (a descriptor each), least recently used closed first.
    MAX = 32

    def __init__(self) -> None:
        self._open: dict[tuple[str, tuple[str, ...]], Parent] = {}

    def get(self, root: str, parts: list[str], residual: Callable[[], None]) -> Parent | None:
        """open_parent(root, parts, residual), or the cursor kept for it."""
        key = (root, tuple(parts[:-1]))
        kept = self._open.pop(key, None)
        if kept is not None:
            if _still_at(kept.cursor):
                self._open[key] = kept
                return kept
            kept.cursor.close()
        parent = open_parent(root, parts, residual)
        if parent is not None:
            if len(self._open) >= self.MAX:  # the least recently used goes
                self._open.pop(next(iter(self._open))).cursor.close()
            self._open[key] = parent
        return parent

    def put_back(self, root: str, parts: list[str], parent: Parent) -> None:
        """After a removal at `parent`: a cursor a walk could not bring back
        (the way up was gone) is closed, never used again."""
        if parent.cursor.fd >= 0 and parent.cursor.names == parts[:-1]:
            return
        self._open.pop((root, tuple(parts[:-1])), None)
        parent.cursor.close()

    def close(self) -> None:
        """Close every kept cursor."""
        for parent in self._open.values():
            parent.cursor.close()
        self._open.clear()


def _still_at(cursor: DirCursor) -> bool:
    """The cursor's path still names the directory it holds."""
    try:
        st = os.stat(cursor.path(), follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and ident_of(st) == cursor.ident


def raise_errors(errors: list[str]) -> None:
    """RemovalError naming the first three of `errors`, if any."""
    if errors:
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise RemovalError("; ".join(errors[:3]) + more)


def remove_tree_at(root: str | Path, relpath: str) -> list[str]:
    """Remove `root/relpath` link-safely (never following a link, never
    crossing a mount point); the residual paths left. Raises
    RemovalError after removing what could be removed."""
    root = os.fspath(root)
    parts = relative_parts(root, os.path.join(root, relpath))
    residuals: list[str] = []
    parent = open_parent(root, parts, lambda: residuals.append(os.path.join(root, relpath)))
    if parent is None:
        return residuals
    walk = Walk(parent.root_mount, dry_run=False, seen=set())
    with parent.cursor:
        try:
            walk.run(parent.cursor, parts[-1])
        except TreeChanged as exc:
            walk.errors.append(f"{exc.filename}: {exc.strerror}")
    raise_errors(walk.errors)
    return residuals + walk.residuals
