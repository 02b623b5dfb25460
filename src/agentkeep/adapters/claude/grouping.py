"""What one pass over the shared directories finds, grouped by session id,
held (past SPOOL_AT items, spooled to disk) until every directory has been
looked in, then handed over session by session in the order of the ids, and
measured into Sessions (in a worker process for a big home). A directory
that could not be listed reaches the sessions that could have an entry
there (_Reach): they are then kept unsafe."""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import structlog

from agentkeep.adapters.base import Known, Root
from agentkeep.adapters.claude.ids import AGENT
from agentkeep.adapters.claude.roots import Layout
from agentkeep.adapters.claude.transcripts import lineage
from agentkeep.adapters.dirs import Unlisted, measured, unreadable
from agentkeep.model import Session
from agentkeep.spool import Spool

log = structlog.get_logger("agentkeep.adapters.claude")

# One artifact found by name, before it is measured: (path, kind, root,
# linked, primary, foreign). A tuple: a big scan pickles hundreds of
# thousands to worker processes, and a tuple is built and pickled faster.
Item = tuple[str, str, str, bool, bool, bool]
# One session found: (id, its items, the parent its job names, the places
# that could not be listed where it could have entries).
FoundSession = tuple[str, list[Item], str | None, tuple[str, ...]]


class _Reach:
    """Which sessions a directory that cannot be listed may hold entries
    of. A project's key dir (`projects/<key>/`, `<tmp>/<key>/`): the
    sessions found in that project's dirs, and those whose project cannot
    be told (no transcript found: it may be the one not seen). A job dir
    whose state.json cannot be read: the sessions whose ids begin with its
    name. Anything else: every session."""

    def __init__(self, layout: Layout, unlisted: Unlisted) -> None:
        tmp = [str(root.path) for root in layout.tmp]
        projects, jobs = str(layout.projects.path), str(layout.config.path / "jobs")
        self.every: list[str] = []
        self.projects: list[tuple[str, frozenset[str]]] = []
        self.prefixes: list[tuple[str, str]] = []
        for path in unlisted:
            parent, name = os.path.split(path)
            if parent == projects or parent in tmp:
                dirs = frozenset([os.path.join(projects, name)] + [f"{t}/{name}" for t in tmp])
                self.projects.append((path, dirs))
            elif parent == jobs:
                self.prefixes.append((path, name.lower()))
            else:
                self.every.append(path)

    def of(self, sid: str, items: list[Item]) -> tuple[str, ...]:
        """The unlisted places that may hold entries of `sid`, found with `items`."""
        places = list(self.every)
        places += [path for path, prefix in self.prefixes if sid.startswith(prefix)]
        if self.projects:
            told = any(item[4] for item in items)
            dirs = {os.path.dirname(item[0]) for item in items}
            places += [path for path, keyed in self.projects if not told or dirs & keyed]
        return tuple(sorted(places))


# A scan holds what it found of every session until it has looked in every
# directory: past SPOOL_AT items (some 300 bytes each) they wait on disk,
# read back a sixteenth at a time.
SPOOL_AT = 20_000
# Items written to the spool at a time.
_FLUSH = 2_000


class _Spool:
    """Items in a Spool for each first character of their sessions' ids (a
    hex digit), each session's in the order they were found: read back one
    at a time, in the order of the ids, a sixteenth of them is held at once."""

    def __init__(self) -> None:
        self.spools: dict[str, Spool[tuple[str, Item]]] = {}

    def put(self, items: list[tuple[str, Item]]) -> list[tuple[str, Item]]:
        """Write `items`; those that could not be written (a full disk) are
        handed back, and are the last of their sessions' in the spools."""
        by_first: dict[str, list[tuple[str, Item]]] = defaultdict(list)
        for sid, item in items:
            by_first[sid[:1]].append((sid, item))
        left: list[tuple[str, Item]] = []
        for first, batch in by_first.items():
            if not left:
                try:
                    self.spools.setdefault(first, Spool()).write(batch)
                    continue
                except OSError as exc:
                    log.warning("a scan's findings are held in memory", error=str(exc))
            left += batch
        return left

    def read(self, first: str) -> Iterator[tuple[str, Item]]:
        """The items of the sessions whose ids begin with `first`."""
        return iter(self.spools.get(first, ()))

    def close(self) -> None:
        """Drop every spool."""
        for spool in self.spools.values():
            spool.close()
        self.spools = {}


