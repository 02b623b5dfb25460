"""Small JSON files in agentkeep's state dir (pins, the pause, the last
prune, what adopt changed), written whole and renamed into place
(fsio.replace), and the temporary files a crash leaves: their writer holds a
flock on each until its rename, and clear_stale() removes those nobody holds.
"""

from __future__ import annotations

import fcntl
import json
import os
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
    file. StateFileError for anything else: never a silent default, since a
    default could make agentkeep remove more."""
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
    """The JSON in a state file whose loss only costs a report; a damaged
    one is logged, and gives `default`."""
    try:
        return read_state(path, lambda value: value)
    except StateFileError as exc:
        log.warning("state file unreadable", path=str(path), error=str(exc))
        return default


def write_json(path: Path, value: Any) -> None:
    """Replace `path` atomically and durably (file and folder fsynced).
    Raises OSError naming `path` (a write's own error names no file)."""
    # json's C encoder: json.dump (or any indent) leaves a reference cycle per write.
    data = json.dumps(value, sort_keys=True).encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fsio.replace(path, data, before_rename=_write_hook)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}", str(path)) from exc


def clear_stale(state_dir: Path) -> list[Path]:
    """Remove the temporary files of writers killed before their rename;
    the paths removed. Only agentkeep's temporary names, in the state dir,
    its journal and each trash entry's own folder (never its roots/, which
    hold the user's files under their own names), and only a file nobody
    holds a lock on: a live writer's stays."""
    removed = [
        Path(entry.path)
        for directory in _written_in(state_dir)
        for entry in _entries(directory)
        if TEMPORARY.fullmatch(entry.name)
        and entry.is_file(follow_symlinks=False)
        and _remove_unheld(Path(entry.path))
    ]
    if removed:
        log.info("stale temporary files removed", count=len(removed), first=str(removed[0]))
    return removed


def _written_in(state_dir: Path) -> list[Path]:
    """The folders agentkeep writes state files in. A trash entry's
    entry.json is written only by a removal, which the journal names until
    it is done (invariant 5): with no journal entry (a file not named ".*")
    the trash, a folder per session, is not walked."""
    journal = state_dir / "journal"
    folders = [state_dir, journal]
    if any(
        not e.name.startswith(".") and e.is_file(follow_symlinks=False) for e in _entries(journal)
    ):
        folders += [entry for agent in _folders(state_dir / "trash") for entry in _folders(agent)]
    return folders


def _folders(directory: Path) -> list[Path]:
    return [Path(e.path) for e in _entries(directory) if e.is_dir(follow_symlinks=False)]


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


def _remove_unheld(path: Path) -> bool:
    """Remove `path` under its lock, when nobody else holds it; whether it
    was removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not os.path.samestat(os.fstat(fd), os.lstat(path)):
            return False  # the name is another file's now
        os.unlink(path)
    except OSError:  # its writer holds it (BlockingIOError), or it went
        return False
    finally:
        os.close(fd)
    return True


def remove(path: Path) -> None:
    """Unlink `path` if it is there."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class Pins:
    """Pinned sessions (`agentkeep pin`): never pruned. In the state dir,
    not the index: the index is a cache, pins are the user's."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "pins.json"

    def all(self) -> set[tuple[str, str]]:
        """Every pin. Raises StateFileError when pins.json is damaged: a pin
        lost to a damaged file would let its session be pruned."""
        return read_state(self.path, _pins) or set()

    def set(self, agent: str, session_id: str, pinned: bool) -> None:
        """Pin or unpin one session."""
        pins = self.all()  # a damaged file is never overwritten
        (pins.add if pinned else pins.discard)((agent, session_id))
        write_json(self.path, sorted([a, i] for a, i in pins))


def _pins(value: Any) -> set[tuple[str, str]]:
    if not isinstance(value, list):
        raise TypeError("not a list of [agent, id] pairs")
    for item in value:
        if not (
            isinstance(item, list)
            and len(item) == 2
            and all(isinstance(p, str) and p for p in item)
        ):
            raise TypeError(f"{json.dumps(item)[:80]} is not an [agent, id] pair")
    return {(agent, session_id) for agent, session_id in value}
