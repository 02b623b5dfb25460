"""Gemini CLI, grok and zero sessions for the demo home, as each agent lays
them out (FIELD-NOTES.md), in record shapes the tests' builders use too;
and the helpers every demo module writes with."""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.parse
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

DAY = 86400.0


def age(path: Path, days: float) -> float:
    """Set the mtime (and atime) of `path` and everything below it, links
    included but not followed, to `days` ago; return that time."""
    when = time.time() - days * DAY
    below = list(path.rglob("*")) if path.is_dir() and not path.is_symlink() else []
    for p in [path, *below]:
        os.utime(p, (when, when), follow_symlinks=False)
    return when


def jsonl(records: Iterable[object]) -> str:
    """Records as JSON lines."""
    return "".join(json.dumps(r) + "\n" for r in records)


def write(path: Path, text: str | bytes) -> Path:
    """Write `path`, its folders made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# -- gemini ---------------------------------------------------------------


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


def write_gemini_session(
    root: Path, sid: str, *, project: str, workspace: str, days: float
) -> None:
    """A chat of `workspace` in `root/tmp/<project>/`, as 0.61 appends it,
    and the session's log, last updated `days` ago."""
    tmp = root / "tmp" / project
    when = time.time() - days * DAY
    stamp = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H-%M")
    lines = gemini_chat_lines(sid, workspace, gemini_time(when), gemini_time(when))
    chat = write(tmp / "chats" / f"session-{stamp}-{sid[:8]}.jsonl", jsonl(lines))
    log = write(tmp / "logs" / f"session-{sid}.jsonl", '{"event": "start"}\n')
    write(tmp / ".project_root", workspace)
    for path in (chat, log):
        age(path, days)


# -- grok -----------------------------------------------------------------


def grok_session_dir(root: Path, workspace: str, sid: str) -> Path:
    """`sessions/<percent-encoded workspace>/<sid>/`."""
    return root / "sessions" / urllib.parse.quote(workspace, safe="") / sid


def grok_chat_record(sid: str) -> dict[str, object]:
    """A line of a session's chat_history.jsonl."""
    return {"session_id": sid, "role": "user", "content": "hi"}


def write_grok_session(root: Path, sid: str, *, workspace: str, days: float) -> None:
    """A session of `workspace`: its chat history and state, `days` old."""
    directory = grok_session_dir(root, workspace, sid)
    write(directory / "chat_history.jsonl", json.dumps(grok_chat_record(sid)) + "\n")
    write(directory / "state.json", "{}")
    age(directory, days)


# -- zero -----------------------------------------------------------------


def zero_metadata(sid: str, parent: str | None = None) -> dict[str, object]:
    """A session's metadata.json."""
    return {"sessionId": sid, "parentSessionId": parent or ""}


def write_zero_session(root: Path, sid: str, *, days: float) -> None:
    """A session `<root>/<sid>/`: its metadata and events, `days` old."""
    directory = root / sid
    write(directory / "metadata.json", json.dumps(zero_metadata(sid)))
    write(directory / "events.jsonl", '{"type": "start"}\n')
    age(directory, days)
