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

from agentkeep import disk
from agentkeep.adapters.base import valid_name
from agentkeep.adapters.dirs import Unlisted, unlisted_error


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
    directory: str,
    probe: Sequence[str] | None,
    keep: Callable[[str], bool] | None = None,
    unlisted: Unlisted | None = None,
) -> list[Entry]:
    """The entries of `directory` (following a link at `directory` itself, so
    a linked directory can be reported), or only those named in `probe`, or
    only those whose names `keep` keeps (filtered as they are read, so a big
    directory costs no more memory than what is kept). One that cannot be
    listed (or probed) has none, and is added to `unlisted`."""
    if probe is not None:
        found = (entry_at(directory, name, unlisted) for name in dict.fromkeys(probe))
        return [e for e in found if e]
    prefix = directory.rstrip("/") + "/"
    try:
        return [
            Entry(name, prefix + name, link, is_dir)
            for name, link, is_dir in _listed(directory)
            if keep is None or keep(name)
        ]
    except OSError as exc:
        Unlisted.note(unlisted, directory, exc)
        return []


def _listed(directory: str) -> Iterator[tuple[str, bool, bool]]:
    """(name, link, dir) of each entry, told by the listing itself (no stat);
    none when `directory` is missing. OSError when it cannot be listed."""
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
    except OSError as exc:
        if unlisted_error(exc):
            raise


LINK, DIR = 1, 2


def flags_by_name(directory: str, unlisted: Unlisted | None = None) -> dict[str, int] | None:
    """list_entries(directory, None) as {name: LINK/DIR flags}, without an
    Entry for each (a directory of 10,000 listed again whenever it changed
    cost a prune's re-check a third of its time); None when it cannot be
    listed (added to `unlisted`)."""
    try:
        return {
            name: (LINK if link else 0) | (DIR if is_dir else 0)
            for name, link, is_dir in _listed(directory)
        }
    except OSError as exc:
        Unlisted.note(unlisted, directory, exc)
        return None


def entry_of(directory: str, name: str, flags: int) -> Entry:
    """The Entry list_entries() made for `name`, from its flags."""
    return Entry(name, directory.rstrip("/") + "/" + name, bool(flags & LINK), bool(flags & DIR))


def entry_at(directory: str, name: str, unlisted: Unlisted | None = None) -> Entry | None:
    """The entry `name` of `directory`, looked up alone; None when there is
    none, or it cannot be looked up (`directory` added to `unlisted`)."""
    path = os.path.join(directory, name)
    try:
        st = os.lstat(path)
    except OSError as exc:
        if unlisted_error(exc):
            Unlisted.note(unlisted, directory, exc)
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
