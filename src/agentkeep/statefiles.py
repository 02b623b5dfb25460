"""Small JSON files in agentkeep's state dir (pins, the pause, the last prune).

Each is written whole to a temporary file, fsynced and renamed into place, so
a crash leaves either the old or the new content, never half of one. Each is
read only when it is a regular file (disk.read_regular): a FIFO planted under
its name must never hang the reader.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import structlog

from agentkeep.disk import read_regular
from agentkeep.errors import Failure

log = structlog.get_logger("agentkeep.statefiles")


def load_json(path: Path, default: Any) -> Any:
    """The value in `path`; `default` when it does not exist. Raises OSError
    or ValueError when it cannot be read as JSON."""
    try:
        data = read_regular(path)
    except FileNotFoundError:
        return default
    return json.loads(data)


def read_json(path: Path, default: Any) -> Any:
    """load_json, with `default` (logged) for a file that cannot be read:
    for state whose loss costs no session."""
    try:
        return load_json(path, default)
    except (OSError, ValueError) as exc:
        log.warning("state file unreadable", path=str(path), error=str(exc))
        return default


def write_json(path: Path, value: Any) -> None:
    """Replace `path` atomically and durably (file and folder fsynced): a
    reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f, indent=1, sort_keys=True)
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
        """Every pin. Raises Failure (exit 1) when the pins cannot be read:
        taking "no pins" instead would prune the pinned sessions."""
        try:
            pins = load_json(self.path, [])
            return {(a, i) for a, i in pins}
        except (OSError, ValueError, TypeError) as exc:
            raise Failure(
                1, f"cannot read the pins {self.path}: {exc}; nothing is pruned until it is fixed"
            ) from None

    def set(self, agent: str, session_id: str, pinned: bool) -> None:
        pins = self.all()
        if pinned:
            pins.add((agent, session_id))
        else:
            pins.discard((agent, session_id))
        write_json(self.path, sorted([a, i] for a, i in pins))
