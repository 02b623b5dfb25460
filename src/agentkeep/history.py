"""The lasting record of what went: `<state>/history.jsonl`, a line per
session removed, and one more when its trash entry expires, is emptied or is
restored. It keeps a session's title and nothing else of its content; only
`history --forget` removes lines. Writing it never fails a removal (a line
that cannot be written is counted and logged); each line is one O_APPEND
write under the lock --forget's rewrite takes too; reading skips any line
that is not whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep import fsio
from agentkeep.leases import LeaseError, hold_exclusive
from agentkeep.model import parse_rfc3339, rfc3339

log = structlog.get_logger("agentkeep.history")

_HISTORY = "history.jsonl"
# Why a line was written: a removal's reason (the prune report's `why`), or
# what became of its trash entry.
_WHYS = ("age", "size", "purge", "expired", "emptied", "restored")


@dataclass(frozen=True)
class Gone:
    """One line of the record."""

    time: float
    agent: str
    id: str
    why: str
    restorable: bool
    workspace: str | None = None
    title: str | None = None
    bytes: int = 0
    first_activity: float | None = None
    last_activity: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The line's object (vars(), not asdict(): every field is plain)."""
        doc = dict(vars(self))
        for key in ("time", "first_activity", "last_activity"):
            doc[key] = rfc3339(doc[key])
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Gone:
        """Raises ValueError (TypeError, KeyError) for what this never wrote."""
        if not isinstance(doc, dict) or doc.get("why") not in _WHYS:
            raise ValueError("not a line of the record")
        for key in ("agent", "id"):
            if not isinstance(doc[key], str) or not doc[key]:
                raise ValueError(f"no {key}")
        optional = {k: doc.get(k) for k in ("workspace", "title")}
        if any(v is not None and not isinstance(v, str) for v in optional.values()):
            raise ValueError("workspace and title are text")
        if isinstance(doc.get("bytes"), bool) or not isinstance(doc.get("bytes", 0), int):
            raise ValueError("bytes is a number")
        return cls(
            time=parse_rfc3339(doc["time"]),
            agent=doc["agent"],
            id=doc["id"],
            why=doc["why"],
            restorable=bool(doc["restorable"]),
            bytes=doc.get("bytes", 0),
            first_activity=_time(doc.get("first_activity")),
            last_activity=_time(doc.get("last_activity")),
            **optional,
        )


def _time(value: Any) -> float | None:
    return None if value is None else parse_rfc3339(value)


def _path(state_dir: Path) -> Path:
    return state_dir / _HISTORY


def _lock(state_dir: Path) -> Any:
    return hold_exclusive(state_dir / f"{_HISTORY}.lock")


class Record:
    """Appends to the record; never raises. `unwritten` counts the lines
    that could not be written (the first failure is logged, then a line
    when the caller is done: summary())."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.unwritten = 0
        self.error: str | None = None

    def add(self, gone: Gone) -> bool:
        """Append a line; whether it was written."""
        try:
            with _lock(self.state_dir):
                _append(_path(self.state_dir), _line(gone))
        except (OSError, LeaseError) as exc:
            self.unwritten += 1
            if self.error is None:
                self.error = getattr(exc, "strerror", None) or str(exc)
                log.error("the record of what went is not written", error=self.error)
            return False
        return True

    def summary(self) -> None:
        """Say, once, how many lines were lost (a full disk)."""
        if self.unwritten:
            log.error(
                "removals not in the record of what went (agentkeep history)",
                count=self.unwritten,
                error=self.error,
            )


def _line(gone: Gone) -> bytes:
    # ASCII (\\u escapes): a name that is not UTF-8 travels whole.
    return (json.dumps(gone.to_json(), sort_keys=True) + "\n").encode("ascii")


def _append(path: Path, line: bytes) -> None:
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        size = os.fstat(fd).st_size
        # A write cut short (a full disk) left a line without its end: this
        # one starts on a line of its own, and the cut one is skipped.
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(28, "the line was cut short (is the disk full?)")
    finally:
        os.close(fd)


def read(state_dir: Path) -> Iterator[Gone]:
    """Every whole line of the record, oldest first; a line that is not one
    (cut by a kill, or damaged) is passed over, and counted in the log."""
    handle = fsio.open_quietly(_path(state_dir))
    if handle is None:
        return
    skipped = 0
    with handle:
        for raw in handle:
            try:
                yield Gone.from_json(json.loads(raw))
            except (ValueError, TypeError, KeyError, RecursionError):
                skipped += 1
    if skipped:
        log.warning("lines of the record of what went passed over", count=skipped)


def forget(state_dir: Path, drop: Callable[[Gone], bool]) -> int:
    """Remove the lines `drop` names; how many. The record is rewritten
    whole (atomically: a new file renamed over it) under the lock appends
    take, so no line written meanwhile is lost; lines that are not whole
    are dropped with them. Raises OSError."""
    with _lock(state_dir):
        lines = list(read(state_dir))
        kept = [g for g in lines if not drop(g)]
        if len(kept) == len(lines):
            return 0
        fsio.replace(_path(state_dir), b"".join(_line(g) for g in kept))
    return len(lines) - len(kept)
