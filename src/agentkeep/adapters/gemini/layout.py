"""What in a Gemini project temp dir (`tmp/<project>/`) names a session,
and which session a path there belongs to. Per session:
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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import structlog

from agentkeep.adapters.dirs import Unlisted, entries, parts_below
from agentkeep.adapters.gemini.chats import UUID, Facts, canonical_id, chat_facts

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
class Item:
    """One thing in a project temp dir that names a session, not yet measured."""

    sid: str
    path: str
    kind: str
    facts: Facts | None = None


def layout(project: Path, unlisted: Unlisted | None = None) -> list[Item]:
    """Everything in one project temp dir that names a session; what cannot
    be listed, or a chat whose id cannot be read, is added to `unlisted`."""
    owners = _subagent_owners(project, unlisted)
    items = _chats(project, unlisted)
    for area, pattern, kind in AREAS:
        for entry in entries(project / area, unlisted):
            match = pattern.fullmatch(entry.name)
            sid = canonical_id(match["id"]) if match else None
            if sid is not None:
                items.append(Item(owners.get(sid, sid), entry.path, kind))
    known = {i.sid for i in items} | set(owners)
    for entry in entries(project, unlisted):
        sid = canonical_id(entry.name)
        if not entry.dir or entry.name in SHARED_DIRS or sid is None:
            continue
        # Only a dir that a session of this project names, or one named by a
        # UUID (what Gemini's ids are), is a session's: a shared dir a newer
        # Gemini adds must never be taken for one.
        if sid in known or UUID.fullmatch(sid):
            items.append(Item(owners.get(sid, sid), entry.path, SESSION_DIR))
        else:
            log.info("skipped a dir that no session names", path=entry.path)
    return items


def path_id(tmp: Path, path: str) -> str | None:
    """The session a path below `tmp/` belongs to."""
    parts = parts_below(path, tmp)
    if not parts or len(parts) < 2 or parts[0] in NOT_PROJECTS:
        return None
    project = tmp / parts[0]
    first, rest = parts[1], parts[2:]
    if first == "chats":
        if len(rest) == 1 and (CHAT_FILE.fullmatch(rest[0]) or CHAT_COPY.fullmatch(rest[0])):
            return chat_facts(project / "chats" / rest[0]).sid
        return canonical_id(rest[0]) if rest else None  # chats/<id>/: subagents
    named = _named(first, rest)
    if named is None:
        return None
    owners = _subagent_owners(project)
    if _area(first) or named in owners or UUID.fullmatch(named):
        return owners.get(named, named)
    # Any other dir is a session's only when the project names it.
    target = str(project / first)
    return next((i.sid for i in layout(project) if i.path == target), None)


def _chats(project: Path, unlisted: Unlisted | None) -> list[Item]:
    """What `chats/` of one project temp dir holds of each session."""
    items: list[Item] = []
    for entry in entries(project / "chats", unlisted):
        if entry.dir:
            sid = canonical_id(entry.name)
            if sid is not None:
                items.append(Item(sid, entry.path, SUBAGENTS))
        elif CHAT_FILE.fullmatch(entry.name):
            facts = chat_facts(Path(entry.path), unlisted)
            if facts.sid is not None:
                items.append(Item(facts.sid, entry.path, CHAT, facts))
        elif CHAT_COPY.fullmatch(entry.name):
            # A copy is the session's, but not what Gemini lists it by, and
            # its times are the chat's from before the rewrite.
            sid = chat_facts(Path(entry.path), unlisted).sid
            if sid is not None:
                items.append(Item(sid, entry.path, CHAT_COPY_KIND))
    return items


def _named(first: str, rest: list[str]) -> str | None:
    """The id a path in a project temp dir names by its name alone."""
    pattern = _area(first)
    if pattern is not None:
        match = pattern.fullmatch(rest[0]) if rest else None
        return canonical_id(match["id"]) if match else None
    return None if first in SHARED_DIRS else canonical_id(first)


def _subagent_owners(project: Path, unlisted: Unlisted | None = None) -> dict[str, str]:
    """Subagent id -> parent session id, from `chats/<parent>/<sub>.jsonl`."""
    owners: dict[str, str] = {}
    for parent in entries(project / "chats", unlisted):
        pid = canonical_id(parent.name) if parent.dir else None
        if pid is None:
            continue
        for chat in entries(parent.path, unlisted):
            match = SUBAGENT_CHAT.fullmatch(chat.name)
            sub = canonical_id(match["id"]) if match and not chat.dir else None
            if sub is not None and sub != pid:
                owners[sub] = pid
    return owners


def _area(name: str) -> re.Pattern[str] | None:
    """The pattern of a project area's per-session entries."""
    return next((pattern for area, pattern, _ in AREAS if area == name), None)
