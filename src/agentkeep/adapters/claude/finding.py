"""One pass over every shared directory, handing what it finds by session id
to a Grouped: each directory is listed once for a scan (for some sessions:
from the cached listings, or by probing their names). Nothing is read here
but jobs' state.json and registry records, which decide whose an entry is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import TypeGuard

import structlog

from agentkeep import disk, fsio
from agentkeep.adapters.base import Known
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
from agentkeep.adapters.claude.grouping import Grouped
from agentkeep.adapters.claude.ids import canonical, spellings_of
from agentkeep.adapters.claude.listing import linked_below, listable, probed
from agentkeep.adapters.claude.listings import Listings
from agentkeep.adapters.claude.reading import read_json
from agentkeep.adapters.claude.registry import (
    alive_pids,
)
from agentkeep.adapters.claude.roots import Layout
from agentkeep.adapters.dirs import entries
from agentkeep.fsio import Entry

log = structlog.get_logger("agentkeep.adapters.claude")


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
    # A linked key is listed only to report what is behind it.
    for key in filter(listable, _entries(listings, str(root.path), found)):
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
    some sessions (`found.only`), those `identify` names as theirs (all
    without `identify`): the known ones where the directory has not changed
    since, else filtered by name as read for a few (`_few`), else from a
    listing reused while the directory's mtime holds."""
    only, unlisted = found.only, found.unlisted
    if only is None:
        return entries(directory, unlisted, follow=False)
    if identify is not None and found.known is not None:
        names = found.known.names_in(directory)
        if names is not None:
            return probed(directory, names, unlisted)
    if _few(only):
        keep = _named_by(only) if identify else None
        return entries(directory, unlisted, keep=keep, follow=False)
    if identify is None:
        return listings.entries(directory, unlisted)
    return listings.named(directory, identify, only, unlisted)


# Listing this many sessions again, or fewer (an event's, a `show`'s),
# probes their names in each config area and filters the other shared
# directories by name as read, keeping nothing (a kept listing would hold
# every session's names in the daemon). More (a prune's batch) look them up
# in listings kept while each directory's mtime holds.
PROBE_AT_MOST = 8


def _few(only: frozenset[str] | None) -> TypeGuard[frozenset[str]]:
    return only is not None and len(only) <= PROBE_AT_MOST


def _named_by(only: frozenset[str]) -> Callable[[str], bool]:
    """Whether a name may be one of `only`'s entries: every per-session name
    Claude writes begins with the id (36 characters, in either case). What
    it keeps is then identified in full."""
    return lambda name: name[:36].lower() in only


def _find_config(listings: Listings, layout: Layout, found: Grouped) -> None:
    spellings = spellings_of(found.only) if _few(found.only) else None
    # A link where a session's entry belongs is that artifact, removed as
    # the link alone; only an area that is itself a link makes its
    # entries linked (reached through a link: never removed).
    for area in AREAS:
        probe = area.probe(spellings)
        listed = _config_entries(listings, layout, area.path, found, probe, area.identify)
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
        listing = probed(directory, probe, found.unlisted)
    else:
        listing = _entries(listings, directory, found, identify)
    return ((entry, linked) for entry in listing)


def _find_jobs(listings: Listings, layout: Layout, found: Grouped) -> None:
    probe = None if found.only is None else [s[:8] for s in spellings_of(found.only)]
    for entry, linked in _config_entries(listings, layout, "jobs", found, probe):
        if not (entry.dir or entry.link) or not JOB_NAME.fullmatch(entry.name):
            continue
        state_path = os.path.join(entry.path, "state.json")
        state = read_json(state_path)
        if not isinstance(state, dict):
            # Whose it is cannot be told: the sessions it may be are kept.
            if (why := fsio.denied(state_path)) is not None:
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
    """The registry files naming the sessions (every one for a scan), and
    their key files, from the registry as `listings` keeps it."""
    directory = layout.config.path / "sessions"
    registry = listings.registry(str(directory), alive_pids(), found.unlisted)
    if registry is None:
        return
    linked = bool(layout.config.problem) or disk.is_link(directory)
    for sid in registry.pids_of if found.only is None else found.only:
        for pid in sorted(registry.pids_of.get(sid, ())):
            found.add(sid, registry.files[pid].path, REGISTRY, layout.config, linked)
            for key in registry.keys.get(pid, []):
                found.add(sid, key.path, REGISTRY_KEY, layout.config, linked)


def _find_tmp(listings: Listings, layout: Layout, found: Grouped) -> None:
    for root in layout.tmp:
        for key in filter(listable, _entries(listings, str(root.path), found)):
            for entry in _entries(listings, key.path, found, canonical):
                linked = bool(root.problem) or key.link
                found.add(canonical(entry.name), entry.path, TMP, root, linked)
