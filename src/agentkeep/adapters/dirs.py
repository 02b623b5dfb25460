"""Listing an agent's directories for its adapter, and what could not be listed."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping
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
    """The places a listing could not list or read (path -> why; a missing
    one holds nothing: not one). Every session that could have an entry there
    is kept `unsafe` (invariant 2: a check that cannot be made counts)."""

    def add(self, path: str | os.PathLike[str], exc: OSError) -> None:
        """Record `path` as unlisted (once, logged)."""
        path = os.fspath(path)
        if path not in self:
            log.info("cannot list directory", path=path, error=str(exc))
            self[path] = exc.strerror or str(exc)

    @staticmethod
    def note(into: Unlisted | None, path: str | os.PathLike[str], exc: OSError) -> None:
        """add() to `into`; only logged when there is none."""
        (Unlisted() if into is None else into).add(path, exc)


def unlisted_error(exc: OSError) -> bool:
    """Whether a listing's error hides what is there (not absent, not a file)."""
    return not isinstance(exc, (FileNotFoundError, NotADirectoryError))


def unreadable(artifacts: Iterable[Artifact], unlisted: Iterable[str] = ()) -> list[str]:
    """A session's Session.unreadable: `unlisted`, and the first directory
    that cannot be listed in each of its directory artifacts not all read."""
    found = (fsio.first_unlisted(a.path) for a in artifacts if a.is_dir and a.mtime is None)
    return sorted({*unlisted, *(path for path in found if path is not None)})


# What a listing found of a session: (path, kind, root, linked, primary, foreign).
Found = tuple[str | os.PathLike[str], str, str | os.PathLike[str] | None, bool, bool, bool]


def measured(found: Iterable[Found], seen: set[tuple[int, int]] | None = None) -> list[Artifact]:
    """Each of `found` measured, each inode counted once (in `seen`); what
    is gone since it was listed left out."""
    seen = set() if seen is None else seen
    made = (
        disk.artifact(path, kind, root, primary=primary, linked=linked, seen=seen, foreign=foreign)
        for path, kind, root, linked, primary, foreign in found
    )
    return [a for a in made if a is not None]


def own_time(updated: float | None, artifacts: Iterable[Artifact]) -> float | None:
    """A session's own time: its row's `updated`, else its newest file's
    mtime. Rows with no time of their own are as old as the session."""
    if updated is not None:
        return updated
    return max((a.mtime for a in artifacts if a.mtime is not None), default=None)


# -- directories whose entries are sessions' -------------------------------


def entries(
    directory: str | os.PathLike[str],
    unlisted: Unlisted | None = None,
    *,
    keep: Callable[[str], bool] | None = None,
    follow: bool = True,
) -> list[Entry]:
    """The entries of `directory` whose names `keep` keeps, sorted by name,
    a link's `dir` where it leads; with `follow` False as listed and no link
    followed (that moves its atime). A link at `directory` is listed through,
    so what lies behind it is reported as linked. Empty when missing, or when
    it cannot be listed (then added to `unlisted`)."""
    try:
        return fsio.entries(directory, resolve_links=follow, keep=keep, sort=follow)
    except OSError as exc:
        if unlisted_error(exc):
            Unlisted.note(unlisted, directory, exc)
        return []


def real_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """The subdirectories of `path` that are no links."""
    return [Path(e.path) for e in entries(path) if e.dir and not e.link]


def utf8_name(name: str) -> bool:
    """A name that can be stored and reported (no undecodable bytes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_CONTAINER = "session-dir"


def directory_artifacts(
    directory: str,
    root: str,
    *,
    primary: str,
    kinds: Mapping[str, str],
    linked: bool,
    seen: set[tuple[int, int]],
    unlisted: Unlisted | None = None,
) -> list[Artifact]:
    """A session directory, entry by entry: `primary` (the record the agent
    lists it by) first (invariant 5), the rest next, and the directory itself
    last, as the container of what was not listed. Entries reached through a
    link at `directory` are linked (never removed); the link is the
    container, removed as the link alone. A name that is not UTF-8 cannot be
    stored: it is measured into the container. Empty when it is gone."""
    unlisted = Unlisted() if unlisted is None else unlisted
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        unlisted.add(directory, exc)
        return [Artifact(directory, _CONTAINER, 0, None, root, linked=linked, is_dir=True)]
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
    mtime = newest if complete else None
    container = Artifact(directory, _CONTAINER, leftover, mtime, root, False, linked, True)
    return [*found, container._replace(disk_bytes=leftover_disk)]


def parts_below(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> list[str] | None:
    """The components of `path` below `root`, compared as components (a root
    /x/ab does not contain /x/abc); [] for root itself. None when `path` is
    not absolute, not below `root`, or holds a `..` (could walk anywhere)."""
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
