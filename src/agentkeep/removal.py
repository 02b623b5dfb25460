"""Removing one session's artifacts, into the trash or at once.

Each artifact goes through the link-safe walk (rmtree): relative to its
root's descriptor, never following a link, never crossing a mount point
(invariant 6). A leaf whose whole tree is clean and on the trash's mount is
renamed into the trash entry; anything else is removed at once and the entry
marked partial.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from agentkeep.disk import TreeChanged, exists_at
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact
from agentkeep.rmtree import (
    Parent,
    Parents,
    Walk,
    mount_at,
    open_parent,
    raise_errors,
    relative_parts,
)

if TYPE_CHECKING:
    from agentkeep.adapters.sqlite import TableRows
    from agentkeep.trash.writing import TrashWriter

log = structlog.get_logger("agentkeep.removal")


class SessionRemoval:
    """The Remover (adapters.base) for one session: link-safe removal, the
    trash and dry runs; collects what was removed, residuals and bytes."""

    def __init__(
        self,
        agent: str,
        session_id: str,
        *,
        dry_run: bool,
        trash: TrashWriter | None,
        same_fs_as: Path | None = None,
        parents: Parents | None = None,
        gone: Callable[[str], bool] = lambda session_id: False,
    ) -> None:
        """`same_fs_as`: artifacts on this path's mount are moved into the
        trash (default: the entry's own directory), the rest removed at once.
        `parents`: cursors kept open across a batch (their owner closes
        them). `gone`: see Remover.gone."""
        self.agent = agent
        self.gone = gone
        self.parents = parents
        self.session_id = session_id
        self.dry_run = dry_run
        self.trash = trash
        self.removed: list[str] = []
        self.residuals: list[str] = []
        self.bytes = 0
        self.partial = False
        self._seen: set[tuple[int, int]] = set()
        self._kept_rows: set[str] = set()
        self._trash_mount: int | None = None
        if trash is not None and not dry_run:
            where = os.fspath(same_fs_as if same_fs_as is not None else trash.path)
            self._trash_mount = mount_at(where)

    def remove_path(self, artifact: Artifact) -> None:
        """Remove one artifact (a linked one is residual)."""
        if artifact.linked:
            self.residual(artifact.path)
            return
        if artifact.root is None:
            raise RemovalError(f"{artifact.path} has no root to remove it relative to")
        root = artifact.root
        parts = relative_parts(root, artifact.path)
        if self.parents is None:
            parent = open_parent(root, parts, lambda: self.residual(artifact.path))
            if parent is not None:
                with parent.cursor:
                    self._remove_at(artifact, parts, parent)
            return
        parent = self.parents.get(root, parts, lambda: self.residual(artifact.path))
        if parent is not None:
            try:
                self._remove_at(artifact, parts, parent)
            finally:
                self.parents.put_back(root, parts, parent)

    def _remove_at(self, artifact: Artifact, parts: list[str], parent: Parent) -> None:
        if self._trash_mount == parent.root_mount and self._move(artifact, parts, parent):
            return
        self._delete(artifact, parts, parent)

    def _delete(self, artifact: Artifact, parts: list[str], parent: Parent) -> None:
        walk = Walk(parent.root_mount, dry_run=self.dry_run, seen=self._seen)
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
        raise_errors(walk.errors)

    def _move(self, artifact: Artifact, parts: list[str], parent: Parent) -> bool:
        """Rename the leaf into the trash; False when it must be removed at
        once instead (something below it stays, or it cannot be moved)."""
        assert self.trash is not None
        # The same walk, counting only, first: a tree holding a mount point or
        # an unreadable part is removed at once instead, so the trash never
        # holds a mount (whose expiry would empty it) or half a tree.
        seen = set(self._seen)
        probe = Walk(parent.root_mount, dry_run=True, seen=seen)
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
            if exists_at(leaf, dst):
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
        self.trash.moved(n, "/".join(parts), probe.bytes)
        return True

    def _mark_partial(self, what: str) -> None:
        self.partial = True
        assert self.trash is not None
        try:
            self.trash.mark_partial(what)
        except OSError as exc:
            raise RemovalError(f"trash {self.trash.path}: {exc}") from exc

    def removed_at_once(self, what: str, *, kept: bool = False) -> None:
        """`what` was removed without the walk (rows); only what is gone for
        good (not `kept` in the trash) makes the entry partial."""
        self.removed.append(what)
        kept = kept or what in self._kept_rows
        if self.trash is not None and not self.dry_run and not kept:
            self._mark_partial(what)

    def residual(self, path: str) -> None:
        """`path` names the session and is not the prune's to remove."""
        if path not in self.residuals:
            self.residuals.append(path)

    def keep_rows(self, rows: TableRows) -> None:
        """Copy the session's rows into the trash before they are deleted."""
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
