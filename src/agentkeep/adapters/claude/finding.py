"""One pass over every shared directory, grouping what it finds by session
id: each directory is listed once for a scan (or, for some sessions, from
the cached listings or by probing their names). Nothing is measured or
read here beyond jobs' state.json and registry records, which decide whose
an entry is. A directory that cannot be listed is named in every session
that could have an entry there (Reach), which is then kept unsafe."""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import TypeGuard

import structlog

from agentkeep import disk
from agentkeep.adapters.base import Known, Root
from agentkeep.adapters.claude.artifacts import (
    AREAS,
    JOB,
    JOB_NAME,
    REGISTRY,
    REGISTRY_KEY,
    TMP,
    TRANSCRIPT,
    project_entry,
    project_id,
)
from agentkeep.adapters.claude.ids import canonical, spellings_of
from agentkeep.adapters.claude.listing import Entry, linked_below, list_entries, listable
from agentkeep.adapters.claude.listings import Listings
from agentkeep.adapters.claude.reading import read_json
from agentkeep.adapters.claude.registry import (
    REGISTRY_KEY_NAME,
    REGISTRY_NAME,
    alive_pids,
    registry_id,
)
from agentkeep.adapters.claude.roots import Layout
from agentkeep.adapters.dirs import Unlisted
from agentkeep.spool import Spool

# One logger for the whole adapter, named as it always was.
log = structlog.get_logger("agentkeep.adapters.claude")

# One artifact found by name, before it is measured: (path, kind, root,
# linked, primary, foreign). A tuple: a big scan finds some 300,000 and pickles them
# over to worker processes, and a tuple is built and pickled several times
# faster than a dataclass.
Item = tuple[str, str, str, bool, bool, bool]
# One session found: (id, its items, the parent its job names, the places
# that could not be listed where it could have entries).
FoundSession = tuple[str, list[Item], str | None, tuple[str, ...]]


class Reach:
    """Which sessions a directory that cannot be listed may hold entries
    of. A project's key dir (`projects/<key>/`, `<tmp>/<key>/`): the
    sessions found in that project's dirs, and those whose project cannot
    be told (no transcript was found: it may be the one that cannot be
    seen); a session whose transcript lies in another project's readable
    dir is that project's (Claude keeps a session in the project it
    started in). A job dir whose state.json cannot be read: the sessions
    whose ids begin with its name. Anything else (projects/ itself, a
    config area, jobs/, sessions/, a tmp root): every session."""

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
        places = list(self.every)
        places += [path for path, prefix in self.prefixes if sid.startswith(prefix)]
        if self.projects:
            told = any(item[4] for item in items)
            dirs = {os.path.dirname(item[0]) for item in items}
            places += [path for path, keyed in self.projects if not told or dirs & keyed]
        return tuple(sorted(places))


# A scan holds what it found of every session until it has looked in every
# directory: a session's files lie in many. Past SPOOL_AT items (some 300
# bytes each) they wait on disk instead (_Spool), read back a sixteenth at
# a time: held, a scan of 50,000 sessions' items were some 100 MB of its peak.
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
        return iter(self.spools.get(first, ()))

    def close(self) -> None:
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
        self.layout = layout
        self.only = only
        self.known = known
        # What could not be listed; whom it reaches is told once all is found.
        self.unlisted = Unlisted()
        self._reach: Reach | None = None
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
            self._reach = Reach(self.layout, self.unlisted)
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


def find(
    listings: Listings, layout: Layout, only: frozenset[str] | None, known: Known | None = None
) -> Grouped:
    """Every session's artifacts by name (only those of `only` when given,
    sparing the directories `known` says are unchanged)."""
    found = Grouped(layout, only, known)
    _find_projects(listings, layout, found)
    _find_config(listings, layout, found)
    _find_jobs(listings, layout, found)
    _find_registry(listings, layout, found)
    _find_tmp(listings, layout, found)
    return found


def _find_projects(listings: Listings, layout: Layout, found: Grouped) -> None:
    root = layout.projects
    base_linked = bool(root.problem) or disk.is_link(root.path)
    for key in _entries(listings, str(root.path), found):
        # A linked key is listed only to report what is behind it.
        if not listable(key):
            continue
        linked = base_linked or key.link
        for entry in _entries(listings, key.path, found, project_id):
            named = project_entry(entry.name)
            if named is None:
                continue
            sid, kind = named
            found.add(sid, entry.path, kind, root, linked, primary=kind == TRANSCRIPT)


def _entries(
    listings: Listings,
    directory: str,
    found: Grouped,
    identify: Callable[[str], str | None] | None = None,
) -> list[Entry]:
    """A directory's entries: all of them, freshly listed, for a scan; for
    some sessions (`found.only`), those whose names `identify` as one of
    them (all when no `identify`): the known ones where the directory has
    not changed since they were known, else filtered by name as they are
    read for a few sessions (`_few`), else from a listing reused while the
    directory's mtime holds."""
    only, unlisted = found.only, found.unlisted
    if only is None:
        return list_entries(directory, None, unlisted=unlisted)
    if identify is not None and found.known is not None:
        names = found.known.names_in(directory)
        if names is not None:
            return list_entries(directory, names, unlisted=unlisted)
    if _few(only):
        keep = _named_by(only) if identify else None
        return list_entries(directory, None, keep, unlisted=unlisted)
    if identify is None:
        return listings.entries(directory, unlisted)
    return listings.named(directory, identify, only, unlisted)


