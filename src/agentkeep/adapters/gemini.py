"""Gemini CLI: sessions under `$GEMINI_CLI_HOME/.gemini/tmp/<project>/`.

`<project>` is the workspace's base name (`alpha`, then `alpha-1`, ... for
another workspace of the same name; `projects.json` maps workspaces to
them) since 0.2x, a sha256 of the workspace's path before. Per session, in a
project's temp dir (Gemini CLI's own session deletion,
`utils/sessionOperations.ts`, removes the same set):
- `chats/session-<time>-<id[:8]>.json` or `.jsonl`: the chat, naming
  `sessionId` in its first record; what `gemini --resume` lists (primary).
  A resumed legacy `.json` leaves a `.jsonl` beside it, and a resume in a
  later minute leaves a second `.jsonl` of the same id: all are primary.
  `<chat>.unreadable-<ms>` and `<chat>.tmp-<pid>` are Gemini's copies of a
  chat it rewrote: the session's, by the id in their first record.
- `chats/<id>/`: the session's subagents' chats (`<subagent id>.jsonl`);
- `logs/session-<id>.jsonl`, `tool-outputs/session-<id>/` and
  `degraded-blobs/session-<id>/`;
- `<id>/`: the per-session dir (plans, tasks, tracker).
A subagent's own log, tool outputs and dir belong to its parent session.

A session's update time is its chat's last `lastUpdated`: 0.61 appends
`{"$set": {"lastUpdated": ...}}` after every message, so it is read from the
end of the chat (`_last_update`), not from the first record.

The workspace is what Gemini wrote in `tmp/<project>/.project_root`, else
what `projects.json` maps the project to (by its name, or for a hashed dir
or a chat's `projectHash`, by the sha256 of a workspace's path), else a
`projectRoot`/`cwd` field of the chat, else unknown.

Shared, never attributed: `history/<project>/` (checkpoints shared by every
session of the project; it does not name a session, so it is not even
residual), `tmp/<project>/logs.json`, `shell_history`, `checkpoints/`,
`memory/`, `.project_root`, `tmp/bin/`, `tmp/background-processes/`,
`projects.json`, settings.
A directory of a project that cannot be listed, or a chat whose id cannot
be read, keeps every session found in that project unsafe: any of them may
have entries there (a session's entries all lie in its project's dir).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from json.decoder import scanstring  # type: ignore[attr-defined]  # typeshed omits it
from pathlib import Path

import structlog

from agentkeep import disk
from agentkeep.adapters import heads
from agentkeep.adapters.base import NAME_ID, Adapter, Known, Root
from agentkeep.adapters.dirs import Unlisted, entries, parts_below, root_problem, unreadable
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Artifact, Described, Session

log = structlog.get_logger("agentkeep.adapters.gemini")

ID = NAME_ID
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
CHAT_FILE = re.compile(r"session-.+\.jsonl?")
# Gemini's copies of a chat it rewrote: the unreadable original it kept, and
# a rewrite that did not get renamed into place.
CHAT_COPY = re.compile(r"session-.+\.jsonl\.(?:unreadable|tmp)-[0-9]+")
LOG_FILE = re.compile(r"session-(?P<id>.+)\.jsonl")
PER_SESSION_DIR = re.compile(r"session-(?P<id>.+)")
SUBAGENT_CHAT = re.compile(r"(?P<id>.+)\.jsonl?")
# Directories of a project's temp dir that are Gemini's own, never a session's.
SHARED_DIRS = frozenset(
    {
        "chats",
        "logs",
        "tool-outputs",
        "degraded-blobs",
        "checkpoints",
        "memory",
        "plans",
        "tasks",
        "tracker",
    }
)
# Directories of tmp/ that are Gemini's own, not a project's.
NOT_PROJECTS = frozenset({"bin", "background-processes"})
# Project areas holding one entry per session, each named by the session's id.
AREAS = (
    ("logs", LOG_FILE, "log"),
    ("tool-outputs", PER_SESSION_DIR, "tool-outputs"),
    ("degraded-blobs", PER_SESSION_DIR, "degraded-blobs"),
)
# The chat's first record holds sessionId, projectHash, startTime and
# lastUpdated, ahead of any message; a first look of 4 KiB finds them in
# practice, and no more than 64 KiB is ever read. A chat whose sessionId is
# not within that is skipped (logged): never attributed by a guess.
CHAT_FIRST_LOOK = 4 * 1024
CHAT_HEAD = 64 * 1024
# The last `lastUpdated` is looked for from the chat's end backwards, a
# chunk at a time (the last line is almost always a short `$set`), in the
# last TAIL_LIMIT bytes at most: a scan never reads a big chat whole.
TAIL_CHUNK = 4 * 1024
TAIL_LIMIT = 1024 * 1024
# A file's mtime may be rounded down by the file system (FAT: 2 s).
MTIME_SLACK = 5.0
PROJECT_ROOT_FILE = ".project_root"
PROJECTS_FILE = "projects.json"
PROJECTS_LIMIT = 4 * 1024 * 1024
SMALL_FILE = 4 * 1024
# Fields a chat may carry its workspace in, when .project_root is missing.
WORKSPACE_FIELDS = ("projectRoot", "cwd")

CHAT = "chat"
CHAT_COPY_KIND = "chat-copy"
SUBAGENTS = "subagents"
SESSION_DIR = "session-dir"


@dataclass
class _Facts:
    """What one chat file says of its session."""

    sid: str | None = None
    updated: float | None = None
    undated: bool = False
    workspace: str | None = None
    project_hash: str | None = None


@dataclass(frozen=True)
class _Tail:
    """The last `lastUpdated` of a chat, as written (`value`), when one was
    found; `complete` when the whole chat was read looking for it."""

    found: bool
    value: object = None
    complete: bool = True


@dataclass(frozen=True)
class _Workspaces:
    """`projects.json`: each workspace by its project's name and by the
    sha256 of its path (the legacy dir name, and every chat's projectHash)."""

    by_name: dict[str, str] = field(default_factory=dict)
    by_hash: dict[str, str] = field(default_factory=dict)

    def of(self, project: str, project_hash: str | None = None) -> str | None:
        return (
            self.by_name.get(project)
            or self.by_hash.get(project)
            or (self.by_hash.get(project_hash) if project_hash else None)
        )


@dataclass(frozen=True)
class _Item:
    """One thing in a project temp dir that names a session, not yet measured."""

    sid: str
    path: str
    kind: str
    facts: _Facts | None = None


@dataclass
class _Found:
    """One session's share of one project, before it becomes a Session."""

    artifacts: list[Artifact] = field(default_factory=list)
    updated: float | None = None
    undated: bool = False
    workspace: str | None = None
    project_hash: str | None = None
    # What of its project could not be listed or read.
    unlisted: list[str] = field(default_factory=list)


class GeminiAdapter(Adapter):
    name = "gemini"
    # Gemini's own ids are UUIDs; one given with --session-id may be any
    # name, which cannot be told apart inside other names (it is found by
    # listing the session again).
    id_in_name = UUID

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
        # os.path.isdir: Path.is_dir raises below a directory we may not search.
        if not os.path.isdir(self.tmp):
            return []
        dirs = [self.tmp]
        for project in self._projects():
            dirs.append(project)
            areas = ("chats", *(area for area, _, _ in AREAS))
            dirs += [project / d for d in areas if os.path.isdir(project / d)]
        return dirs

    def canonical_id(self, raw: str) -> str | None:
        if not isinstance(raw, str) or not ID.fullmatch(raw):
            return None
        # UUIDs are compared lowercased: case-folding file systems and older
        # writers may spell the same id in capitals.
        return raw.lower() if UUID.fullmatch(raw) else raw

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """One pass over the projects for all of them."""
        merged = self._collect(names)
        for sid in sorted(merged):
            yield self._session(sid, merged[sid])

    def session_for_path(self, path: str) -> str | None:
        parts = parts_below(path, self.tmp)
        if not parts or len(parts) < 2 or parts[0] in NOT_PROJECTS:
            return None
        project = self.tmp / parts[0]
        first, rest = parts[1], parts[2:]
        if first == "chats":
            if len(rest) == 1 and (CHAT_FILE.fullmatch(rest[0]) or CHAT_COPY.fullmatch(rest[0])):
                return self._chat_facts(project / "chats" / rest[0]).sid
            return self.canonical_id(rest[0]) if rest else None  # chats/<id>/: subagents
        named = self._named(first, rest)
        if named is None:
            return None
        owners = self._subagent_owners(project)
        if _area(first) or named in owners or UUID.fullmatch(named):
            return owners.get(named, named)
        # Any other dir is a session's only when the project names it.
        target = str(project / first)
        return next((i.sid for i in self._layout(project) if i.path == target), None)

    # -- reading ----------------------------------------------------------
    def describe(self, session: Session) -> Described:
        """Its first prompt (the chat's first user message that is not the
        `<session_context>` Gemini writes as one) and its startTime."""
        for artifact in session.artifacts:
            if artifact.kind == CHAT and artifact.primary and not artifact.linked:
                return _described(artifact.path)
        return Described()

    def _projects(self) -> list[Path]:
        """Every project temp dir (a linked one included, to be reported)."""
        return [Path(e.path) for e in entries(self.tmp) if e.dir and e.name not in NOT_PROJECTS]

    def _collect(self, only: frozenset[str] | None) -> dict[str, list[_Found]]:
        """Every session's artifacts by id (only those in `only` when it is
        given), measured."""
        problem = root_problem(self.env, self.root)
        linked_tmp = disk.is_link(self.tmp)
        workspaces = self._workspaces()
        merged: dict[str, list[_Found]] = defaultdict(list)
        for project in self._projects():
            unlisted = Unlisted()
            listed = self._layout(project, unlisted)
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
            workspace = _project_root(project)
            for sid, share in found.items():
                share.workspace = (
                    workspace or workspaces.of(project.name, share.project_hash) or share.workspace
                )
                share.unlisted = list(unlisted)
                if share.artifacts:  # all of it may have vanished since listed
                    merged[sid].append(share)
        return merged

    def _layout(self, project: Path, unlisted: Unlisted | None = None) -> list[_Item]:
        """Everything in one project temp dir that names a session; what
        cannot be listed, or a chat whose id cannot be read, is added to
        `unlisted`."""
        owners = self._subagent_owners(project, unlisted)
        items = self._chats(project, unlisted)
        for area, pattern, kind in AREAS:
            for entry in entries(project / area, unlisted):
                match = pattern.fullmatch(entry.name)
                sid = self.canonical_id(match["id"]) if match else None
                if sid is not None:
                    items.append(_Item(owners.get(sid, sid), entry.path, kind))
        known = {i.sid for i in items} | set(owners)
        for entry in entries(project, unlisted):
            sid = self.canonical_id(entry.name)
            if not entry.dir or entry.name in SHARED_DIRS or sid is None:
                continue
            # Only a dir that a session of this project names, or one named by
            # a UUID (what Gemini's ids are), is a session's: a shared dir a
            # newer Gemini adds must never be taken for one.
            if sid in known or UUID.fullmatch(sid):
                items.append(_Item(owners.get(sid, sid), entry.path, SESSION_DIR))
            else:
                log.info("skipped a dir that no session names", path=entry.path)
        return items

    def _chats(self, project: Path, unlisted: Unlisted | None) -> list[_Item]:
        """What `chats/` of one project temp dir holds of each session."""
        items: list[_Item] = []
        for entry in entries(project / "chats", unlisted):
            if entry.dir:
                sid = self.canonical_id(entry.name)
                if sid is not None:
                    items.append(_Item(sid, entry.path, SUBAGENTS))
            elif CHAT_FILE.fullmatch(entry.name):
                facts = self._chat_facts(Path(entry.path), unlisted)
                if facts.sid is not None:
                    items.append(_Item(facts.sid, entry.path, CHAT, facts))
            elif CHAT_COPY.fullmatch(entry.name):
                # A copy is the session's, but not what Gemini lists it by,
                # and its times are the chat's from before the rewrite.
                sid = self._chat_facts(Path(entry.path), unlisted).sid
                if sid is not None:
                    items.append(_Item(sid, entry.path, CHAT_COPY_KIND))
        return items

    def _named(self, first: str, rest: list[str]) -> str | None:
        """The id a path in a project temp dir names by its name alone."""
        pattern = _area(first)
        if pattern is not None:
            match = pattern.fullmatch(rest[0]) if rest else None
            return self.canonical_id(match["id"]) if match else None
        return None if first in SHARED_DIRS else self.canonical_id(first)

    def _subagent_owners(self, project: Path, unlisted: Unlisted | None = None) -> dict[str, str]:
        """Subagent id -> parent session id, from `chats/<parent>/<sub>.jsonl`."""
        owners: dict[str, str] = {}
        for parent in entries(project / "chats", unlisted):
            pid = self.canonical_id(parent.name) if parent.dir else None
            if pid is None:
                continue
            for chat in entries(parent.path, unlisted):
                match = SUBAGENT_CHAT.fullmatch(chat.name)
                sub = self.canonical_id(match["id"]) if match and not chat.dir else None
                if sub is not None and sub != pid:
                    owners[sub] = pid
        return owners

    def _chat_facts(self, path: Path, unlisted: Unlisted | None = None) -> _Facts:
        """sessionId (and a workspace field) from a chat's head and its update
        time from its tail, read without following a link or moving its
        atime. A chat whose id cannot be read is skipped with a log line,
        never attributed; one that cannot be opened is added to `unlisted`
        (whose it is, is unknown)."""
        if not os.path.lexists(path):
            return _Facts()  # removed meanwhile (a watcher's deletion event)
        handle = disk.open_quietly(path)
        if handle is None:
            if (why := disk.denied(path)) is not None:
                Unlisted.note(unlisted, path, why)
            log.info("skipped a chat that is a link or unreadable", path=str(path))
            return _Facts()
        jsonl = path.suffix != ".json"  # .jsonl, and the copies of one
        with handle:
            try:
                st = os.fstat(handle.fileno())
                record = _head_record(handle.fileno(), jsonl=jsonl)
                raw = record.get("sessionId")
                sid = self.canonical_id(raw) if isinstance(raw, str) else None
                tail = _last_update(handle.fileno(), st.st_size) if jsonl and sid else None
            except OSError as exc:
                log.info("skipped a chat that cannot be read", path=str(path), error=str(exc))
                return _Facts()
        if sid is None:
            log.info(
                "skipped a chat without a valid sessionId", path=str(path), value=str(raw)[:200]
            )
            return _Facts()
        project_hash = record.get("projectHash")
        facts = _Facts(
            sid=sid,
            workspace=_workspace(record),
            project_hash=project_hash if isinstance(project_hash, str) else None,
        )
        facts.updated, facts.undated = _update_time(record, tail, st.st_mtime)
        if facts.undated:
            log.info("unreadable lastUpdated: the session is undated", path=str(path))
        return facts

    def _workspaces(self) -> _Workspaces:
        """What `projects.json` says (nothing, when it is missing, a link,
        too big or malformed: the workspace is then only unknown)."""
        handle = disk.open_quietly(self.root / PROJECTS_FILE)
        if handle is None:
            return _Workspaces()
        with handle:
            data = handle.read(PROJECTS_LIMIT + 1)
        try:
            projects = json.loads(data)["projects"] if len(data) <= PROJECTS_LIMIT else None
        except (ValueError, RecursionError, KeyError, TypeError):
            projects = None
        if not isinstance(projects, dict):
            log.info("projects.json is not readable", path=str(self.root / PROJECTS_FILE))
            return _Workspaces()
        found = _Workspaces()
        for workspace, name in projects.items():
            if not (isinstance(name, str) and _absolute(workspace)):
                continue
            found.by_name.setdefault(name, workspace)
            found.by_hash[hashlib.sha256(workspace.encode()).hexdigest()] = workspace
        return found

    def _session(self, sid: str, shares: list[_Found]) -> Session:
        artifacts = [a for share in shares for a in share.artifacts]
        artifacts.sort(key=lambda a: not a.primary)  # invariant 5: chats first
        updated = [s.updated for s in shares if s.updated is not None]
        return Session(
            agent=self.name,
            id=sid,
            workspace=next((s.workspace for s in shares if s.workspace), None),
            artifacts=artifacts,
            updated=max(updated) if updated else None,
            undated=any(s.undated for s in shares),
            bytes=sum(a.bytes for a in artifacts),
            unreadable=unreadable(artifacts, (p for s in shares for p in s.unlisted)),
        )


def _merge(found: _Found, facts: _Facts) -> None:
    if facts.updated is not None:
        found.updated = max(found.updated or facts.updated, facts.updated)
    found.undated = found.undated or facts.undated
    found.workspace = found.workspace or facts.workspace
    found.project_hash = found.project_hash or facts.project_hash


def _area(name: str) -> re.Pattern[str] | None:
    """The pattern of a project area's per-session entries."""
    return next((pattern for area, pattern, _ in AREAS if area == name), None)


def _head_record(fd: int, *, jsonl: bool) -> dict[str, object]:
    """The chat's first record holding a sessionId (a .json chat's
    top-level fields), from its first CHAT_HEAD bytes at most."""
    record: dict[str, object] = {}
    for limit in (CHAT_FIRST_LOOK, CHAT_HEAD):
        head = os.pread(fd, limit, 0)
        record = _first_record(head, whole=len(head) < limit, jsonl=jsonl)
        if "sessionId" in record or len(head) < limit:
            break
    return record


def _last_update(fd: int, size: int) -> _Tail:
    """The last `lastUpdated` a .jsonl chat sets: in a `{"$set": {...}}`
    record, or in a first record (which a resume may append again). Lines
    are read from the end backwards; lines Gemini itself could not parse
    (a torn last line, garbage) are passed over, as Gemini passes over
    them. Only the last TAIL_LIMIT bytes are read."""
    end, chunk, rest = size, TAIL_CHUNK, b""
    while end > 0 and size - end < TAIL_LIMIT:
        start = max(0, end - chunk, size - TAIL_LIMIT)
        data = os.pread(fd, end - start, start)
        if len(data) < end - start:
            break  # truncated while read: what is left is not a whole tail
        lines = (data + rest).split(b"\n")
        end, chunk = start, chunk * 2
        # The first piece may be the end of a line that starts further
        # back, unless the file starts here.
        rest = lines.pop(0) if end > 0 else b""
        for line in reversed(lines):
            value = _line_update(line)
            if value is not _NONE:
                return _Tail(True, value)
    return _Tail(False, complete=end == 0)


_NONE = object()


def _line_update(line: bytes) -> object:
    """The lastUpdated one line of a chat sets, or _NONE."""
    if b'"lastUpdated"' not in line:
        return _NONE  # most message lines: not decoded at all
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return _NONE
    if not isinstance(record, dict):
        return _NONE
    update = record.get("$set")
    if isinstance(update, dict) and "lastUpdated" in update:
        return update["lastUpdated"]
    # A first record, as Gemini tells one: sessionId and projectHash strings.
    first = all(isinstance(record.get(k), str) for k in ("sessionId", "projectHash"))
    if first and "lastUpdated" in record:
        return record["lastUpdated"]
    return _NONE


def _update_time(
    head: dict[str, object], tail: _Tail | None, mtime: float
) -> tuple[float | None, bool]:
    """(Gemini's update time of a chat, undated).

    Never older than the chat: a lastUpdated that cannot be read makes it
    undated. When the tail was too long to find the last lastUpdated in,
    the chat's mtime stands for it, but only when it is not older than the
    head's lastUpdated: each line Gemini writes sets the mtime by the clock
    that stamps lastUpdated, so such an mtime is at least every time in the
    lines not read. An mtime older than what was read has been set back
    (or comes from another clock) and says nothing of them: undated."""
    raw_head = head.get("lastUpdated")
    first = parse_agent_time(raw_head) if raw_head is not None else None
    if tail is None:  # a .json chat: its top-level lastUpdated is the last
        return first, raw_head is not None and first is None
    if tail.found:
        last = parse_agent_time(tail.value)
        if last is None:
            return None, True
        return max(last, first or last), False
    if tail.complete:
        return None, False  # no lastUpdated anywhere: the mtimes date it
    if first is not None and mtime + MTIME_SLACK >= first:
        return first, False
    return None, True


def _first_record(head: bytes, *, whole: bool, jsonl: bool) -> dict[str, object]:
    """The chat's metadata: for .jsonl, the first complete line holding a
    sessionId; for .json, the top-level fields decoded before the head ends
    (a large chat is cut inside `messages`, after its metadata)."""
    text = head.decode("utf-8", errors="replace")
    if jsonl:
        lines = text.split("\n")
        if not whole:
            lines.pop()  # cut by our limit, not by Gemini
        for line in lines:
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict) and "sessionId" in record:
                return record
        return {}
    return _top_level_fields(text)


