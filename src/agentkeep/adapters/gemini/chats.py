"""Reading a Gemini chat: the session its first record names, its workspace,
its first prompt, and its update time: the last `lastUpdated`, read from the
chat's end (0.61 appends a `{"$set": {"lastUpdated": ...}}` per message). A
legacy `.json` chat is one object whose fields come before its messages.

And which workspace a project temp dir is for, by `.project_root`,
`projects.json` or the project hash (the sha256 of the workspace's path:
older Gemini's dir name, every chat's `projectHash`, Qwen Code's `tmp/<hash>/`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]  # typeshed omits it
from pathlib import Path

import structlog

from agentkeep import fsio
from agentkeep.adapters import heads
from agentkeep.adapters.base import name_id
from agentkeep.adapters.dirs import Unlisted
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Described

log = structlog.get_logger("agentkeep.adapters.gemini")

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# The first record (sessionId, projectHash, times) is within 4 KiB in
# practice; past 64 KiB a chat is skipped (logged), never attributed by a guess.
CHAT_FIRST_LOOK = 4 * 1024
CHAT_HEAD = 64 * 1024
# The last `lastUpdated` is looked for backwards from the end, a growing
# chunk at a time, in the last TAIL_LIMIT bytes: a big chat is never read whole.
TAIL_CHUNK = 4 * 1024
TAIL_LIMIT = 1024 * 1024
# A file's mtime may be rounded down by the file system (FAT: 2 s).
MTIME_SLACK = 5.0
# Fields a chat may carry its workspace in, when .project_root is missing.
WORKSPACE_FIELDS = ("projectRoot", "cwd")
# A project temp dir's name when it is a workspace's project_hash.
PROJECT_HASH = re.compile(r"[0-9a-f]{64}")
PROJECT_ROOT_FILE = ".project_root"
PROJECTS_FILE = "projects.json"
PROJECTS_LIMIT = 4 * 1024 * 1024
SMALL_FILE = 4 * 1024


def canonical_id(raw: str) -> str | None:
    """A name id; a UUID lowercased (case-folding file systems and older
    writers may spell it in capitals)."""
    sid = name_id(raw)
    return sid.lower() if sid is not None and UUID.fullmatch(sid) else sid


@dataclass
class Facts:
    """What one chat file says of its session."""

    sid: str | None = None
    updated: float | None = None
    undated: bool = False
    workspace: str | None = None
    project_hash: str | None = None


@dataclass(frozen=True)
class _Tail:
    """The last `lastUpdated` of a chat as written, when `found`; `complete`
    when the whole chat was read looking for it."""

    found: bool
    value: object = None
    complete: bool = True


def chat_facts(path: Path, unlisted: Unlisted | None = None) -> Facts:
    """A chat's sessionId and workspace from its head, its update time from
    its tail, read without following a link or moving its atime. A chat
    whose id cannot be read is skipped (logged), never attributed; one that
    cannot be opened is added to `unlisted` (whose it is, is unknown)."""
    if not os.path.lexists(path):
        return Facts()  # removed meanwhile (a watcher's deletion event)
    handle = fsio.open_quietly(path)
    if handle is None:
        if (why := fsio.denied(path)) is not None:
            Unlisted.note(unlisted, path, why)
        log.info("skipped a chat that is a link or unreadable", path=str(path))
        return Facts()
    jsonl = path.suffix != ".json"  # .jsonl, and the copies of one
    with handle:
        try:
            st = os.fstat(handle.fileno())
            record = _head_record(handle.fileno(), jsonl=jsonl)
            raw = record.get("sessionId")
            sid = canonical_id(raw) if isinstance(raw, str) else None
            tail = _last_update(handle.fileno(), st.st_size) if jsonl and sid else None
        except OSError as exc:
            log.info("skipped a chat that cannot be read", path=str(path), error=str(exc))
            return Facts()
    if sid is None:
        log.info("skipped a chat without a valid sessionId", path=str(path), value=str(raw)[:200])
        return Facts()
    hashed = record.get("projectHash")
    fields = (record.get(f) for f in WORKSPACE_FIELDS)
    workspace = next((str(v) for v in fields if _is_workspace(v)), None)
    facts = Facts(sid, None, False, workspace, hashed if isinstance(hashed, str) else None)
    facts.updated, facts.undated = _update_time(record, tail, st.st_mtime)
    if facts.undated:
        log.info("unreadable lastUpdated: the session is undated", path=str(path))
    return facts


def _head_record(fd: int, *, jsonl: bool) -> dict[str, object]:
    """The first record holding a sessionId (a .json chat's top-level
    fields), from its first CHAT_HEAD bytes at most."""
    record: dict[str, object] = {}
    for limit in (CHAT_FIRST_LOOK, CHAT_HEAD):
        head = os.pread(fd, limit, 0)
        record = _first_record(head, whole=len(head) < limit, jsonl=jsonl)
        if "sessionId" in record or len(head) < limit:
            break
    return record


def _last_update(fd: int, size: int) -> _Tail:
    """The last `lastUpdated` a .jsonl chat sets (in a `$set` record, or in
    a first record, which a resume may append again), read backwards; lines
    Gemini could not parse either (torn, garbage) are passed over."""
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
    if (record := heads.json_object(line)) is None:
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
    """(Gemini's update time of a chat, undated); never older than the chat.

    A lastUpdated that cannot be read makes it undated. When the tail was
    too long to find it in, the mtime stands for it, but only when not older
    than the head's lastUpdated (each line written sets both by one clock);
    an older mtime was set back and says nothing: undated."""
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
    """For .jsonl, the first whole line holding a sessionId; for .json, the
    top-level fields decoded before the head ends (cut inside `messages`)."""
    text = head.decode("utf-8", errors="replace")
    if jsonl:
        lines = text.split("\n")
        if not whole:
            lines.pop()  # cut by our limit, not by Gemini
        records = (heads.json_object(line) for line in lines)
        return next((r for r in records if r is not None and "sessionId" in r), {})
    return _top_level_fields(text)


def _top_level_fields(text: str) -> dict[str, object]:
    """The members of a JSON object decoded in order until the text ends or
    stops being well formed."""
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


def described(path: str) -> Described:
    """A chat's first prompt (its first user message but Gemini's
    `<session_context>`) and its startTime."""
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


def project_hash(workspace: str) -> str:
    """The hash a workspace's project temp dir and chats are named by."""
    return hashlib.sha256(workspace.encode()).hexdigest()


