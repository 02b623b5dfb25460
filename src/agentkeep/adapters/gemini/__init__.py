"""Gemini CLI: sessions under `$GEMINI_CLI_HOME/.gemini/tmp/<project>/`.

`<project>` is the workspace's base name (`alpha`, `alpha-1`, ...; mapped
in `projects.json`), a sha256 of its path in older versions. What names a
session in a project dir is in gemini.layout (the set Gemini's own
`utils/sessionOperations.ts` removes); its chats are primary, and its update
time is its chat's last `lastUpdated` (gemini.chats). The workspace is
`tmp/<project>/.project_root`, else what `projects.json` maps the project to,
else a field of the chat. A project dir that cannot be listed, or a chat
whose id cannot be read, keeps every session of that project unsafe.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from agentkeep import disk
from agentkeep.adapters.base import Adapter, Known, Root, each_session, session_of
from agentkeep.adapters.dirs import Unlisted, entries, root_problem, unreadable
from agentkeep.adapters.gemini.chats import (
    CHAT_HEAD,
    TAIL_LIMIT,
    UUID,
    Facts,
    canonical_id,
    described,
    project_root,
    workspaces,
)
from agentkeep.adapters.gemini.layout import AREAS, CHAT, NOT_PROJECTS, layout, path_id
from agentkeep.model import Artifact, Described, Session

__all__ = ["ADAPTER", "CHAT_HEAD", "TAIL_LIMIT", "GeminiAdapter"]


@dataclass
class _Found(Facts):
    """One session's share of one project (its chats' facts merged)."""

    artifacts: list[Artifact] = field(default_factory=list)
    # What of its project could not be listed or read.
    unlisted: list[str] = field(default_factory=list)


class GeminiAdapter(Adapter):
    """Gemini CLI's sessions."""

    name = "gemini"
    # Gemini's own ids are UUIDs; a --session-id may be any name, which
    # cannot be told apart inside other names.
    id_in_name = UUID
    canonical_id = staticmethod(canonical_id)

    @cached_property
    def root(self) -> Path:
        # Gemini CLI resolves a relative GEMINI_CLI_HOME against its own cwd,
        # which a daemon cannot know: such a value is ignored, like XDG's.
        base = self.env.get("GEMINI_CLI_HOME")
        return (Path(base) if base and os.path.isabs(base) else self.env.home) / ".gemini"

    @cached_property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def roots(self) -> list[Root]:
        return [Root.check(self.root, "config", self.env.uid)]

    def watch_dirs(self) -> list[Path]:
        """tmp/, each project dir and its areas."""
        # os.path.isdir: Path.is_dir raises below a directory we may not search.
        if not os.path.isdir(self.tmp):
            return []
        dirs = [self.tmp]
        for project in self._projects():
            dirs.append(project)
            areas = ("chats", *(area for area, _, _ in AREAS))
            dirs += [project / d for d in areas if os.path.isdir(project / d)]
        return dirs

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """One pass over the projects for all of them."""
        merged = self._collect(names)
        yield from each_session(merged, lambda sid: self._session(sid, merged[sid]))

    def session_for_path(self, path: str) -> str | None:
        """The session a path below tmp/ belongs to."""
        return path_id(self.tmp, path)

    def describe(self, session: Session) -> Described:
        """Its first prompt and its startTime, from its chat."""
        for artifact in session.artifacts:
            if artifact.kind == CHAT and artifact.primary and not artifact.linked:
                return described(artifact.path)
        return Described()

    def _projects(self) -> list[Path]:
        """Every project temp dir (a linked one included, to be reported)."""
        return [Path(e.path) for e in entries(self.tmp) if e.dir and e.name not in NOT_PROJECTS]

    def _collect(self, only: frozenset[str] | None) -> dict[str, list[_Found]]:
        """Every session's shares by id (only those in `only` when given)."""
        problem = root_problem(self.env, self.root)
        linked_tmp = disk.is_link(self.tmp)
        known = workspaces(self.root)
        merged: dict[str, list[_Found]] = defaultdict(list)
        for project in self._projects():
            unlisted = Unlisted()
            listed = layout(project, unlisted)
            items = [i for i in listed if only is None or i.sid in only]
            if not items:
                continue
            # Invariant 6: through a linked tmp/ or project dir, or on a root
            # others can write to, nothing is removed.
            linked = problem is not None or linked_tmp or disk.is_link(project)
            found: dict[str, _Found] = defaultdict(_Found)
            seen: set[tuple[int, int]] = set()
            for item in items:
                primary = item.kind == CHAT
                measured = disk.artifact(
                    item.path, item.kind, self.root, primary=primary, linked=linked, seen=seen
                )
                if measured is not None:
                    found[item.sid].artifacts.append(measured)
                if item.facts is not None:
                    _merge(found[item.sid], item.facts)
            workspace = project_root(project)
            for sid, share in found.items():
                share.workspace = (
                    workspace or known.of(project.name, share.project_hash) or share.workspace
                )
                share.unlisted = list(unlisted)
                if share.artifacts:  # all of it may have vanished since listed
                    merged[sid].append(share)
        return merged

    def _session(self, sid: str, shares: list[_Found]) -> Session:
        artifacts = [a for share in shares for a in share.artifacts]
        updated = [s.updated for s in shares if s.updated is not None]
        return session_of(
            self.name,
            sid,
            artifacts,
            workspace=next((s.workspace for s in shares if s.workspace), None),
            updated=max(updated) if updated else None,
            undated=any(s.undated for s in shares),
            unreadable=unreadable(artifacts, (p for s in shares for p in s.unlisted)),
        )


def _merge(found: _Found, facts: Facts) -> None:
    if facts.updated is not None:
        found.updated = max(found.updated or facts.updated, facts.updated)
    found.undated = found.undated or facts.undated
    found.workspace = found.workspace or facts.workspace
    found.project_hash = found.project_hash or facts.project_hash


ADAPTER = GeminiAdapter
