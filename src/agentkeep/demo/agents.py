"""Gemini CLI, grok and zero sessions, for the demo home and the tests.

Each builder writes a session the way its agent lays it out on disk
(FIELD-NOTES.md), inside a fake home, and returns where everything went, so a
test can assert on exact paths. `age()` backdates a tree; `write()` makes a
file and its folders (every demo module writes with them).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

DAY = 86400.0
UNSET = object()
_CHAT_MINUTE = itertools.count()


def age(path: Path, days: float) -> float:
    """Set the mtime (and atime) of `path` and everything below it, links
    included but not followed, to `days` ago; return that time."""
    when = time.time() - days * DAY
    paths = [path]
    if path.is_dir() and not path.is_symlink():
        paths += list(path.rglob("*"))
    for p in paths:
        os.utime(p, (when, when), follow_symlinks=False)
    return when


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# -- gemini ---------------------------------------------------------------


@dataclass
class GeminiSession:
    id: str
    project: Path
    chat: Path
    artifacts: list[Path]
    shared: list[Path]


def gemini_project_hash(workspace: str) -> str:
    """What Gemini names a legacy project dir, and every chat's projectHash."""
    return hashlib.sha256(workspace.encode()).hexdigest()


def gemini_time(when: float) -> str:
    """A time as Gemini writes it (`new Date().toISOString()`)."""
    moment = datetime.fromtimestamp(when, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def write_gemini_projects(root: Path, projects: dict[str, str]) -> Path:
    """`projects.json`: workspace path -> project dir name."""
    return write(root / "projects.json", json.dumps({"projects": projects}, indent=2))


def gemini_chat_lines(
    sid: str, workspace: str, start: str, last: object, *, kind: str = "main"
) -> list[dict[str, object]]:
    """A chat's records as Gemini 0.61 appends them: the first record, the
    session context as a `$set` of messages, then each message followed by
    a `$set` of lastUpdated (the last of which is `last`)."""
    context = {"id": "c1", "timestamp": start, "type": "user", "content": [{"text": "ctx"}]}
    return [
        {
            "sessionId": sid,
            "projectHash": gemini_project_hash(workspace),
            "startTime": start,
            "lastUpdated": start,
            "kind": kind,
        },
        {"$set": {"messages": [context], "lastUpdated": start}},
        {"id": "m1", "timestamp": start, "type": "user", "content": [{"text": "hi"}]},
        {"$set": {"lastUpdated": start}},
        {"id": "m2", "timestamp": start, "type": "gemini", "content": "Hello."},
        {"$set": {"lastUpdated": last}},
    ]


def make_gemini_session(
    root: Path,
    sid: str,
    *,
    project: str = "proj",
    project_root: str | None = "/work/proj",
    fmt: str = "jsonl",
    subagents: tuple[str, ...] = (),
    last_updated: object = UNSET,
    days: float = 0.0,
) -> GeminiSession:
    """A Gemini CLI session in `root/tmp/<project>/`: its chat (`fmt` jsonl,
    as 0.61 writes it, or a legacy json object), log, tool outputs and
    per-session dir, and each subagent's chat (under chats/<sid>/), log,
    tool outputs and dir; plus the project's shared files (checkpoint
    history, logs.json, shell_history), returned as `shared`. Its times are
    `days` ago; `last_updated` replaces the last lastUpdated written."""
    tmp = root / "tmp" / project
    stamp = f"2026-01-02T03-{next(_CHAT_MINUTE) % 60:02d}"  # unique, like Gemini's
    when = gemini_time(time.time() - days * DAY)
    last = when if last_updated is UNSET else last_updated
    workspace = project_root or "/work/unknown"
    chat = tmp / "chats" / f"session-{stamp}-{sid[:8]}.{fmt}"
    lines = gemini_chat_lines(sid, workspace, when, last)
    if fmt == "jsonl":
        write(chat, "".join(json.dumps(line) + "\n" for line in lines))
    else:
        meta = {**lines[0], "lastUpdated": last}
        del meta["kind"]  # older versions wrote no kind
        messages = [lines[2], lines[4]]
        write(chat, json.dumps({**meta, "messages": messages}, indent=2))
    write(tmp / "logs" / f"session-{sid}.jsonl", '{"event": "start"}\n')
    write(tmp / "tool-outputs" / f"session-{sid}" / "shell-1.txt", "output\n")
    write(tmp / sid / "plans" / "plan.md", "# plan\n")
    artifacts = [
        chat,
        tmp / "logs" / f"session-{sid}.jsonl",
        tmp / "tool-outputs" / f"session-{sid}",
    ]
    artifacts.append(tmp / sid)
    for sub in subagents:
        sub_lines = gemini_chat_lines(sub, workspace, when, when, kind="subagent")
        write(tmp / "chats" / sid / f"{sub}.jsonl", json.dumps(sub_lines[0]) + "\n")
        write(tmp / "logs" / f"session-{sub}.jsonl", "{}\n")
        write(tmp / "tool-outputs" / f"session-{sub}" / "out.txt", "x\n")
        write(tmp / sub / "tasks" / "t.json", "{}\n")
        artifacts += [
            tmp / "logs" / f"session-{sub}.jsonl",
            tmp / "tool-outputs" / f"session-{sub}",
        ]
        artifacts.append(tmp / sub)
    if subagents:
        artifacts.append(tmp / "chats" / sid)
    if project_root is not None and not (tmp / ".project_root").exists():
        write(tmp / ".project_root", project_root)
    shared = [
        write(root / "history" / project / "HEAD", "ref: refs/heads/main\n").parent,
        write(tmp / "logs.json", json.dumps([{"sessionId": sid, "message": "hi"}])),
        write(tmp / "shell_history", "ls\n"),
        # /restore checkpoints are named by time, file and tool, not by the
        # session; /chat save by the user's tag.
        write(tmp / "checkpoints" / f"{stamp}-hello.txt-write_file.json", "{}"),
        write(tmp / "checkpoint-mytag.json", "{}"),
    ]
    for p in artifacts:
        age(p, days)
    return GeminiSession(sid, tmp, chat, artifacts, shared)


# -- grok -----------------------------------------------------------------


@dataclass
class GrokSession:
    id: str
    dir: Path
    chat: Path
    memory: list[Path]
    artifacts: list[Path]


def make_grok_session(
    root: Path,
    sid: str,
    *,
    workspace: str = "/work/proj",
    memory: int = 1,
    named: str | None = None,
    days: float = 0.0,
) -> GrokSession:
    """A grok session: `sessions/<percent-encoded workspace>/<sid>/` with its
    chat_history.jsonl (naming `named`, default `sid`) and a second file, and
    `memory` observations naming it in the user's memory inbox."""
    directory = root / "sessions" / urllib.parse.quote(workspace, safe="") / sid
    record = {"session_id": named or sid, "role": "user", "content": "hi"}
    chat = write(directory / "chat_history.jsonl", json.dumps(record) + "\n")
    write(directory / "state.json", "{}")
    inbox = root / "memory-v2" / "workspaces" / "w1" / "observations" / "_inbox"
    notes = [write(inbox / f"{sid}__note{i}.md", "remember\n") for i in range(memory)]
    age(directory, days)
    return GrokSession(sid, directory, chat, notes, [chat, directory / "state.json", directory])


# -- zero -----------------------------------------------------------------


@dataclass
class ZeroSession:
    id: str
    dir: Path
    metadata: Path
    artifacts: list[Path] = field(default_factory=list)


def make_zero_session(
    root: Path,
    sid: str,
    *,
    parent: str | None = None,
    updated_at: object = UNSET,
    metadata: str | None = None,
    lease: bool = True,
    days: float = 0.0,
) -> ZeroSession:
    """A zero session `<root>/<sid>/`: metadata.json (or `metadata` verbatim),
    events.jsonl, a checkpoint, session.lock and (when `lease`) lease.lock."""
    directory = root / sid
    meta: dict[str, object] = {"sessionId": sid, "parentSessionId": parent or ""}
    if updated_at is not UNSET:
        meta["updatedAt"] = updated_at
    meta_path = write(
        directory / "metadata.json", metadata if metadata is not None else json.dumps(meta)
    )
    write(directory / "checkpoints" / "0001.json", "{}")
    files = [
        meta_path,
        write(directory / "events.jsonl", '{"type": "start"}\n'),
        directory / "checkpoints",
        write(directory / "session.lock", ""),
    ]
    if lease:
        files.append(write(directory / "lease.lock", ""))
    age(directory, days)
    return ZeroSession(sid, directory, meta_path, [*files, directory])
