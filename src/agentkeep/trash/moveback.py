"""Moving a tree back from an entry's `roots/<n>` to where it was: every
destination is checked first, then files go back by link-then-unlink and
directories are made again by mkdir, each of which fails rather than
replace what appeared meanwhile (restore never overwrites)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentkeep.disk import DirCursor
from agentkeep.trash.entries import RestoreConflict


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
