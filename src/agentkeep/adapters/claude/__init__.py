"""Claude Code: sessions under its config root (transcripts always in
`<config>/projects`) and its tmp roots (FIELD-NOTES.md "Claude Code"). Only a
name that carries the session's id is its artifact; everything else there is
shared. A scan lists each directory once and groups what it finds by id;
listing a few sessions probes their names. Listings and reads never move
atimes, and only a transcript's head is read.

The modules: roots (where), artifacts (what an id names), ids, listing and
reading, listings (the cache of shared directories), registry (the live
sessions), finding and grouping (a scan), transcripts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from agentkeep import fsio
from agentkeep.adapters.base import Adapter, Known, Root, ScanPart, Split, each_session
from agentkeep.adapters.claude import roots as claude_roots
from agentkeep.adapters.claude.artifacts import (
    REGISTRY,
    TRANSCRIPT,
    WATCHED_AREAS,
    config_path_id,
    project_path_id,
)
from agentkeep.adapters.claude.finding import find
from agentkeep.adapters.claude.grouping import Measuring, measure
from agentkeep.adapters.claude.ids import AGENT, UUID, canonical
from agentkeep.adapters.claude.listing import listable
from agentkeep.adapters.claude.listings import Listings
from agentkeep.adapters.claude.registry import registry_holders
from agentkeep.adapters.claude.roots import Layout, Paths, below
from agentkeep.adapters.claude.transcripts import TRANSCRIPT_HEAD, described
from agentkeep.adapters.dirs import entries, root_problem
from agentkeep.model import Described, Holder, Session
from agentkeep.processes import ProcessTable

__all__ = ["ADAPTER", "SCAN_PART", "TRANSCRIPT_HEAD", "ClaudeAdapter"]

# Sessions per scan part: its hand-over to a child is small beside its
# measuring, and a spread scan holds only the parts handed out ahead. Read
# by split() at every scan (tests set it on this module).
SCAN_PART = 250


class ClaudeAdapter(Adapter):
    """Claude Code's sessions."""

    name = AGENT
    evidence_kinds = frozenset({REGISTRY})
    # A UUID in either spelling, wherever it stands in a name.
    id_in_name = UUID

    # -- where ----------------------------------------------------------
    @cached_property
    def _paths(self) -> Paths:
        # Env never changes, so neither do the paths; root problems do, and
        # are checked afresh by every _layout().
        return claude_roots.paths(self.env)

    def _layout(self, check: bool = True) -> Layout:
        """Every root; `check` computes each root's problem (path lookups,
        which only map names, skip it)."""
        problem = (lambda path: root_problem(self.env, path)) if check else None
        return claude_roots.layout(self._paths, problem)

    def roots(self) -> list[Root]:
        """Its config root, `<config>/projects` and its tmp roots."""
        layout = self._layout()
        return [layout.config, layout.projects, *layout.tmp]

    def watch_dirs(self) -> list[Path]:
        """The named dirs that exist (os.path.isdir: Path.is_dir raises
        below a directory we may not search)."""
        return [d for d in self._named_dirs() if os.path.isdir(d)]

    def listed_dirs(self) -> list[Path]:
        """The directories whose entries name sessions, there or not, and
        the config areas' parents (usage-data/)."""
        config = self._paths.config
        return [*self._named_dirs(), *{(config / area).parent for area in WATCHED_AREAS}]

    def _named_dirs(self) -> list[Path]:
        """Every directory whose entries name sessions, there or not."""
        layout = self._layout(check=False)
        config, projects = layout.config.path, layout.projects.path
        dirs = [config, projects]
        dirs += [Path(e.path) for e in entries(str(projects), follow=False) if listable(e)]
        dirs += [config / area for area in WATCHED_AREAS]
        for root in layout.tmp:
            dirs.append(root.path)
            dirs += [Path(e.path) for e in entries(str(root.path), follow=False) if listable(e)]
        return list(dict.fromkeys(dirs))

    # -- what -----------------------------------------------------------
    def canonical_id(self, raw: str) -> str | None:
        """ids.canonical."""
        return canonical(raw)

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """A scan in parts (split()); some sessions in one pass over the
        shared directories, their listings kept in `known`'s memo for the
        next pass of the same piece of work."""
        if names is None:
            yield from (session for part in _Split(self).parts() for session in part())
            return
        listings = known.memo(Listings) if known is not None else Listings()
        found = find(listings, self._layout(), names, known)
        yield from each_session(names, lambda sid: measure(*found.take(sid)))

    def session_for_path(self, path: str) -> str | None:
        """Below each root as given first (as watched paths are), then
        resolved (a syscall per component)."""
        layout = self._layout(check=False)
        path = os.path.abspath(path)
        for resolve in (False, True):
            parts = below(path, layout.projects.path, resolve)
            if parts is not None:
                return project_path_id(parts)
            parts = below(path, layout.config.path, resolve)
            if parts is not None:
                return config_path_id(layout, parts)
            for root in layout.tmp:
                parts = below(path, root.path, resolve)
                if parts is not None:
                    return canonical(parts[1]) if len(parts) >= 2 else None
        return None

    def describe(self, session: Session) -> Described:
        """transcripts.described of its own transcripts."""
        return described(
            [a.path for a in session.artifacts if a.kind == TRANSCRIPT and not a.linked]
        )

    # -- in use ---------------------------------------------------------
    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """Command lines naming the id in either spelling, and registry files
        naming the session whose process is alive and not a reused pid. The
        registry is evidence of use, never of disuse (/clear and --continue
        leave it naming the wrong id)."""
        registry = [a.path for a in session.artifacts if a.kind == REGISTRY]
        holders = procs.naming(session.id, session.id.upper())
        return holders + [h for p in registry for h in registry_holders(p, session.id, procs)]

    def split(self) -> Split:
        """One listing, measured SCAN_PART sessions at a time."""
        return _Split(self)


@dataclass(frozen=True)
class _Split:
    """One listing of every shared directory, then the measuring of what it
    found in parts of SCAN_PART sessions."""

    adapter: ClaudeAdapter

    def expected(self) -> int:
        """The transcripts in the key dirs, counted by name alone."""
        keys = filter(listable, entries(str(self.adapter._paths.projects), follow=False))
        # One that cannot be listed counts none: the scan logs it.
        return sum(n.endswith(".jsonl") for key in keys for n in fsio.entry_names(key.path))

    def parts(self) -> Iterator[ScanPart]:
        """Measurings of SCAN_PART sessions each."""
        return map(Measuring, find(Listings(), self.adapter._layout(), None).parts(SCAN_PART))


ADAPTER = ClaudeAdapter
