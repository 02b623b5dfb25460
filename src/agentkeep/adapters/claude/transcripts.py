"""Reading a transcript's head: the workspace (the records' `cwd`, never the
lossy project key), the parent a fork names (`forkedFrom`), and what a
person knows it by. Only the first TRANSCRIPT_HEAD bytes are read; a
session never names itself as its parent."""

from __future__ import annotations

import json

from agentkeep.adapters.claude.ids import canonical
from agentkeep.adapters.heads import cut, head_records, read_head, text_of
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Described

# How much of a transcript is read: Claude writes `cwd` and `forkedFrom` on
# the first message records (a fork's copied ones too).
TRANSCRIPT_HEAD = 64 * 1024


def lineage(sid: str, transcripts: list[str]) -> tuple[str | None, str | None]:
    """The workspace (the records' cwd, never the lossy key) and the parent a
    fork names, from the heads of the session's transcripts."""
    workspace: str | None = None
    parent: str | None = None
    for path in transcripts:
        data = read_head(path, TRANSCRIPT_HEAD)
        if data is None:
            continue
        cwd, fork = _transcript_facts(sid, data)
        workspace = workspace or cwd
        parent = parent or fork
        if workspace and parent:
            break
    return workspace, parent


def _transcript_facts(sid: str, data: bytes) -> tuple[str | None, str | None]:
    """(cwd, forkedFrom.sessionId) from a transcript's head. Malformed lines
    are skipped, and so is the line the read limit cut (a cut JSON object
    never parses); a forkedFrom naming the session itself is ignored."""
    cwd: str | None = None
    fork: str | None = None
    want_fork = b'"forkedFrom"' in data
    for line in data.split(b"\n"):
        if not ((cwd is None and b'"cwd"' in line) or (want_fork and b'"forkedFrom"' in line)):
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        value = record.get("cwd")
        if cwd is None and isinstance(value, str) and value and "\0" not in value:
            cwd = value
        forked = record.get("forkedFrom")
        if want_fork and isinstance(forked, dict):
            parent = canonical(forked.get("sessionId"))
            if parent is not None and parent != sid:
                fork, want_fork = parent, False
        if cwd is not None and not want_fork:
            break
    return cwd, fork


def described(transcripts: list[str]) -> Described:
    """Its title (a `summary` record, which Claude writes at the top of a
    resumed transcript, before any prompt) or first prompt, and its first
    record's time, from the heads of its transcripts. Command wrappers and
    meta records (`<command-name>`, `isMeta`) are not prompts."""
    for path in transcripts:
        summary: str | None = None
        prompt: str | None = None
        started: float | None = None
        for record in head_records(path):
            started = started if started is not None else parse_agent_time(record.get("timestamp"))
            kind = record.get("type")
            if kind == "summary" and summary is None:
                summary = cut(record.get("summary"))
            elif kind == "user" and not record.get("isMeta"):
                message = record.get("message")
                text = text_of(message.get("content")) if isinstance(message, dict) else None
                if text is not None and not text.lstrip().startswith("<"):
                    prompt = cut(text)
                    break
        if summary or prompt or started is not None:
            return Described(summary or prompt, started)
    return Described()
