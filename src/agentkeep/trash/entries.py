"""A trash entry and its entry.json: what it holds, where it lies, and how
the trash's entries are found and read.

An entry is `<state>/trash/<agent>/<encoded id>/` holding `entry.json` and
`roots/<n>/<path relative to root n>` (and `rows.sqlite`, the database rows
removed with the session). An entry that cannot be read is logged and
skipped by every reader, never guessed at.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import structlog

from agentkeep import fsio
from agentkeep.adapters.base import valid_name
from agentkeep.history import Gone
from agentkeep.leases import encode_id
from agentkeep.statefiles import write_json

log = structlog.get_logger("agentkeep.trash")

ENTRY = "entry.json"
ROOTS = "roots"
ROWS = "rows.sqlite"  # the database rows removed with the session (trash.writing)
RESTORED = "restored.json"
# Entries being discarded are renamed to "~...": '~' never occurs in an
# encoded id, so such a name is never an entry, and a discard that stopped
# half way is finished by the next expire.
ASIDE = "~"


class TrashError(Exception):
    """The trash's own state cannot be read or written."""


class RestoreConflict(TrashError):
    """Restoring would overwrite something; nothing (more) was moved."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__("would overwrite: " + ", ".join(paths))
        self.paths = paths


class RestoreRefused(TrashError):
    """The session's lease is held (or cannot be checked): it is in use."""


class NoSuchEntry(TrashError):
    """No trash entry for this session."""


@dataclass(frozen=True)
class TrashItem:
    """One path moved in: relative to the entry's root number `root`."""

    root: int
    rel: str


@dataclass(frozen=True)
class Packing:
    """The entry's archive (trash.packing): its name in the entry, its size,
    and the bytes of the files it holds."""

    name: str
    bytes: int
    original: int

    @classmethod
    def from_json(cls, data: Any) -> Packing:
        """Raises ValueError for a malformed record or a name that is no archive's."""
        name = text(data["name"])
        if name == ENTRY or not valid_name(name):
            raise ValueError(f"not an archive's name: {name!r}")
        return cls(name, whole(data["bytes"]), whole(data["original"]))


@dataclass
class TrashEntry:
    """One trashed session, as its entry.json says."""

    agent: str
    id: str
    parent: str | None
    trashed_at: float
    expires_at: float
    bytes: int
    partial: bool
    roots: dict[int, str]
    items: list[TrashItem]
    last_activity: float | None
    path: Path
    # "<root n>/<rel>" -> (atime_ns, mtime_ns) of each directory on the way to
    # what was moved in, before the first move: restore gives them back.
    dir_times: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Set once its archive is complete and durable: from then on the
    # archive, not roots/, holds what the entry keeps.
    packed: Packing | None = None
    # Why it stays uncompressed (never tried again).
    unpackable: str | None = None
    # What the record of what went says of it (history).
    workspace: str | None = None
    title: str | None = None
    first_activity: float | None = None

    def gone(self, why: str, now: float) -> Gone:
        """Its line of the record of what went, once it is out of the trash
        (`why`: expired, emptied or restored): it can no longer be restored."""
        about = (self.workspace, self.title, self.bytes, self.first_activity, self.last_activity)
        return Gone(now, self.agent, self.id, why, False, *about)

    def save(self) -> None:
        """Write entry.json, atomically and durably."""
        # vars(), not asdict(): its deep copy took 100 times as long.
        doc = dict(vars(self), items=[{"root": i.root, "rel": i.rel} for i in self.items])
        doc["packed"] = None if self.packed is None else vars(self.packed)
        del doc["path"]
        write_json(self.path / ENTRY, doc)

    @classmethod
    def from_json(cls, data: Any, path: Path) -> TrashEntry:
        """Raises ValueError (or TypeError, KeyError) for anything malformed."""
        roots = {int(n): text(root) for n, root in dict(data["roots"]).items()}
        if any(n < 0 or not os.path.isabs(root) for n, root in roots.items()):
            raise ValueError("roots must be absolute paths")
        items = [TrashItem(int(i["root"]), text(i["rel"])) for i in data["items"]]
        if any(i.root not in roots for i in items):
            raise ValueError("an item names an unknown root")
        dir_times = {
            text(rel): (whole(times[0]), whole(times[1]))
            for rel, times in dict(data.get("dir_times", {})).items()
        }
        return cls(
            agent=text(data["agent"]),
            id=text(data["id"]),
            parent=_opt(text, data.get("parent")),
            trashed_at=number(data["trashed_at"]),
            expires_at=number(data["expires_at"]),
            bytes=int(data["bytes"]),
            partial=bool(data["partial"]),
            roots=roots,
            items=items,
            last_activity=_opt(number, data.get("last_activity")),
            path=path,
            dir_times=dir_times,
            packed=_opt(Packing.from_json, data.get("packed")),
            unpackable=_opt(text, data.get("unpackable")),
            workspace=_opt(text, data.get("workspace")),
            title=_opt(text, data.get("title")),
            first_activity=_opt(number, data.get("first_activity")),
        )


