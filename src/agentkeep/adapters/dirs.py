"""Listing an agent's directories for its adapter: entries without moving
atimes, a session directory entry by entry, paths below a root, and what
could not be listed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

import structlog

from agentkeep import disk, fsio, rootsafety
from agentkeep.fsio import Entry
from agentkeep.model import Artifact
from agentkeep.paths import Env

log = structlog.get_logger("agentkeep.adapters")


def root_problem(env: Env, path: Path) -> str | None:
    """Why what lies at `path` must not be removed (another user can write
    to it, a link on the way is not the user's), or None (nothing there)."""
    return rootsafety.root_problem(path, env.uid) if os.path.lexists(path) else None


class Unlisted(dict[str, str]):
    """The directories a listing could not list (path -> why), and places
    it could not read to tell whose an entry is. What lies there is
    unknown, so every session that could have an entry there is kept
    `unsafe` with them named (invariant 2: a check that cannot be made
    counts as in use), never dated or removed from the part that could be
    read. A missing directory is not one of them: it holds nothing."""

    def add(self, path: str | os.PathLike[str], exc: OSError) -> None:
        path = os.fspath(path)
        if path not in self:
            log.info("cannot list directory", path=path, error=str(exc))
            self[path] = exc.strerror or str(exc)

    @staticmethod
    def note(into: Unlisted | None, path: str | os.PathLike[str], exc: OSError) -> None:
        """add() to `into`; only logged when there is none."""
        (Unlisted() if into is None else into).add(path, exc)


def unlisted_error(exc: OSError) -> bool:
    """Whether a listing's error hides what is there: anything but the
    directory being absent (or a file)."""
    return not isinstance(exc, (FileNotFoundError, NotADirectoryError))


def unreadable(artifacts: Iterable[Artifact], unlisted: Iterable[str] = ()) -> list[str]:
    """A session's Session.unreadable: the places that could not be listed
    where it could have entries (`unlisted`), and the first directory that
    cannot be listed in each of its directory artifacts whose tree could
    not all be read (mtime None), sorted."""
    found = (fsio.first_unlisted(a.path) for a in artifacts if a.is_dir and a.mtime is None)
    return sorted({*unlisted, *(path for path in found if path is not None)})


# -- directories whose entries are sessions' -------------------------------


def entries(directory: str | os.PathLike[str], unlisted: Unlisted | None = None) -> list[Entry]:
    """The entries of `directory`, sorted by name (fsio.entries: a link
    at `directory` itself is listed through, so what lies behind it can be
    reported as linked; a link's `dir` is where it leads). A missing
    directory has none; one that cannot be listed has none, and is added to
    `unlisted`. A name that is not UTF-8 comes as the OS gives it (lone
    surrogates), and travels so through the index and the reports."""
    try:
        return fsio.entries(directory, resolve_links=True, sort=True)
    except OSError as exc:
        if unlisted_error(exc):
            Unlisted.note(unlisted, directory, exc)
        return []


def utf8_name(name: str) -> bool:
    """A name that can be stored and reported (no undecodable bytes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def directory_artifacts(
    directory: str,
    root: str,
    *,
    primary: str,
    kinds: Mapping[str, str],
    linked: bool,
    seen: set[tuple[int, int]],
    container: str = "session-dir",
    unlisted: Unlisted | None = None,
) -> list[Artifact]:
    """A session directory, entry by entry: the entry named `primary` (the
    record the agent lists the session by) first, every other entry next, and
    the directory itself last, as the container of whatever was not listed.

    Listing entries rather than measuring the whole tree keeps the primary's
    bytes from being counted twice while it is still removed before the rest
    (invariant 5). Entries reached through a link at `directory` are linked
    (never removed); the link itself is the container, removed as the link
    alone. A name that is not UTF-8 cannot be stored, so it is measured into
    the container, which takes it along. Empty when `directory` is gone. A
    directory that cannot be listed is added to `unlisted`.
    """
    unlisted = Unlisted() if unlisted is None else unlisted
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        unlisted.add(directory, exc)
        return [Artifact(directory, container, 0, None, root, linked=linked, is_dir=True)]
    through = linked or stat.S_ISLNK(st.st_mode)
    found: list[Artifact] = []
    leftover, newest, complete = 0, st.st_mtime, True
    # What the directory itself takes on disk, as du counts it.
    leftover_disk = st.st_blocks * 512
    try:
        names = sorted(fsio.listed_names(directory))
    except FileNotFoundError:
        names = []
    except OSError as exc:
        unlisted.add(directory, exc)
        names, complete = [], False
    for name in names:
        path = os.path.join(directory, name)
        if utf8_name(name):
            kind, is_primary = kinds.get(name, "data"), name == primary
            item = disk.artifact(path, kind, root, primary=is_primary, linked=through, seen=seen)
            if item is not None:
                found.append(item)
            continue
        tree = disk.measure(path, seen)
        if tree is not None:
            leftover += tree.bytes
            leftover_disk += tree.disk_bytes
            newest = max(newest, tree.mtime or newest)
            complete = complete and tree.complete
    found.sort(key=lambda a: not a.primary)
    found.append(
        Artifact(
            path=directory,
            kind=container,
            bytes=leftover,
            mtime=newest if complete else None,
            root=root,
            linked=linked,
            is_dir=True,
            disk_bytes=leftover_disk,
        )
    )
    return found


def parts_below(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> list[str] | None:
    """The components of `path` below `root`, compared component by component
    (never as strings: a root /x/ab does not contain /x/abc/...); [] for root
    itself. None when `path` is not absolute, not below `root`, or holds a
    `..` component (which could walk anywhere)."""
    text = os.fspath(path)
    if not os.path.isabs(text) or "\0" in text:
        return None
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    base = [p for p in os.fspath(root).split("/") if p not in ("", ".")]
    if parts[: len(base)] != base:
        return None
    return parts[len(base) :]
