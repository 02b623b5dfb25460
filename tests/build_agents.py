"""Gemini CLI, grok and zero sessions and the stores', for the tests: each
builder writes a session the way it lies on disk (the record shapes are
agentkeep.demo.agents') and returns where everything went. `mtimes()`
records every timestamp under a root so a test can prove a scan changed
none.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentkeep.demo.agents import (
    DAY,
    age,
    gemini_chat_lines,
    gemini_project_hash,
    gemini_time,
    grok_chat_record,
    grok_session_dir,
    write,
    write_gemini_projects,
    zero_metadata,
)

__all__ = [
    "DAY",
    "GeminiSession",
    "GrokSession",
    "Store",
    "ZeroSession",
    "age",
    "gemini_chat_lines",
    "gemini_project_hash",
    "gemini_root",
    "gemini_time",
    "grok_root",
    "make_gemini_session",
    "make_grok_session",
    "make_store_session",
    "make_zero_session",
    "mtimes",
    "write",
    "write_gemini_projects",
    "zero_root",
]


UNSET = object()
_CHAT_MINUTE = itertools.count()


def gemini_root(home: Path) -> Path:
    return home / ".gemini"


def grok_root(home: Path) -> Path:
    return home / ".grok"


def zero_root(data_home: Path) -> Path:
    return data_home / "zero" / "sessions"


def mtimes(root: Path) -> dict[str, tuple[int, int]]:
    """(mtime_ns, atime_ns) of `root` and every entry below it, by lstat."""
    found: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, ""]:
            p = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(p)
            found[p] = (st.st_mtime_ns, st.st_atime_ns)
    return found


# -- gemini, grok, zero ------------------------------------------------


@dataclass
class GeminiSession:
    id: str
    project: Path
    chat: Path
    artifacts: list[Path]
    shared: list[Path]


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
    directory = grok_session_dir(root, workspace, sid)
    chat = write(
        directory / "chat_history.jsonl", json.dumps(grok_chat_record(named or sid)) + "\n"
    )
    write(directory / "state.json", "{}")
    inbox = root / "memory-v2" / "workspaces" / "w1" / "observations" / "_inbox"
    notes = [write(inbox / f"{sid}__note{i}.md", "remember\n") for i in range(memory)]
    age(directory, days)
    return GrokSession(sid, directory, chat, notes, [chat, directory / "state.json", directory])


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
    meta = zero_metadata(sid, parent)
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


# -- stores ---------------------------------------------------------------


@dataclass(frozen=True)
class Store:
    """Stands in for config.StoreConfig (the adapter duck-types it)."""

    name: str
    root: Path
    depth: int


def make_store_session(root: Path, rel: str, *, days: float = 0.0) -> Path:
    """A store session directory `root/rel` with a file and a nested file."""
    directory = root / rel
    write(directory / "issue.md", "# issue\n")
    write(directory / "work" / "notes.txt", "notes\n")
    age(directory, days)
    return directory