T = TypeVar("T")


def _opt(read: Callable[[Any], T], value: Any) -> T | None:
    return None if value is None else read(value)


def text(value: Any) -> str:
    """`value`, a non-empty string, or ValueError."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def whole(value: Any) -> int:
    """`value`, a whole number, or ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def number(value: Any) -> float:
    """`value`, a finite number, as a float, or ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def trash_dir(state_dir: Path) -> Path:
    """`<state>/trash`."""
    return state_dir / "trash"


def entry_dir(state_dir: Path, agent: str, session_id: str) -> Path:
    """Where the session's entry lies (whether or not there is one)."""
    if not valid_name(agent):
        raise ValueError(f"invalid agent name {agent!r}")
    return trash_dir(state_dir) / agent / encode_id(session_id)


def read_entry(path: Path) -> TrashEntry | None:
    """The entry in directory `path`; None (logged) when it is missing,
    unreadable, malformed or does not match the directory it lies in."""
    try:
        entry = TrashEntry.from_json(
            json.loads(fsio.read_regular(path / ENTRY, limit=fsio.SMALL_FILE_LIMIT)), path
        )
    except FileNotFoundError:
        log.warning("trash entry without entry.json skipped", path=str(path))
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("trash entry unreadable, skipped", path=str(path), error=str(exc))
        return None
    if entry.agent != path.parent.name or encode_id(entry.id) != path.name:
        log.warning("trash entry does not match its directory, skipped", path=str(path))
        return None
    return entry


def entry_of(state_dir: Path, agent: str, session_id: str) -> TrashEntry | None:
    """The session's entry, read from its own directory alone."""
    path = entry_dir(state_dir, agent, session_id)
    return read_entry(path) if path.is_dir() and not path.is_symlink() else None


def agent_dirs(state_dir: Path) -> list[Path]:
    """The trash's agent directories (no link, no other name)."""
    try:
        children = sorted(trash_dir(state_dir).iterdir())
    except FileNotFoundError:
        return []
    return [p for p in children if valid_name(p.name) and p.is_dir() and not p.is_symlink()]


def entry_dirs(state_dir: Path) -> Iterator[Path]:
    """Every entry directory (none being discarded), not read."""
    for agent_dir in agent_dirs(state_dir):
        for path in sorted(agent_dir.iterdir()):
            if not path.name.startswith(ASIDE) and path.is_dir() and not path.is_symlink():
                yield path


def list_entries(state_dir: Path) -> list[TrashEntry]:
    """Every readable entry, oldest first; unreadable ones are logged and skipped."""
    entries = [e for e in map(read_entry, entry_dirs(state_dir)) if e is not None]
    return sorted(entries, key=lambda e: (e.trashed_at, e.agent, e.id))
