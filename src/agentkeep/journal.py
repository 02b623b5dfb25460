"""The removal journal: a removal that stops half way is finished next run.

Invariant 5: before a session's removal starts, an entry naming it is made
durable; it is deleted when the removal is done. An entry left at the next
run is finished under the session's leases, after listing it from the disk
again: entries only name sessions to look at again, never things to delete.
A batch of sessions is journaled in one file, made durable once; an entry
whose removal never started is harmless (its session is left to the plan).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agentkeep import fsio
from agentkeep.adapters.base import valid_name
from agentkeep.paths import ensure_private_dir

log = structlog.get_logger("agentkeep.journal")

# Test seam, None in production: called with the temporary file, then with
# the entry it is about to be renamed to.
_write_hook: Callable[[Path], None] | None = None

_SUFFIX = ".json"
_BATCH = "batch-"

# Whether this process has journaled a batch (see began_removing()).
_journaled = False


def began_removing() -> bool:
    """Whether this process has journaled a batch: stopped since, a run
    finishes the session it is removing (daemon/child.py); stopped before,
    it leaves nothing half done that the journal does not name."""
    return _journaled


@dataclass
class JournalEntry:
    """One removal begun."""

    agent: str
    id: str
    started: float
    paths: list[str]
    trash: bool
    # The cutoff the removal began under (finishing holds it to it); None: a purge.
    cutoff: float | None = None
    # The batch file it was read from (never written).
    file: Path | None = field(default=None, compare=False)

    def as_json(self) -> dict[str, Any]:
        """The entry as written (every field but `file`)."""
        return {k: v for k, v in vars(self).items() if k != "file"}

    @classmethod
    def from_json(cls, data: Any) -> JournalEntry:
        """Raises ValueError (or TypeError, KeyError) for anything malformed."""
        agent, session_id, started = data["agent"], data["id"], data["started"]
        paths, trash, cutoff = data["paths"], data["trash"], data["cutoff"]
        if not isinstance(agent, str) or not valid_name(agent):
            raise ValueError(f"bad agent {agent!r}")
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"bad id {session_id!r}")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ValueError("paths must be a list of strings")
        if not isinstance(trash, bool):
            raise ValueError(f"bad trash flag {trash!r}")
        return cls(
            agent,
            session_id,
            _number(started),
            paths,
            trash,
            None if cutoff is None else _number(cutoff),
        )


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"bad time {value!r}")
    return float(value)


def _hook(path: Path) -> Callable[[Path], None] | None:
    """_write_hook, called with the temporary file and then with `path`."""
    hook = _write_hook
    if hook is None:
        return None

    def both(tmp: Path) -> None:
        hook(tmp)
        hook(path)

    return both


class Journal:
    """`<state>/journal/batch-<ns>-<pid>.json`: one file per batch in progress."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.dir = state_dir / "journal"

    def begin_batch(self, entries: list[JournalEntry]) -> Path:
        """Record that the removals of `entries` start: one file, durable
        before it returns, never half written. Raises OSError when it cannot
        be: then the caller must remove nothing."""
        for entry in entries:  # a bad name fails before anything is written
            if not valid_name(entry.agent):
                raise ValueError(f"invalid agent name {entry.agent!r}")
        path = self.dir / f"{_BATCH}{time.time_ns()}-{os.getpid()}{_SUFFIX}"
        self._write(path, {"batch": [e.as_json() for e in entries]})
        global _journaled
        _journaled = True
        return path

    def narrow_batch(self, path: Path, entries: list[JournalEntry]) -> None:
        """Keep only `entries` of the batch at `path` (the removals that
        failed half way), durably; OSError leaves the batch as it was."""
        self._write(path, {"batch": [e.as_json() for e in entries]})

    def end_batch(self, path: Path) -> None:
        """Every removal of the batch finished or never started. Not fsynced:
        a batch back after a crash names sessions gone or untouched."""
        path.unlink(missing_ok=True)

    def _write(self, path: Path, data: dict[str, Any]) -> None:
        for directory in (self.state_dir, self.dir, path.parent):
            ensure_private_dir(directory)
        fsio.replace(path, json.dumps(data).encode("utf-8"), before_rename=_hook(path))

    def settle(self, entry: JournalEntry, rest: list[JournalEntry]) -> None:
        """A pending entry was finished (or left to the plan): forget it. A
        batch goes when none of `rest` (still to be settled) came from it."""
        if entry.file is not None and all(o.file != entry.file for o in rest):
            entry.file.unlink(missing_ok=True)

    def pending(self) -> list[JournalEntry]:
        """Removals begun and never done, oldest first (unreadable or malformed
        entries are logged and skipped)."""
        entries: list[JournalEntry] = []
        try:
            listed = sorted(self.dir.iterdir())
        except FileNotFoundError:
            return entries
        except OSError as exc:
            log.error("journal unreadable", path=str(self.dir), error=str(exc))
            return entries
        for path in listed:
            if path.name.startswith(_BATCH) and path.name.endswith(_SUFFIX):
                entries.extend(self._read_batch(path))
        return sorted(entries, key=lambda e: e.started)

    def _read_batch(self, path: Path) -> list[JournalEntry]:
        try:
            # Only a regular file is read: a FIFO would hang the prune.
            batch = json.loads(fsio.read_regular(path, limit=fsio.SMALL_FILE_LIMIT))["batch"]
            entries = [JournalEntry.from_json(item) for item in batch]
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("journal batch unreadable, skipped", path=str(path), error=str(exc))
            return []
        for entry in entries:
            entry.file = path
        return entries