class Grouped:
    """What one pass found, grouped by session id (only those in `only`
    when it is given); a scan's past SPOOL_AT items in a _Spool. What the
    spool cannot take (a full disk) and all that comes after is held."""

    def __init__(
        self, layout: Layout, only: frozenset[str] | None, known: Known | None = None
    ) -> None:
        self.layout, self.only, self.known = layout, only, known
        # What could not be listed; whom it reaches is told once all is found.
        self.unlisted = Unlisted()
        self._reach: _Reach | None = None
        self.found: dict[str, dict[str, Item]] = defaultdict(dict)
        self.job_parents: dict[str, str] = {}
        self._held = 0
        self._spool: _Spool | None = None
        # Items for the spool, while new ones go there.
        self._pending: list[tuple[str, Item]] = []
        self._spooling = False

    def add(
        self, sid: str | None, path: str, kind: str, root: Root, linked: bool, primary: bool = False
    ) -> None:
        """One entry found, of session `sid` (None: of no session, dropped)."""
        if sid is None or (self.only is not None and sid not in self.only):
            return
        foreign = root.problem is not None  # another user's root: not our activity
        item = (path, kind, str(root.path), linked, primary, foreign)
        if self._spooling:
            self._pending.append((sid, item))
            if len(self._pending) >= _FLUSH:
                self._flush()
            return
        self.found[sid].setdefault(path, item)
        self._held += 1
        if self._held > SPOOL_AT and self.only is None and self._spool is None:
            self._spill()

    def _spill(self) -> None:
        """Move what is held to a new spool, and what comes next after it."""
        self._spool = _Spool()
        found = self.found.items()
        self._pending = [(sid, item) for sid, items in found for item in items.values()]
        self.found = defaultdict(dict)
        self._spooling = True
        self._flush()

    def _flush(self) -> None:
        assert self._spool is not None
        left = self._spool.put(self._pending)
        self._pending = []
        if left:
            self._spooling = False
            for sid, item in left:
                self.found[sid].setdefault(item[0], item)

    def take(self, sid: str) -> FoundSession:
        """What was found of `sid`, handed over (and forgotten here)."""
        return self._found(sid, list(self.found.pop(sid, {}).values()))

    def _found(self, sid: str, items: list[Item]) -> FoundSession:
        if self._reach is None:
            self._reach = _Reach(self.layout, self.unlisted)
        return sid, items, self.job_parents.get(sid), self._reach.of(sid, items)

    def parts(self, size: int) -> Iterator[list[FoundSession]]:
        """Everything found, handed over `size` sessions at a time in the
        order of their ids, each path once (as first found: the spool's
        before what is held)."""
        if self._pending:
            self._flush()
        spool = self._spool or _Spool()
        held: dict[str, list[str]] = defaultdict(list)
        for sid in self.found:
            held[sid[:1]].append(sid)
        part: list[FoundSession] = []
        try:
            for first in sorted(held.keys() | spool.spools.keys()):
                grouped: dict[str, dict[str, Item]] = defaultdict(dict)
                for sid, item in spool.read(first):
                    grouped[sys.intern(sid)].setdefault(item[0], item)
                for sid in held[first]:
                    items = grouped[sid]
                    for path, item in self.found.pop(sid).items():
                        items.setdefault(path, item)
                for sid in sorted(grouped):
                    part.append(self._found(sid, list(grouped.pop(sid).values())))
                    if len(part) == size:
                        yield part
                        part = []
            if part:
                yield part
        finally:
            spool.close()
            self._spool = None


def measure(
    sid: str, found: list[Item], job_parent: str | None, unlisted: tuple[str, ...]
) -> Session | None:
    """What was found of a session, measured (its transcripts first, each
    inode counted once); None when all of it vanished meanwhile. `unlisted`:
    the places that could not be listed where it could have entries (_Reach)."""
    items = sorted(found, key=lambda f: (not f[4], f[0]))
    artifacts = measured(items)
    if not artifacts:
        return None
    workspace, parent = lineage(sid, [item[0] for item in items if item[4]])
    return Session(
        agent=AGENT,
        id=sid,
        workspace=workspace,
        parent=parent or job_parent,
        artifacts=artifacts,
        bytes=sum(a.bytes for a in artifacts),
        unreadable=unreadable(artifacts, unlisted),
    )


@dataclass(frozen=True)
class Measuring:
    """A scan part: sessions one listing found, measured where it runs."""

    found: list[FoundSession]

    def __call__(self) -> Iterator[Session]:
        return (s for what in self.found if (s := measure(*what)) is not None)
