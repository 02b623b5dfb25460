"""The trash's expiry and `trash --empty`: entries whose time is up (or all
of them) are discarded, each under its session's lease held exclusively
(leases.take_session), so that they never race a restore or a prune of it."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep import disk
from agentkeep.history import Record
from agentkeep.leases import LeaseError, take_session
from agentkeep.trash.entries import (
    ASIDE,
    TrashEntry,
    TrashError,
    agent_dirs,
    list_entries,
    read_entry,
    trash_dir,
)
from agentkeep.trash.packing import remove_tree

log = structlog.get_logger("agentkeep.trash")

# Why an entry left the trash, in the record of what went.
EXPIRED, EMPTIED = "expired", "emptied"


def discard(path: Path) -> None:
    """Remove an entry directory: renamed aside first, so it stops being an
    entry at once, then removed link-safely; leftovers go next expire."""
    aside = f"{ASIDE}{path.name}~{os.getpid()}~{time.time_ns()}"
    os.rename(path, path.parent / aside)
    _remove_aside(path.parent, aside)


def _remove_aside(agent_dir: Path, name: str) -> None:
    try:
        remove_tree(agent_dir, name)
    except TrashError as exc:
        log.warning("trash entry not fully removed", error=str(exc))


class Expiry:
    """The trash's expiry: run() removes every entry whose time is up, each
    under its session's leases (a held one waits for the next run). A run
    that can find nothing due reads no entry: it keeps the soonest expiry it
    last read and the mtimes of the trash's directories before it read them
    (an entry added or removed moves its agent directory's mtime; one
    written again in place only moves its expiry later, or, with the trash
    set shorter meanwhile, waits at most until the soonest expiry known)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._known: tuple[dict[str, int | None], float] | None = None

    def run(self, now: float) -> list[TrashEntry]:
        """Remove the entries due at `now`; those removed."""
        # Taken before the entries are read: a change meanwhile shows next
        # time, as does one in a directory signed None (disk.signed: its
        # mtime too recent to vouch that it will not change unseen).
        mtimes, signature = disk.signed([trash_dir(self.state_dir), *agent_dirs(self.state_dir)])
        if self._known is not None and self._known[0] == mtimes and now < self._known[1]:
            return []
        entries = list_entries(self.state_dir)
        expired = _discard_due(self.state_dir, entries, lambda e: e.expires_at <= now, [], EXPIRED)
        gone = {(e.agent, e.id) for e in expired}
        left = [e.expires_at for e in entries if (e.agent, e.id) not in gone]
        self._known = (signature, min(left, default=math.inf))
        return expired

    def known(self) -> list[Any] | None:
        """What the last read found, as JSON, for trust() in another process."""
        return None if self._known is None else [self._known[0], self._known[1]]

    def trust(self, known: list[Any] | None) -> None:
        """Start from `known` (from known()): sound whatever its age, as it is
        used only while the trash's mtimes are the ones it was read with."""
        self._known = None if known is None else (dict(known[0]), float(known[1]))


@dataclass
class Emptied:
    """What `trash --empty` removed, and the entries kept as held."""

    removed: list[TrashEntry]
    held: list[TrashEntry]


def empty(state_dir: Path, *, trashed_before: float | None = None) -> Emptied:
    """Remove every entry now (`agentkeep trash --empty`), or those trashed
    before `trashed_before`, under the session's lease like expiry: an entry
    whose lease is held stays (in `held`)."""
    held: list[TrashEntry] = []

    def due(e: TrashEntry) -> bool:
        return trashed_before is None or e.trashed_at < trashed_before

    return Emptied(_discard_due(state_dir, list_entries(state_dir), due, held, EMPTIED), held)


def _discard_due(
    state_dir: Path,
    entries: list[TrashEntry],
    due: Callable[[TrashEntry], bool],
    held: list[TrashEntry],
    why: str,
) -> list[TrashEntry]:
    """Remove each of `entries` that is `due`, under its session's leases,
    into the record of what went (`why`); `held` collects the held ones."""
    record = Record(state_dir)
    expired: list[TrashEntry] = []
    for entry in entries:
        if not due(entry):
            continue
        try:
            taken = take_session(state_dir, entry.agent, entry.id)
        except LeaseError:
            continue
        if isinstance(taken, str):
            log.info("trash entry held, kept", agent=entry.agent, id=entry.id)
            held.append(entry)
            continue
        try:
            # Read again under the lease: a restore may have taken it meanwhile.
            current = read_entry(entry.path) if entry.path.is_dir() else None
            if current is None or not due(current):
                continue
            try:
                discard(current.path)
            except OSError as exc:
                log.warning("trash entry cannot be removed", path=str(current.path), error=str(exc))
                continue
            taken.discard()  # the session is gone for good: its lease file too
            expired.append(current)
            record.add(current.gone(why, time.time()))
        finally:
            taken.release()
    for agent_dir in agent_dirs(state_dir):
        for path in agent_dir.iterdir():
            if path.name.startswith(ASIDE):
                _remove_aside(agent_dir, path.name)
    record.summary()
    return expired
