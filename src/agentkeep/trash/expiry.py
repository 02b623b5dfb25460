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
from agentkeep.errors import RemovalError
from agentkeep.history import Record
from agentkeep.leases import LeaseError, take_session
from agentkeep.trash.entries import (
    ASIDE,
    TrashEntry,
    agent_dirs,
    list_entries,
    read_entry,
    trash_dir,
)

log = structlog.get_logger("agentkeep.trash")

# Why an entry left the trash, in the record of what went.
EXPIRED, EMPTIED = "expired", "emptied"


def discard(path: Path) -> None:
    """Remove an entry directory: renamed aside first, so it stops being an
    entry at once, then removed link-safely; leftovers go next expire."""
    aside = f"{ASIDE}{path.name}~{os.getpid()}~{time.time_ns()}"
    os.rename(path, path.parent / aside)
    remove_aside(path.parent, aside)


def remove_aside(agent_dir: Path, name: str) -> None:
    # Imported here: a scan reads the trash's restore times, and only
    # expiry, emptying and restore remove.
    from agentkeep.rmtree import remove_tree_at

    try:
        residual = remove_tree_at(agent_dir, name)
    except RemovalError as exc:
        log.warning("trash entry not fully removed", path=str(agent_dir / name), error=str(exc))
        return
    if residual:
        log.warning("trash entry left residue", path=str(agent_dir / name), residual=residual)


class Expiry:
    """The trash's expiry: run() removes every entry whose time is up, each
    under its session's lease held exclusively (a held session's entry
    waits for the next run). Run again and again (by each prune, by the
    daemon hourly), a run that can find nothing due reads no entry: reading
    each entry of a trash of 3,000 sessions cost 0.7 CPU-s, so a trash of
    50,000 cost the daemon some 0.2 CPU-s a minute while nothing happened.
    It keeps the soonest expiry of the entries it last read, and the mtimes
    of the trash's directories before it read them: an entry added or
    removed moves its agent directory's mtime. An entry written again in
    place (a session trashed again before its entry expired) only moves its
    expiry later, unless the trash was set shorter meanwhile: it then waits
    at most until the soonest expiry known."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._known: tuple[dict[str, int | None], float] | None = None

    def run(self, now: float) -> list[TrashEntry]:
        # Taken before the entries are read: a change meanwhile shows next
        # time, as does one in a directory signed None (disk.signed: its
        # mtime too recent to vouch that it will not change unseen).
        mtimes, signature = self._signature()
        if self._known is not None and self._known[0] == mtimes and now < self._known[1]:
            return []
        entries = list_entries(self.state_dir)
        expired = _discard_due(self.state_dir, entries, lambda e: e.expires_at <= now, [], EXPIRED)
        gone = {(e.agent, e.id) for e in expired}
        left = [e.expires_at for e in entries if (e.agent, e.id) not in gone]
        self._known = (signature, min(left, default=math.inf))
        return expired

    def _signature(self) -> tuple[dict[str, int | None], dict[str, int | None]]:
        return disk.signed([trash_dir(self.state_dir), *agent_dirs(self.state_dir)])

    def known(self) -> list[Any] | None:
        """What the last read found, as JSON: for a prune in a process of
        its own to start from (daemon.child), and to hand back."""
        return None if self._known is None else [self._known[0], self._known[1]]

    def trust(self, known: list[Any] | None) -> None:
        """Start from `known` (from known(), here or in another process).
        Sound whatever its age: it is used only while the trash's mtimes
        are still the ones it was read with."""
        self._known = None if known is None else (dict(known[0]), float(known[1]))


@dataclass
class Emptied:
    removed: list[TrashEntry]
    held: list[TrashEntry]


def empty(state_dir: Path, *, trashed_before: float | None = None) -> Emptied:
    """Remove every entry now (`agentkeep trash --empty`), or those trashed
    before `trashed_before`, under the session's lease like expiry: an entry
    whose lease is held stays (in `held`)."""
    held: list[TrashEntry] = []
    due: Callable[[TrashEntry], bool] = (
        (lambda e: True) if trashed_before is None else (lambda e: e.trashed_at < trashed_before)
    )
    return Emptied(_discard_due(state_dir, list_entries(state_dir), due, held, EMPTIED), held)


def _discard_due(
    state_dir: Path,
    entries: list[TrashEntry],
    due: Callable[[TrashEntry], bool],
    held: list[TrashEntry],
    why: str,
) -> list[TrashEntry]:
    """Remove each of `entries` that `due` says, under its session's lease,
    each then in the record of what went (`why` it went: expired or
    emptied); `held` collects those whose lease someone holds."""
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
                remove_aside(agent_dir, path.name)
    record.summary()
    return expired
