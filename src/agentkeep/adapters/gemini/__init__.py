"""Gemini CLI: sessions under `$GEMINI_CLI_HOME/.gemini/tmp/<project>/`.

`<project>` is the workspace's base name (`alpha`, `alpha-1`, ...; mapped in
`projects.json`), a sha256 of its path in older versions. Per session, in a
project dir (the set Gemini's own `utils/sessionOperations.ts` removes):
- `chats/session-<time>-<id[:8]>.json` or `.jsonl`: the chat, naming
  `sessionId` in its first record (primary; a resume can leave more than
  one); `<chat>.unreadable-<ms>` and `<chat>.tmp-<pid>` are Gemini's copies;
- `chats/<id>/`: its subagents' chats (a subagent's own log, tool outputs
  and dir belong to its parent);
- `logs/session-<id>.jsonl`, `tool-outputs/session-<id>/`,
  `degraded-blobs/session-<id>/` and the per-session dir `<id>/`.
Shared, never attributed: `history/<project>/`, `logs.json`,
`shell_history`, `checkpoints/`, `memory/`, `.project_root`, `tmp/bin/`,
`tmp/background-processes/`, `projects.json`.

Its update time is its chat's last `lastUpdated` (gemini.chats). The
workspace is `.project_root`, else what `projects.json` maps the project to,
else a field of the chat. A project dir that cannot be listed, or a chat
whose id cannot be read, keeps every session of that project unsafe.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import structlog

from agentkeep import disk
from agentkeep.adapters.base import Adapter, Known, each_session, session_of
from agentkeep.adapters.dirs import Unlisted, entries, parts_below, root_problem, unreadable
from agentkeep.adapters.gemini import chats
from agentkeep.adapters.gemini.chats import CHAT_HEAD, TAIL_LIMIT
from agentkeep.model import Artifact, Described, Session

__all__ = ["ADAPTER", "CHAT_HEAD", "TAIL_LIMIT", "GeminiAdapter"]

log = structlog.get_logger("agentkeep.adapters.gemini")

CHAT_FILE = re.compile(r"session-.+\.jsonl?")
# Gemini's copies of a chat it rewrote: the unreadable original it kept, and
# a rewrite that did not get renamed into place.
CHAT_COPY = re.compile(r"session-.+\.jsonl\.(?:unreadable|tmp)-[0-9]+")
LOG_FILE = re.compile(r"session-(?P<id>.+)\.jsonl")
PER_SESSION_DIR = re.compile(r"session-(?P<id>.+)")
SUBAGENT_CHAT = re.compile(r"(?P<id>.+)\.jsonl?")
# Directories of tmp/ that are Gemini's own, not a project's.
NOT_PROJECTS = frozenset({"bin", "background-processes"})
# Project areas holding one entry per session, each named by the session's id.
AREAS = (
    ("logs", LOG_FILE, "log"),
    ("tool-outputs", PER_SESSION_DIR, "tool-outputs"),
    ("degraded-blobs", PER_SESSION_DIR, "degraded-blobs"),
)
# Directories of a project's temp dir that are Gemini's own, never a session's.
SHARED_DIRS = frozenset(
    {"chats", "checkpoints", "memory", "plans", "tasks", "tracker", *(a for a, _, _ in AREAS)}
)

CHAT = "chat"
CHAT_COPY_KIND = "chat-copy"
SUBAGENTS = "subagents"
SESSION_DIR = "session-dir"


@dataclass(frozen=True)
class _Item:
    """One thing in a project temp dir that names a session, not yet measured."""

    sid: str
    path: str
    kind: str
    facts: chats.Facts | None = None


@dataclass
class _Found(chats.Facts):
    """One session's share of one project (its chats' facts merged)."""

    artifacts: list[Artifact] = field(default_factory=list)
    # What of its project could not be listed or read.
    unlisted: list[str] = field(default_factory=list)


class GeminiAdapter(Adapter):
    """Gemini CLI's sessions."""

    name = "gemini"
    root_kind = "config"
    # Gemini's own ids are UUIDs; a --session-id may be any name, which
    # cannot be told apart inside other names.
    id_in_name = chats.UUID
    canonical_id = staticmethod(chats.canonical_id)

    @cached_property
    def _tmp(self) -> Path:
        return self.root / "tmp"

    def watch_dirs(self) -> list[Path]:
        """tmp/, each project dir and its areas."""
        # os.path.isdir: Path.is_dir raises below a directory we may not search.
        if not os.path.isdir(self._tmp):
            return []
        dirs = [self._tmp]
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
        return _path_id(self._tmp, path)

    def describe(self, session: Session) -> Described:
        """Its first prompt and its startTime, from its chat."""
        for artifact in session.artifacts:
            if artifact.kind == CHAT and artifact.primary and not artifact.linked:
                return chats.described(artifact.path)
        return Described()

    def _projects(self) -> list[Path]:
        """Every project temp dir (a linked one included, to be reported)."""
        return [Path(e.path) for e in entries(self._tmp) if e.dir and e.name not in NOT_PROJECTS]

    def _collect(self, only: frozenset[str] | None) -> dict[str, list[_Found]]:
        """Every session's shares by id (only those in `only` when given)."""
        problem = root_problem(self.env, self.root)
        linked_tmp = disk.is_link(self._tmp)
        known = chats.workspaces(self.root)
        merged: dict[str, list[_Found]] = defaultdict(list)
        for project in self._projects():
            unlisted = Unlisted()
            listed = _layout(project, unlisted)
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
            workspace = chats.project_root(project)
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