def _is_workspace(value: object) -> bool:
    """Whether `value` can be a workspace: an absolute path, no NUL in it."""
    return isinstance(value, str) and os.path.isabs(value) and "\0" not in value


@dataclass(frozen=True)
class _Workspaces:
    """`projects.json`: each workspace by its project's name and by the
    sha256 of its path (the legacy dir name, and every chat's projectHash)."""

    by_name: dict[str, str] = field(default_factory=dict)
    by_hash: dict[str, str] = field(default_factory=dict)

    def of(self, project: str, hashed: str | None = None) -> str | None:
        """The workspace of a project dir's name, or of a chat's projectHash."""
        return (
            self.by_name.get(project)
            or self.by_hash.get(project)
            or (self.by_hash.get(hashed) if hashed else None)
        )


def workspaces(root: Path) -> _Workspaces:
    """What `projects.json` says (nothing when it is missing, a link, too big
    or malformed: the workspace is then unknown)."""
    path = root / PROJECTS_FILE
    value = fsio.read_small_json(path, PROJECTS_LIMIT)
    projects = value.get("projects") if isinstance(value, dict) else None
    if not isinstance(projects, dict):
        if os.path.lexists(path):
            log.info("projects.json is not readable", path=str(path))
        return _Workspaces()
    found = _Workspaces()
    for workspace, name in projects.items():
        if not (isinstance(name, str) and _is_workspace(workspace)):
            continue
        found.by_name.setdefault(name, workspace)
        found.by_hash[project_hash(workspace)] = workspace
    return found


def project_root(project: Path) -> str | None:
    """The workspace Gemini recorded for a project dir (`.project_root`)."""
    try:
        text = fsio.read_regular(project / PROJECT_ROOT_FILE, limit=SMALL_FILE).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # missing, a link, too big, unreadable or not text
    text = text.strip()
    return text if _is_workspace(text) and "\n" not in text else None
