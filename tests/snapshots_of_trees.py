"""A tree as restore must give it back, read without moving any atime.

stats(): every entry's type, mode, size, atime and mtime to the nanosecond,
and which names share an inode; directories are listed through descriptors
opened O_NOATIME (the tests' files are their own), nothing is read.
contents(): every file's hash and link's target; reading a link moves its
atime, so take contents() before the times are set, and stats() first
after a restore. set_times() gives every entry times of its own.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_NOATIME = getattr(os, "O_NOATIME", 0)


def walk(*tops: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Each of `tops` and everything below it, with its lstat."""
    todo = [str(t) for t in tops]
    while todo:
        path = todo.pop()
        st = os.lstat(path)
        yield path, st
        if stat.S_ISDIR(st.st_mode):
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOATIME)
            try:
                todo += [os.path.join(path, n) for n in sorted(os.listdir(fd))]
            finally:
                os.close(fd)


def stats(*tops: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    inodes: dict[tuple[int, int], list[str]] = {}
    for path, st in walk(*tops):
        kind = stat.S_IFMT(st.st_mode)
        size = 0 if kind == stat.S_IFDIR else st.st_size
        found[path] = (kind, stat.S_IMODE(st.st_mode), size, st.st_atime_ns, st.st_mtime_ns)
        if kind == stat.S_IFREG and st.st_nlink > 1:
            inodes.setdefault((st.st_dev, st.st_ino), []).append(path)
    found["hard links"] = sorted(sorted(names) for names in inodes.values() if len(names) > 1)
    return found


def contents(*tops: Path) -> dict[str, str]:
    found = {}
    for path, st in walk(*tops):
        if stat.S_ISLNK(st.st_mode):
            found[path] = "-> " + os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(path, os.O_RDONLY | _NOATIME)
            with os.fdopen(fd, "rb") as f:
                found[path] = hashlib.sha256(f.read()).hexdigest()
    return found


def set_times(*tops: Path, start_ns: int = 1_500_000_000_123_456_789) -> None:
    """Every entry its own atime and mtime (apart, to the nanosecond),
    directories last, each after what it holds."""
    entries = sorted(walk(*tops), key=lambda e: -e[0].count("/"))
    for n, (path, _st) in enumerate(entries):
        mtime = start_ns + n * 1_000_003
        os.utime(path, ns=(mtime + 86_400_000_000_007, mtime), follow_symlinks=False)