def _layout(project: Path, unlisted: Unlisted | None = None) -> list[_Item]:
    """Everything in one project temp dir that names a session; what cannot
    be listed, or a chat whose id cannot be read, is added to `unlisted`."""
    owners = _subagent_owners(project, unlisted)
    items = _chats(project, unlisted)
    for area, pattern, kind in AREAS:
        for entry in entries(project / area, unlisted):
            match = pattern.fullmatch(entry.name)
            sid = chats.canonical_id(match["id"]) if match else None
            if sid is not None:
                items.append(_Item(owners.get(sid, sid), entry.path, kind))
    known = {i.sid for i in items} | set(owners)
    for entry in entries(project, unlisted):
        sid = chats.canonical_id(entry.name)
        if not entry.dir or entry.name in SHARED_DIRS or sid is None:
            continue
        # Only a dir that a session of this project names, or one named by a
        # UUID (what Gemini's ids are), is a session's: a shared dir a newer
        # Gemini adds must never be taken for one.
        if sid in known or chats.UUID.fullmatch(sid):
            items.append(_Item(owners.get(sid, sid), entry.path, SESSION_DIR))
        else:
            log.info("skipped a dir that no session names", path=entry.path)
    return items


def _path_id(tmp: Path, path: str) -> str | None:
    """The session a path below `tmp/` belongs to."""
    parts = parts_below(path, tmp)
    if not parts or len(parts) < 2 or parts[0] in NOT_PROJECTS:
        return None
    project = tmp / parts[0]
    first, rest = parts[1], parts[2:]
    if first == "chats":
        if len(rest) == 1 and (CHAT_FILE.fullmatch(rest[0]) or CHAT_COPY.fullmatch(rest[0])):
            return chats.chat_facts(project / "chats" / rest[0]).sid
        return chats.canonical_id(rest[0]) if rest else None  # chats/<id>/: subagents
    named = _named(first, rest)
    if named is None:
        return None
    owners = _subagent_owners(project)
    if _area(first) or named in owners or chats.UUID.fullmatch(named):
        return owners.get(named, named)
    # Any other dir is a session's only when the project names it.
    target = str(project / first)
    return next((i.sid for i in _layout(project) if i.path == target), None)


def _chats(project: Path, unlisted: Unlisted | None) -> list[_Item]:
    """What `chats/` of one project temp dir holds of each session."""
    items: list[_Item] = []
    for entry in entries(project / "chats", unlisted):
        if entry.dir:
            sid = chats.canonical_id(entry.name)
            if sid is not None:
                items.append(_Item(sid, entry.path, SUBAGENTS))
        elif CHAT_FILE.fullmatch(entry.name):
            facts = chats.chat_facts(Path(entry.path), unlisted)
            if facts.sid is not None:
                items.append(_Item(facts.sid, entry.path, CHAT, facts))
        elif CHAT_COPY.fullmatch(entry.name):
            # A copy is the session's, but not what Gemini lists it by, and
            # its times are the chat's from before the rewrite.
            sid = chats.chat_facts(Path(entry.path), unlisted).sid
            if sid is not None:
                items.append(_Item(sid, entry.path, CHAT_COPY_KIND))
    return items


def _named(first: str, rest: list[str]) -> str | None:
    """The id a path in a project temp dir names by its name alone."""
    pattern = _area(first)
    if pattern is not None:
        match = pattern.fullmatch(rest[0]) if rest else None
        return chats.canonical_id(match["id"]) if match else None
    return None if first in SHARED_DIRS else chats.canonical_id(first)


def _subagent_owners(project: Path, unlisted: Unlisted | None = None) -> dict[str, str]:
    """Subagent id -> parent session id, from `chats/<parent>/<sub>.jsonl`."""
    owners: dict[str, str] = {}
    for parent in entries(project / "chats", unlisted):
        pid = chats.canonical_id(parent.name) if parent.dir else None
        if pid is None:
            continue
        for chat in entries(parent.path, unlisted):
            match = SUBAGENT_CHAT.fullmatch(chat.name)
            sub = chats.canonical_id(match["id"]) if match and not chat.dir else None
            if sub is not None and sub != pid:
                owners[sub] = pid
    return owners


def _area(name: str) -> re.Pattern[str] | None:
    """The pattern of a project area's per-session entries."""
    return next((pattern for area, pattern, _ in AREAS if area == name), None)


def _merge(found: _Found, facts: chats.Facts) -> None:
    if facts.updated is not None:
        found.updated = max(found.updated or facts.updated, facts.updated)
    found.undated = found.undated or facts.undated
    found.workspace = found.workspace or facts.workspace
    found.project_hash = found.project_hash or facts.project_hash


ADAPTER = GeminiAdapter
