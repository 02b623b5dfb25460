"""Where Qwen Code keeps what names a session `<id>` (a UUID), and which
session a name below its home or runtime dir is:
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

from agentkeep.adapters.base import Root
from agentkeep.adapters.claude.ids import canonical
from agentkeep.adapters.claude.listing import linked_below

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
    for suffix, kind in CHAT_SUFFIXES:
        sid = _named(suffix)(name)
        if sid is not None:
            return sid, kind
    return None, ""


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
