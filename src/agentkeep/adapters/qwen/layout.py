"""Where Qwen Code keeps what names a session `<id>` (a UUID), which session
a name below its home or runtime dir is, and what its files say:
- `<runtime>/projects/<key>/chats/[archive/]<id>.jsonl` (the transcript),
  and its `.runtime.json`, `.worktree.json`, `.pr.json`, `.ledger.jsonl`;
- `<runtime>/projects/<key>/subagents/<id>/`, `<runtime>/debug/<id>.txt`,
  `<runtime>/tmp/session-writer-locks/<id>.lock*` and
  `<runtime>/tmp/<sha256(cwd)>/background-shells/<id>/`;
- `<home>/file-history/<id>/`, `<home>/plans/<id>.md`, and the registry of
  live sessions `<home>/sessions/<pid>.json`.
Shared: `usage_record.jsonl`, `usage/`, `tmp/<hash>/logs.json` and
`scheduled_tasks.lock`, `projects/<key>/meta.json`, `extract-cursor.json`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from agentkeep import fsio
from agentkeep.adapters import heads
from agentkeep.adapters.base import Root
from agentkeep.adapters.claude.ids import UUID, canonical
from agentkeep.adapters.claude.listing import linked_below
from agentkeep.adapters.claude.reading import read_json
from agentkeep.adapters.claude.registry import record_holders
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Described, Holder, HolderKind
from agentkeep.processes import ProcessTable

TRANSCRIPT = "transcript"
RUNTIME_STATUS = "runtime-status"
SIDECAR = "sidecar"
SUBAGENTS = "subagents"
FILE_HISTORY = "file-history"
PLAN = "plan"
DEBUG_LOG = "debug-log"
WRITER_LOCK = "writer-lock"
TOOL_OUTPUT = "tool-output"
REGISTRY = "registry"

# What follows the id in a chats dir's names. `.ledger.jsonl` before
# `.jsonl`: a name is its id and the first suffix that leaves an id.
CHAT_SUFFIXES = (
    (".ledger.jsonl", SIDECAR),
    (".jsonl", TRANSCRIPT),
    (".runtime.json", RUNTIME_STATUS),
    (".worktree.json", SIDECAR),
    (".pr.json", SIDECAR),
)
# `sessions/<pid>.json`, or `<pid>-<8 hex>.json` for a process's own slot.
REGISTRY_FILE = re.compile(r"(?P<pid>[0-9]{1,10})(?:-[0-9a-f]{8})?\.json")
WRITER_LOCKS = "session-writer-locks"
SHARED_PROJECT = ("meta.json", "extract-cursor.json")
SHARED_TMP = ("logs.json", "scheduled_tasks.lock")


def _named(suffix: str) -> Callable[[str], str | None]:
    """The id of a name that is `<id><suffix>`."""
    return lambda name: canonical(name.removesuffix(suffix)) if name.endswith(suffix) else None


def _lock_id(name: str) -> str | None:
    """`<id>.lock` and its `.lock.claim`, `.lock.released.<owner>` (Qwen
    percent-encodes the id, which leaves a UUID as it is)."""
    stem, dot, _ = name.partition(".lock")
    return canonical(stem) if dot else None


# Fixed dirs with an entry per session: (in the home, else the runtime dir;
# the dir; the kind; the id of a name; entries are dirs whose contents count).
AREAS = (
    (True, ("file-history",), FILE_HISTORY, canonical, True),
    (True, ("plans",), PLAN, _named(".md"), False),
    (False, ("debug",), DEBUG_LOG, _named(".txt"), False),
    (False, ("tmp", WRITER_LOCKS), WRITER_LOCK, _lock_id, False),
)


def is_linked(root: Root, directory: Path) -> bool:
    """Whether `directory` is reached through a link below `root` (or lies on
    a root that must not be trusted): nothing in it is removed."""
    if root.problem is not None:
        return True
    relative = os.path.relpath(directory, root.path)
    return relative != "." and linked_below(root.path, relative)


def chat_name(name: str) -> tuple[str | None, str]:
    """(id, kind) of a name in a chats dir; no id for the rest."""
    found = ((sid, kind) for suffix, kind in CHAT_SUFFIXES if (sid := _named(suffix)(name)))
    return next(found, (None, ""))


def path_id(home: list[str], runtime: list[str]) -> str | None:
    """The session a path's name is, from its parts below the home and the
    runtime dir (empty when not below one)."""
    for in_home, area, _, name_id, deep in AREAS:
        parts, below = (home if in_home else runtime), len(area)
        if (
            tuple(parts[:below]) == area
            and len(parts) > below
            and (deep or len(parts) == below + 1)
        ):
            return name_id(parts[below])
    return _project_path_id(runtime) if runtime else None


def _project_path_id(parts: list[str]) -> str | None:
    """The session a path below `projects/` or `tmp/` is, by its name."""
    if parts[0] == "projects" and len(parts) >= 4:
        if parts[2] == "subagents":
            return canonical(parts[3])
        chat = parts[3:] if parts[3] != "archive" else parts[4:]
        return chat_name(chat[0])[0] if parts[2] == "chats" and len(chat) == 1 else None
    if parts[0] == "tmp" and len(parts) >= 4 and parts[2] == "background-shells":
        return canonical(parts[3])
    return None


# A truncated tool output: `<tool name>_<6 random bytes in hex>.output`.
TOOL_OUTPUT_NAME = re.compile(rb"[A-Za-z0-9_]+_[0-9a-f]{12}\.output")
# A shared file this big is not read for the ids it names.
SHARED_LIMIT = 256 << 20
_UUID_BYTES = re.compile(UUID.pattern.encode())


def outputs_named(transcript: Path) -> set[str]:
    """The tool output names a transcript's records name, but for records a
    fork copied from its parent (each carries `forkedFrom`): those name the
    parent's outputs, which stay the parent's."""
    handle = fsio.open_quietly(transcript)
    if handle is None:
        return set()
    names: set[str] = set()
    with handle:
        for line in handle:
            if b".output" in line and b'"forkedFrom"' not in line:
                names.update(m.decode() for m in TOOL_OUTPUT_NAME.findall(line))
    return names


def ids_in(path: Path) -> set[str]:
    """The session ids a shared file names anywhere in it."""
    data = fsio.read_head(path, SHARED_LIMIT) or b""
    return {sid for m in _UUID_BYTES.findall(data) if (sid := canonical(m.decode()))}


def lock_holders(path: str, sid: str, procs: ProcessTable) -> list[Holder]:
    """A writer lock (`{session_id, pid, process_start_identity}`) naming the
    session holds it while its process lives. A lock that cannot be read
    holds it too: Qwen itself never takes a lock over one it cannot read."""
    if not os.path.lexists(path):
        return []
    record = read_json(path)
    name = f"tmp/{WRITER_LOCKS}/{os.path.basename(path)}"
    if not isinstance(record, dict):
        return [Holder(None, HolderKind.REGISTRY, f"{name}: cannot be read")]
    if canonical(record.get("session_id")) not in (None, sid):
        return []
    fields = {"pid": record.get("pid"), "procStart": record.get("process_start_identity")}
    return record_holders(name, fields, set(), procs)


def described(path: str) -> Described:
    """A transcript's title else first prompt, and its first record's time."""
    title: str | None = None
    prompt: str | None = None
    started: float | None = None
    for record in heads.head_records(path):
        started = started if started is not None else parse_agent_time(record.get("timestamp"))
        payload = record.get("systemPayload")
        payload = payload if isinstance(payload, dict) else {}
        if record.get("subtype") == "custom_title":
            title = heads.cut(payload.get("customTitle")) or title
        elif prompt is None and record.get("type") == "user" and "subtype" not in record:
            message = record.get("message")
            parts = message.get("parts") if isinstance(message, dict) else None
            prompt = heads.first_title(payload.get("displayText"), heads.text_of(parts))
    return Described(title or prompt, started)