# Listing this many sessions again, or fewer (an event's, a `show`'s),
# probes their names in each config area, and filters the other shared
# directories by name as they are read, keeping nothing: a listing kept
# for them held the names of every session of the agent's in the daemon
# (at 50,000 sessions, 48 MB after one event). More (a prune's batch) look
# them up in the directory's listing, kept while its mtime holds (and
# forgotten after the prune): a probe per spelling per area per session,
# or a pass over every directory per batch, cost more than the rest of a
# prune's check.
PROBE_AT_MOST = 8


def _few(only: frozenset[str] | None) -> TypeGuard[frozenset[str]]:
    return only is not None and len(only) <= PROBE_AT_MOST


def _named_by(only: frozenset[str]) -> Callable[[str], bool]:
    """Whether a name may be one of `only`'s entries: every per-session name
    Claude writes begins with the id (a canonical id is 36 characters,
    lowercase; the name may spell it uppercase). What it keeps is then
    identified in full."""
    return lambda name: name[:36].lower() in only


def _find_config(listings: Listings, layout: Layout, found: Grouped) -> None:
    spellings = spellings_of(found.only) if _few(found.only) else None
    # A link where a session's entry belongs is that artifact, removed as
    # the link alone; only an area that is itself a link makes its
    # entries linked (reached through a link: never removed).
    for area in AREAS:
        listed = _config_entries(
            listings, layout, area.path, found, area.probe(spellings), area.identify
        )
        for entry, linked in listed:
            found.add(area.identify(entry.name), entry.path, area.kind, layout.config, linked)


def _config_entries(
    listings: Listings,
    layout: Layout,
    area: str,
    found: Grouped,
    probe: Sequence[str] | None = None,
    identify: Callable[[str], str | None] | None = None,
) -> Iterator[tuple[Entry, bool]]:
    """Entries of `<config>/<area>`, each with whether it lies behind a
    link (the area itself is one) or on an unsafe root: those named in
    `probe`, else as _entries() finds them."""
    directory = str(layout.config.path / area)
    linked = bool(layout.config.problem) or linked_below(layout.config.path, area)
    if probe is not None:
        listing = list_entries(directory, probe, unlisted=found.unlisted)
    else:
        listing = _entries(listings, directory, found, identify)
    for entry in listing:
        yield entry, linked


def _find_jobs(listings: Listings, layout: Layout, found: Grouped) -> None:
    spellings = None if found.only is None else spellings_of(found.only)
    probe = None if spellings is None else [s[:8] for s in spellings]
    for entry, linked in _config_entries(listings, layout, "jobs", found, probe):
        if not (entry.dir or entry.link) or not JOB_NAME.fullmatch(entry.name):
            continue
        state_path = os.path.join(entry.path, "state.json")
        state = read_json(state_path)
        if not isinstance(state, dict):
            # Whose it is cannot be told: the sessions it may be are kept.
            if (why := disk.denied(state_path)) is not None:
                found.unlisted.add(entry.path, why)
            log.debug("job without a readable state.json", path=entry.path)
            continue
        sid = canonical(state.get("sessionId"))
        # Another session can share the 8-char prefix: only state.json decides.
        if sid is None or sid[:8] != entry.name.lower():
            log.debug("job not named by its state.json", path=entry.path)
            continue
        found.add(sid, entry.path, JOB, layout.config, linked)
        parent = canonical(state.get("forkParentSessionId"))
        if parent is not None and parent != sid:
            found.job_parents.setdefault(sid, parent)


def _find_registry(listings: Listings, layout: Layout, found: Grouped) -> None:
    if found.only is not None:
        _find_registered(listings, layout, found, found.only)
        return
    by_pid: dict[str, str] = {}
    keys: list[tuple[Entry, bool, str]] = []
    for entry, linked in _config_entries(listings, layout, "sessions", found):
        if match := REGISTRY_NAME.fullmatch(entry.name):
            sid = registry_id(read_json(entry.path))
            if sid is not None:
                by_pid[match["pid"]] = sid
                found.add(sid, entry.path, REGISTRY, layout.config, linked)
        elif match := REGISTRY_KEY_NAME.fullmatch(entry.name):
            keys.append((entry, linked, match["pid"]))
    for entry, linked, pid in keys:
        found.add(by_pid.get(pid), entry.path, REGISTRY_KEY, layout.config, linked)


def _find_registered(
    listings: Listings, layout: Layout, found: Grouped, sids: frozenset[str]
) -> None:
    """The registry files naming the sessions, from the cached registry."""
    directory = layout.config.path / "sessions"
    registry = listings.registry(str(directory), alive_pids(), found.unlisted)
    if registry is None:
        return
    linked = bool(layout.config.problem) or disk.is_link(directory)
    for sid in sids:
        for pid in sorted(registry.pids_of.get(sid, ())):
            found.add(sid, registry.files[pid].path, REGISTRY, layout.config, linked)
            for key in registry.keys.get(pid, []):
                found.add(sid, key.path, REGISTRY_KEY, layout.config, linked)


def _find_tmp(listings: Listings, layout: Layout, found: Grouped) -> None:
    for root in layout.tmp:
        for key in _entries(listings, str(root.path), found):
            if not listable(key):
                continue
            for entry in _entries(listings, key.path, found, canonical):
                linked = bool(root.problem) or key.link
                found.add(canonical(entry.name), entry.path, TMP, root, linked)
