"""Link-safe removal of a session's artifacts, into the trash or at once.

Invariant 6: removal never follows a link. Every path is opened relative to
its root's directory descriptor; no component between root and leaf may be a
link (O_NOFOLLOW on each), and what lies behind one is reported residual,
never removed. A link at the leaf or inside a tree is unlinked as a link.
Nothing on another file system than the root's is touched. Trees are walked
iteratively by one descriptor that goes down by name and back up by "..",
each step checked against the (st_dev, st_ino) seen before, so a directory
swapped for a link or moved away mid-walk is never followed, and a tree of
any depth needs a handful of descriptors.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from agentkeep.adapters.base import RemovalError
from agentkeep.disk import DirCursor, Ident, TreeChanged, ident_of
from agentkeep.disk import _size as inode_size
from agentkeep.model import Artifact

if TYPE_CHECKING:
    from agentkeep.adapters.sqlite import TableRows
    from agentkeep.trash import TrashWriter

log = structlog.get_logger("agentkeep.removal")

# Test seams, None in production.
# Called with a path just before it is acted on (unlinked, descended into,
# moved), after it was looked at: a test can swap it for a link, or raise.
_before_leaf: Callable[[str], None] | None = None
# Returns the st_dev to use for a path's fs-crossing decisions (tests fake a
# mount); identity checks always use the real st_dev.
_st_dev_override: Callable[[str, os.stat_result], int] | None = None

_OWNER_RWX = stat.S_IRWXU
# A directory opened where a link or file now stands.
_NOT_A_DIR = (errno.ELOOP, errno.ENOTDIR)


def device(path: str, st: os.stat_result) -> int:
    """The file system `st` (of `path`) is on, as fs-crossing checks see it."""
    return _st_dev_override(path, st) if _st_dev_override is not None else st.st_dev


@dataclass
class _Level:
    subdirs: list[tuple[str, Ident]] = field(default_factory=list)
    # Something below stays (an error, another file system): this directory
    # cannot be removed, nor any above it.
    keep: bool = False


@dataclass
class _Walk:
    """Removes (or, in a dry run, counts) one leaf and everything below it."""

    root_dev: int
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
        try:
            if _before_leaf is not None:
                _before_leaf(cursor.path(name))
            if self._foreign(cursor, name, st):
                # Never cross into another file system (a mount inside).
                self.residuals.append(cursor.path(name))
                return False
            if stat.S_ISDIR(st.st_mode):
                level.subdirs.append((name, ident_of(st)))
                return True
            if not self.dry_run:
                # unlink never follows: a link goes alone, its target stays.
                os.unlink(name, dir_fd=cursor.fd)
                self.acted = True
            self.bytes += inode_size(st, self.seen)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            return self._fail(cursor.path(name), exc)

    def _foreign(self, cursor: DirCursor, name: str, st: os.stat_result) -> bool:
        if _st_dev_override is None:
            return st.st_dev != self.root_dev
        return device(cursor.path(name), st) != self.root_dev

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
class _Parent:
    """Where a leaf lies: a cursor at its parent, checked link-free."""

    cursor: DirCursor
    root_dev: int
    # (name, stat) of each component between root and leaf, for the trash.
    chain: list[tuple[str, os.stat_result]]


def _relative_parts(root: str, path: str) -> list[str]:
    prefix = root.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise RemovalError(f"{path} does not lie below its root {root}")
    parts = [p for p in path[len(prefix) :].split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise RemovalError(f"{path} is not a path below its root {root}")
    return parts


def _open_parent(root: str, parts: list[str], residual: Callable[[], None]) -> _Parent | None:
    """A cursor at the leaf's parent, or None when the leaf is gone already or
    lies behind a link or on another file system (then `residual` is called).
    Raises RemovalError when the way cannot be checked."""
    try:
        cursor = DirCursor.open(root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RemovalError(f"{root}: {type(exc).__name__}: {exc.strerror or exc}") from exc
    try:
        root_dev = device(root, os.fstat(cursor.fd))
        chain: list[tuple[str, os.stat_result]] = []
        for name in parts[:-1]:
            try:
                st = cursor.down(name)
            except FileNotFoundError:
                cursor.close()
                return None
            except OSError as exc:
                if exc.errno not in _NOT_A_DIR:
                    raise
                # A link on the way: what lies behind it is not ours to remove.
                residual()
                cursor.close()
                return None
            if device(cursor.path(), st) != root_dev:
                residual()
                cursor.close()
                return None
            chain.append((name, st))
        return _Parent(cursor, root_dev, chain)
    except OSError as exc:
        cursor.close()
        raise RemovalError(f"{cursor.path()}: {type(exc).__name__}: {exc.strerror or exc}") from exc


def _raise_errors(errors: list[str]) -> None:
    if errors:
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise RemovalError("; ".join(errors[:3]) + more)


def remove_tree_at(root: str | Path, relpath: str) -> list[str]:
    """Remove `root/relpath` link-safely (never following a link, never
    leaving root's file system); the residual paths left. Raises
    RemovalError after removing what could be removed."""
    root = os.fspath(root)
    parts = _relative_parts(root, os.path.join(root, relpath))
    residuals: list[str] = []
    parent = _open_parent(root, parts, lambda: residuals.append(os.path.join(root, relpath)))
    if parent is None:
        return residuals
    walk = _Walk(parent.root_dev, dry_run=False, seen=set())
    with parent.cursor:
        try:
            walk.run(parent.cursor, parts[-1])
        except TreeChanged as exc:
            walk.errors.append(f"{exc.filename}: {exc.strerror}")
    _raise_errors(walk.errors)
    return residuals + walk.residuals


class SessionRemoval:
    """The Remover (adapters.base) for one session: link-safe removal, the
    trash and dry runs. Collects what was removed, residuals and bytes."""

    def __init__(
        self,
        agent: str,
        session_id: str,
        *,
        dry_run: bool,
        trash: TrashWriter | None,
        same_fs_as: Path | None = None,
    ) -> None:
        """`same_fs_as`: artifacts on this path's file system are moved into
        the trash (default: the trash entry's own directory); the rest are
        removed at once and the entry is marked partial."""
        self.agent = agent
        self.session_id = session_id
        self.dry_run = dry_run
        self.trash = trash
        self.removed: list[str] = []
        self.residuals: list[str] = []
        self.bytes = 0
        self.partial = False
        self._seen: set[tuple[int, int]] = set()
        self._kept_rows: set[str] = set()
        self._trash_dev: int | None = None
        if trash is not None and not dry_run:
            where = os.fspath(same_fs_as if same_fs_as is not None else trash.path)
            self._trash_dev = device(where, os.stat(where))

    def remove_path(self, artifact: Artifact) -> None:
        if artifact.linked:
            self.residual(artifact.path)
            return
        if artifact.root is None:
            raise RemovalError(f"{artifact.path} has no root to remove it relative to")
        parts = _relative_parts(artifact.root, artifact.path)
        parent = _open_parent(artifact.root, parts, lambda: self.residual(artifact.path))
        if parent is None:
            return
        with parent.cursor:
            if self._trash_dev == parent.root_dev and self._move(artifact, parts, parent):
                return
            self._delete(artifact, parts, parent)

    def _delete(self, artifact: Artifact, parts: list[str], parent: _Parent) -> None:
        walk = _Walk(parent.root_dev, dry_run=self.dry_run, seen=self._seen)
        try:
            gone = walk.run(parent.cursor, parts[-1])
        except TreeChanged as exc:
            gone = False
            walk.errors.append(f"{exc.filename}: {exc.strerror}")
        self.bytes += walk.bytes
        for path in walk.residuals:
            self.residual(path)
        if walk.found and gone:
            self.removed.append(artifact.path)
        if walk.acted and self.trash is not None:
            self._mark_partial(artifact.path)
        _raise_errors(walk.errors)

    def _move(self, artifact: Artifact, parts: list[str], parent: _Parent) -> bool:
        """Rename the leaf into the trash; False when it must be removed at
        once instead (something below it stays, or it cannot be moved)."""
        assert self.trash is not None
        # The same walk, counting only, first: a tree that holds another file
        # system or an unreadable part is removed at once instead, so the
        # trash never holds a mount or half a tree.
        seen = set(self._seen)
        probe = _Walk(parent.root_dev, dry_run=True, seen=seen)
        try:
            clean = probe.run(parent.cursor, parts[-1])
        except TreeChanged:
            return False
        if not probe.found:
            return True
        if not clean or probe.errors:
            return False
        leaf = parts[-1]
        try:
            n = self.trash.root_number(artifact.root or "")
            dst = self.trash.destination(n, parent.chain)
        except OSError as exc:
            raise RemovalError(f"trash {self.trash.path}: {exc}") from exc
        try:
            if _exists(leaf, dst):
                if _empty_dir(leaf, parent.cursor.fd):
                    # A session dir whose entries were moved one by one: its
                    # twin in the trash (made for them) stands for it.
                    os.rmdir(leaf, dir_fd=parent.cursor.fd)
                    self.removed.append(artifact.path)
                    return True
                log.warning("already in the trash; removing at once", path=artifact.path)
                return False
            # rename never follows the leaf; the way to it was checked above.
            os.rename(leaf, leaf, src_dir_fd=parent.cursor.fd, dst_dir_fd=dst)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                return False
            raise RemovalError(f"{artifact.path}: {type(exc).__name__}: {exc.strerror}") from exc
        finally:
            os.close(dst)
        self._seen = seen
        self.bytes += probe.bytes
        self.removed.append(artifact.path)
        try:
            self.trash.moved(n, "/".join(parts), probe.bytes)
        except OSError as exc:
            raise RemovalError(f"trash {self.trash.path}: {exc}") from exc
        return True

    def _mark_partial(self, what: str) -> None:
        self.partial = True
        assert self.trash is not None
        try:
            self.trash.mark_partial(what)
        except OSError as exc:
            raise RemovalError(f"trash {self.trash.path}: {exc}") from exc

    def removed_at_once(self, what: str, *, kept: bool = False) -> None:
        self.removed.append(what)
        # Rows kept in the trash come back with it: only what is gone for
        # good makes the entry partial.
        kept = kept or what in self._kept_rows
        if self.trash is not None and not self.dry_run and not kept:
            self._mark_partial(what)

    def residual(self, path: str) -> None:
        if path not in self.residuals:
            self.residuals.append(path)

    def keep_rows(self, rows: TableRows) -> None:
        if self.trash is None or self.dry_run:
            return
        try:
            self.trash.add_rows(rows)
            self._kept_rows.add(f"{rows.db}#{rows.table}")
        except (OSError, sqlite3.Error) as exc:
            why = f"trash {self.trash.path}: cannot keep rows of {rows.table}: {exc}"
            raise RemovalError(why) from exc


def _empty_dir(name: str, dir_fd: int) -> bool:
    """`name` is a directory (not a link to one) with nothing in it."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return False
    try:
        return not os.listdir(fd)
    finally:
        os.close(fd)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
