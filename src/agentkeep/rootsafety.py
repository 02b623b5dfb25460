"""Whether a path is safe to use as an agent root: the user's own, which
no other user can write to or plant, reached through no link another user
owns. Read with lstat, never changing what it reads."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def _others_can_write(st: os.stat_result, uid: int) -> bool:
    if st.st_mode & stat.S_IWOTH:
        return True
    return bool(st.st_mode & stat.S_IWGRP) and not _private_group(st.st_gid, uid)


def _private_group(gid: int, uid: int) -> bool:
    """A group-writable dir is still private on user-private-group systems:
    the group is the user's own and has no other members."""
    try:
        import grp
        import pwd

        group = grp.getgrgid(gid)
        user = pwd.getpwuid(uid)
    except (KeyError, ImportError):
        return False
    return group.gr_gid == user.pw_gid and set(group.gr_mem) <= {user.pw_name}


def root_problem(path: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why `path` must not be used as an agent root, or None when it is
    safe: it is the user's, no other user can write to it, and every link
    on the way is the user's (or root's), else another user could plant it
    (a `/tmp/claude-<uid>` made by someone else). An ancestor others can
    write to needs the sticky bit (like /tmp): nobody can rename our entry."""
    return _way_problem(path, uid, strict_leaf=True)


def way_problem(path: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why a root must not be made below the directory `path` (as restore
    makes again a root that is gone): every component, `path` included, is
    held to the rule for the ancestors of a root."""
    return _way_problem(path, uid, strict_leaf=False)


def _way_problem(path: str | os.PathLike[str], uid: int | None, *, strict_leaf: bool) -> str | None:
    uid = os.getuid() if uid is None else uid
    path = os.path.abspath(os.fspath(path))
    parts = Path(path).parts
    current = parts[0]
    for depth, part in enumerate(parts[1:], start=1):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except OSError as exc:
            return f"{current}: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (uid, 0):
                return f"{current} is a link owned by uid {st.st_uid}"
            try:
                st = os.stat(current)
            except OSError as exc:
                return f"{current}: {exc.strerror}"
        last = depth == len(parts) - 1
        if last and not stat.S_ISDIR(st.st_mode) and not strict_leaf:
            return f"{path} is not a directory"
        if last and strict_leaf:
            if st.st_uid != uid:
                return f"{path} belongs to uid {st.st_uid}, not {uid}"
            if _others_can_write(st, uid):
                return f"{path} can be written by other users (mode {st.st_mode & 0o7777:o})"
        elif (
            stat.S_ISDIR(st.st_mode)
            and _others_can_write(st, uid)
            and not st.st_mode & stat.S_ISVTX
        ):
            return f"{current} can be written by other users"
    return None
