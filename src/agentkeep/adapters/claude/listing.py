"""Listing a directory Claude writes to: one entry per name, telling a link
from a directory without following it (that moves the link's atime)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from agentkeep import disk, fsio
from agentkeep.adapters.base import valid_name
from agentkeep.adapters.dirs import Unlisted, unlisted_error
from agentkeep.fsio import Entry


def probed(directory: str, probe: Sequence[str], unlisted: Unlisted | None = None) -> list[Entry]:
    """The entries of `directory` named in `probe`, each looked up alone; a
    directory that cannot be looked in has none, and is added to `unlisted`."""
    found = (entry_at(directory, name, unlisted) for name in dict.fromkeys(probe))
    return [e for e in found if e]


LINK, DIR = 1, 2


def flags_by_name(directory: str, unlisted: Unlisted | None = None) -> dict[str, int] | None:
    """dirs.entries(directory, follow=False) as {name: LINK/DIR flags}, cheaper than
    an Entry each; None when it cannot be listed (added to `unlisted`), {}
    when it is missing."""
    try:
        return {
            name: (LINK if link else 0) | (DIR if is_dir else 0)
            for name, link, is_dir in fsio.listed(directory)
        }
    except OSError as exc:
        if not unlisted_error(exc):
            return {}
        Unlisted.note(unlisted, directory, exc)
        return None


def entry_of(directory: str, name: str, flags: int) -> Entry:
    """The Entry dirs.entries(follow=False) made for `name`, from its flags."""
    return Entry(name, directory.rstrip("/") + "/" + name, bool(flags & LINK), bool(flags & DIR))


def entry_at(directory: str, name: str, unlisted: Unlisted | None = None) -> Entry | None:
    """The entry `name` of `directory`, looked up alone; None when there is
    none, or it cannot be looked up (`directory` added to `unlisted`)."""
    try:
        return fsio.entry_at(directory, name)
    except OSError as exc:
        Unlisted.note(unlisted, directory, exc)
        return None


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
