"""Small JSON files in agentkeep's state dir (pins, the pause, the last
prune, what adopt changed), and the one way agentkeep replaces a file.

Each is written whole to a temporary file, fsynced and renamed into place, so
a crash leaves either the old or the new content, never half of one.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog

log = structlog.get_logger("agentkeep.statefiles")


# State files are small; one bigger than this is not one agentkeep wrote.
_LIMIT = 64 << 20

T = TypeVar("T")


class StateFileError(Exception):
    """A state file agentkeep wrote is damaged (empty, cut short, not JSON,
    not the shape agentkeep writes): a person must fix or delete it."""

    exit_code = 1

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} is damaged ({why}): fix it or delete it")
        self.path = path


def read_state(path: Path, check: Callable[[Any], T]) -> T | None:
    """The value in `path` as `check` makes it (check raises ValueError or
    TypeError for a shape agentkeep never writes); None when there is no
    file. Raises StateFileError, naming the file, for anything else: never a
    silent default, since a default could make agentkeep remove more. Opened
    without following a link or waiting on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFileError(path, exc.strerror or str(exc)) from exc
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise StateFileError(path, "not a regular file")
            data = f.read(_LIMIT + 1)
    except OSError as exc:
        raise StateFileError(path, exc.strerror or str(exc)) from exc
    if len(data) > _LIMIT:
        raise StateFileError(path, "too large")
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
    try:
        _write_json(path, value)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}", str(path)) from exc


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # One string from json's C encoder: json.dump (and any indent) goes
    # through its Python encoder, whose closures leave a reference cycle per
    # write (thousands in a prune into the trash).
    replace_file(path, json.dumps(value, sort_keys=True).encode("utf-8"), 0o600)


def replace_file(path: Path, data: bytes, mode: int) -> None:
    """Put `data` at `path` whole or not at all, with permissions `mode`: a
    temporary file beside it, fsynced, renamed over it, and the folder
    fsynced, so a reader or a crash sees the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


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
