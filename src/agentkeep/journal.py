"""The removal journal: a removal that stops half way is finished next run.

Invariant 5: before a session's removal starts, an entry naming it (and the
paths it was to lose) is written and made durable; it is deleted when the
removal is done. An entry still present at the next run means the removal
was interrupted: the caller finishes it under the session's exclusive lease,
after listing the session from the disk again (a path may have been renamed
since, as Codex compresses rollouts). Entries are never trusted as a list of
things to delete, only as names of sessions to look at again.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep.adapters.base import valid_name
from agentkeep.leases import encode_id
from agentkeep.paths import ensure_private_dir

log = structlog.get_logger("agentkeep.journal")

# Test seam, None in production: called with the path about to be written
# (the temporary file, then the entry it is renamed to), so a test can make
# either write fail (ENOSPC).
_write_hook: Callable[[Path], None] | None = None

_SUFFIX = ".json"


@dataclass
class JournalEntry:
    agent: str
    id: str
    started: float
    paths: list[str]
    trash: bool

    @classmethod
    def from_json(cls, data: Any) -> JournalEntry:
        """Raises ValueError (or TypeError, KeyError) for anything malformed."""
        agent, session_id, started = data["agent"], data["id"], data["started"]
        paths, trash = data["paths"], data["trash"]
        if not isinstance(agent, str) or not valid_name(agent):
            raise ValueError(f"bad agent {agent!r}")
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"bad id {session_id!r}")
        if isinstance(started, bool) or not isinstance(started, int | float):
            raise ValueError(f"bad start time {started!r}")
        if not math.isfinite(started):
            raise ValueError(f"bad start time {started!r}")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ValueError("paths must be a list of strings")
        if not isinstance(trash, bool):
            raise ValueError(f"bad trash flag {trash!r}")
        return cls(agent, session_id, float(started), paths, trash)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """`<state>/journal/<agent>/<encoded id>.json`, one file per removal in
    progress."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.dir = state_dir / "journal"

    def _path(self, agent: str, session_id: str) -> Path:
        if not valid_name(agent):
            raise ValueError(f"invalid agent name {agent!r}")
        return self.dir / agent / f"{encode_id(session_id)}{_SUFFIX}"

    def begin(
        self,
        agent: str,
        session_id: str,
        paths: list[str],
        *,
        trash: bool,
        started: float | None = None,
    ) -> None:
        """Record that the removal of a session starts. Durable (file and
        directory fsynced) before it returns; raises OSError when it cannot
        be, and then the caller must remove nothing: a removal nobody can
        finish must not begin. Nothing half-written is ever left to read."""
        path = self._path(agent, session_id)
        for directory in (self.state_dir, self.dir, path.parent):
            ensure_private_dir(directory)
        when = time.time() if started is None else started
        entry = JournalEntry(agent, session_id, when, list(paths), trash)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            if _write_hook is not None:
                _write_hook(tmp)
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(asdict(entry), f)
                f.flush()
                os.fsync(f.fileno())
            if _write_hook is not None:
                _write_hook(path)
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except BaseException:
            # Only the temporary file goes: an older entry of the same session
            # (an interrupted removal) must stay until that removal is done.
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def done(self, agent: str, session_id: str) -> None:
        """The removal finished: forget it. Not fsynced: an entry that comes
        back after a crash names a session already gone, and finishing it
        again finds nothing left to remove."""
        try:
            os.unlink(self._path(agent, session_id))
        except FileNotFoundError:
            return

    def pending(self) -> list[JournalEntry]:
        """Removals that were begun and never done, oldest first. Unreadable
        or malformed entries are logged and skipped."""
        entries: list[JournalEntry] = []
        try:
            agent_dirs = sorted(self.dir.iterdir())
        except FileNotFoundError:
            return entries
        except OSError as exc:
            log.error("journal unreadable", path=str(self.dir), error=str(exc))
            return entries
        for agent_dir in agent_dirs:
            if not agent_dir.is_dir() or agent_dir.is_symlink():
                continue
            for path in sorted(agent_dir.iterdir()):
                if not path.name.endswith(_SUFFIX):
                    continue
                entry = self._read(path)
                if entry is not None:
                    entries.append(entry)
        return sorted(entries, key=lambda e: e.started)

    def _read(self, path: Path) -> JournalEntry | None:
        try:
            with open(path, encoding="utf-8") as f:
                entry = JournalEntry.from_json(json.load(f))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("journal entry unreadable, skipped", path=str(path), error=str(exc))
            return None
        if path != self._path(entry.agent, entry.id):
            log.warning("journal entry does not match its name, skipped", path=str(path))
            return None
        return entry
