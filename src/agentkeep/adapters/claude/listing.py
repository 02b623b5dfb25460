"""Listing a directory Claude writes to: one entry per name, telling a link
from a directory without following the link (following it moves the link's
atime). A link is followed only where the listed directory itself is one,
to report what lies behind it."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from agentkeep import disk
from agentkeep.adapters.base import valid_name

# One logger for the whole adapter, named as it always was.
log = structlog.get_logger("agentkeep.adapters.claude")


@dataclass(slots=True)
class Entry:
    """One directory entry: `link` when the entry itself is a symbolic link,
    `dir` when it is a directory (never for a link: finding out where a link
    leads follows it, and following a link moves the link's atime)."""

    name: str
    path: str
    link: bool
    dir: bool


def list_entries(
    directory: str, probe: Sequence[str] | None, keep: Callable[[str], bool] | None = None
) -> list[Entry]:
    """The entries of `directory` (following a link at `directory` itself, so
    a linked directory can be reported), or only those named in `probe`, or
    only those whose names `keep` keeps (filtered as they are read, so a big
    directory costs no more memory than what is kept)."""
    if probe is not None:
        return [e for e in (entry_at(directory, name) for name in dict.fromkeys(probe)) if e]
    prefix = directory.rstrip("/") + "/"
    return [
        Entry(name, prefix + name, link, is_dir)
        for name, link, is_dir in _listed(directory)
        if keep is None or keep(name)
    ]


def _listed(directory: str) -> Iterator[tuple[str, bool, bool]]:
    """(name, link, dir) of each entry, told by the listing itself (no stat)."""
    try:
        with disk.scandir(directory, follow=True) as it:
            for entry in it:
                try:
                    link, is_dir = entry.is_symlink(), entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue  # vanished while listed
                # One string for each name, however many listings of its
                # directory (made again as it changes) and indexes hold it.
                yield sys.intern(entry.name), link, is_dir
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.info("cannot list directory", path=directory, error=str(exc))


LINK, DIR = 1, 2


def flags_by_name(directory: str) -> dict[str, int]:
    """list_entries(directory, None) as {name: LINK/DIR flags}, without an
    Entry for each (a directory of 10,000 listed again whenever it changed
    cost a prune's re-check a third of its time)."""
    return {
        name: (LINK if link else 0) | (DIR if is_dir else 0)
        for name, link, is_dir in _listed(directory)
    }


def entry_of(directory: str, name: str, flags: int) -> Entry:
    """The Entry list_entries() made for `name`, from its flags."""
    return Entry(name, directory.rstrip("/") + "/" + name, bool(flags & LINK), bool(flags & DIR))


def entry_at(directory: str, name: str) -> Entry | None:
    path = os.path.join(directory, name)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return Entry(name, path, stat.S_ISLNK(st.st_mode), stat.S_ISDIR(st.st_mode))


def listable(entry: Entry) -> bool:
    """A key directory to list: a directory, or a link to one (followed, so
    that what lies behind it can be reported)."""
    if entry.link:
        return os.path.isdir(entry.path)
    return entry.dir and valid_name(entry.name)


def linked_below(root: Path, relative: str) -> bool:
    """Whether a component of `relative` below `root` is a link."""
    path = root
    for part in relative.split("/"):
        path = path / part
        if disk.is_link(path):
            return True
    return False