def _top_level_fields(text: str) -> dict[str, object]:
    """The members of a JSON object decoded in order until the text ends or
    stops being well formed (a truncated head yields what came before)."""
    decoder = json.JSONDecoder()
    fields: dict[str, object] = {}
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        return fields
    pos += 1
    try:
        while True:
            pos = _skip(text, pos)
            if not text.startswith('"', pos):
                return fields
            key, pos = scanstring(text, pos + 1)
            pos = _skip(text, pos)
            if not text.startswith(":", pos):
                return fields
            value, pos = decoder.raw_decode(text, _skip(text, pos + 1))
            fields[key] = value
            pos = _skip(text, pos)
            if not text.startswith(",", pos):
                return fields
            pos += 1
    except (ValueError, RecursionError):
        return fields


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _workspace(record: dict[str, object]) -> str | None:
    for name in WORKSPACE_FIELDS:
        value = record.get(name)
        if _absolute(value):
            return str(value)
    return None


def _absolute(value: object) -> bool:
    return isinstance(value, str) and os.path.isabs(value) and "\0" not in value


def _project_root(project: Path) -> str | None:
    """The workspace Gemini recorded for a project dir (`.project_root`)."""
    handle = disk.open_quietly(project / PROJECT_ROOT_FILE)
    if handle is None:
        return None
    with handle:
        data = handle.read(SMALL_FILE + 1)
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if len(data) > SMALL_FILE or not os.path.isabs(text) or "\0" in text or "\n" in text:
        return None
    return text


ADAPTER = GeminiAdapter


def _described(path: str) -> Described:
    """A chat's first prompt and start: JSONL (0.61) or one JSON object."""
    if path.endswith(".json"):
        chat = heads.read_json_head(path)
        records = chat.get("messages") if isinstance(chat, dict) else None
        first = chat if isinstance(chat, dict) else {}
        records = records if isinstance(records, list) else []
    else:
        records = list(heads.records_in(heads.read_head(path, heads.HEAD) or b""))
        first = records[0] if records else {}
    started = parse_agent_time(first.get("startTime"))
    for record in records:
        if isinstance(record, dict) and record.get("type") == "user":
            text = heads.text_of(record.get("content"))
            # Gemini writes its <session_context> as a user message too.
            if text is not None and not text.lstrip().startswith("<"):
                return Described(heads.cut(text), started)
    return Described(None, started)
