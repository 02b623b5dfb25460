"""Small JSON files in agentkeep's state dir (pins, the pause, the last
prune, what adopt changed), and the temporary files a crash leaves.

Each is written whole to a temporary file, fsynced and renamed into place
(fsio.replace), so a crash leaves either the old or the new content, never
half of one. What a crash leaves instead is the temporary file: its writer
holds a flock on it from its making to its rename, and clear_stale(), as a
prune starts, removes those nobody holds.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog

from agentkeep import fsio
from agentkeep.fsio import TEMPORARY

log = structlog.get_logger("agentkeep.statefiles")

# Test seam, None in production: called with a temporary file once its data
# is written, before it is renamed into place.
_write_hook: Callable[[Path], None] | None = None

# Those of earlier releases, whose writers held no lock: write_json's
# `.<name>.json.<8 random>` and the journal's `.<name>.json.tmp`. One is
# stale once older than _EARLIER_GRACE (a write takes milliseconds).
_EARLIER = re.compile(r"\..+\.json\.(?:tmp|[a-z0-9_]{8})")
_EARLIER_GRACE = 60.0

T = TypeVar("T")


class StateFileError(Exception):
    """A state file agentkeep wrote is damaged (empty, cut short, not JSON,
    not the shape agentkeep writes): a person must fix or delete it."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} is damaged ({why}): fix it or delete it")
        self.path = path


def read_state(path: Path, check: Callable[[Any], T]) -> T | None:
    """The value in `path` as `check` makes it (check raises ValueError or
    TypeError for a shape agentkeep never writes); None when there is no
    file. Raises StateFileError, naming the file, for anything else: never a
    silent default, since a default could make agentkeep remove more. Read
    as fsio.read_regular reads (no link followed, no FIFO waited on), and
    never past fsio.SMALL_FILE_LIMIT."""
    try:
        data = fsio.read_regular(path, limit=fsio.SMALL_FILE_LIMIT)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFileError(path, exc.strerror or str(exc)) from exc
    try:
        return check(json.loads(data.decode("utf-8")))
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise StateFileError(path, str(exc) or type(exc).__name__) from exc


def read_json(path: Path, default: Any) -> Any:
    """The JSON in a state file whose loss only costs a report (the last
    prune's summary shown by status); a damaged one is logged, and gives
    `default`."""
    try:
        return read_state(path, lambda value: value)
    except StateFileError as exc:
        log.warning("state file unreadable", path=str(path), error=str(exc))
        return default


def write_json(path: Path, value: Any) -> None:
    """Replace `path` atomically and durably (file and folder fsynced): a
    reader sees the old file or the new one, never half of one. Raises
    OSError naming `path` (a write's own error names no file)."""
    # One string from json's C encoder: json.dump (and any indent) goes
    # through its Python encoder, whose closures leave a reference cycle per
    # write (thousands in a prune into the trash).
    data = json.dumps(value, sort_keys=True).encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fsio.replace(path, data, before_rename=_write_hook)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}", str(path)) from exc


def clear_stale(state_dir: Path) -> list[Path]:
    """Remove the temporary files of writers killed before they renamed
    them into place (SIGKILL, a power cut); the paths removed. Only
    agentkeep's own temporary names, where agentkeep writes state files:
    the state dir, its journal (and the journal's folders of earlier
    releases), and each trash entry's own folder (never its roots/, which
    hold the user's files under their own names). Only a file nobody holds
    a lock on: a live writer's stays."""
    now = time.time()
    removed = [
        Path(entry.path)
        for directory in _written_in(state_dir)
        for entry in _entries(directory)
        if _stale(entry, now) and _remove_unheld(Path(entry.path))
    ]
    if removed:
        log.info("stale temporary files removed", count=len(removed), first=str(removed[0]))
    return removed


def _written_in(state_dir: Path) -> list[Path]:
    """The folders agentkeep writes state files in through temporary ones.
    A trash entry's entry.json is written by a removal only, which the
    journal names until it is done (invariant 5): with nothing in the
    journal no entry holds a half-written one, and the trash, a folder per
    session, is not walked (10,000 entries took 0.2-0.5 s)."""
    journal = [state_dir / "journal", *_folders(state_dir / "journal")]
    folders = [state_dir, *journal]
    if any(_names_a_removal(directory) for directory in journal):
        folders += [entry for agent in _folders(state_dir / "trash") for entry in _folders(agent)]
    return folders


def _names_a_removal(directory: Path) -> bool:
    """Whether a journal folder holds an entry (any file but a temporary one)."""
    return any(
        not e.name.startswith(".") and e.is_file(follow_symlinks=False) for e in _entries(directory)
    )


def _folders(directory: Path) -> list[Path]:
    return [Path(e.path) for e in _entries(directory) if e.is_dir(follow_symlinks=False)]


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


def _stale(entry: os.DirEntry[str], now: float) -> bool:
    """Whether `entry` is agentkeep's temporary file, and (by its name)
    stale once nobody holds it."""
    if TEMPORARY.fullmatch(entry.name):
        return entry.is_file(follow_symlinks=False)
    if not _EARLIER.fullmatch(entry.name):
        return False
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and now - st.st_mtime > _EARLIER_GRACE


def _remove_unheld(path: Path) -> bool:
    """Remove `path` under its lock, when nobody else holds it; whether it
    was removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        st = os.fstat(fd)
        if not os.path.samestat(st, os.lstat(path)):
            return False  # the name is another file's now
        os.unlink(path)
    except OSError:  # its writer holds it (BlockingIOError), or it went
        return False
    finally:
        os.close(fd)
    return True


def remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class Pins:
    """Pinned sessions (`agentkeep pin`): never pruned. Kept in the state
    dir, not the index, because the index is a cache and pins are the user's."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "pins.json"

    def all(self) -> set[tuple[str, str]]:
        """Every pin. Raises StateFileError when pins.json is damaged: a pin
        lost to a damaged file would let its session be pruned."""
        return read_state(self.path, _pins) or set()

    def set(self, agent: str, session_id: str, pinned: bool) -> None:
        pins = self.all()  # a damaged file is never overwritten
        if pinned:
            pins.add((agent, session_id))
        else:
            pins.discard((agent, session_id))
        write_json(self.path, sorted([a, i] for a, i in pins))


def _pins(value: Any) -> set[tuple[str, str]]:
    if not isinstance(value, list):
        raise TypeError("not a list of [agent, id] pairs")
    pins: set[tuple[str, str]] = set()
    for item in value:
        if not (
            isinstance(item, list)
            and len(item) == 2
            and all(isinstance(part, str) and part for part in item)
        ):
            raise TypeError(f"{json.dumps(item)[:80]} is not an [agent, id] pair")
        pins.add((item[0], item[1]))
    return pins
