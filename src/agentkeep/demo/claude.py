"""Claude Code sessions for the demo home, with the record shapes of
FIELD-NOTES.md (the tests' builders and the benchmark write their
transcripts with them): a transcript, some of the parts a session leaves
in the config dir, and the shared files that name sessions."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from pathlib import Path

from agentkeep.demo.agents import DAY, age, jsonl, write

# A shell task's id as 2.1.197 makes them (a `b` and 8 more).
BASH_TASK = "bwdin25xx"


def project_key(cwd: str) -> str:
    """Claude's workspace key: every non-alphanumeric character becomes `-`;
    past 200 characters it is cut and given a hash suffix."""
    key = re.sub(r"[^A-Za-z0-9]", "-", cwd)
    if len(key) > 200:
        key = key[:200] + "-" + hashlib.sha256(cwd.encode()).hexdigest()[:8]
    return key


def transcript_records(
    session_id: str,
    cwd: str,
    *,
    parent: str | None = None,
    messages: int = 3,
    pad: int = 0,
    start_ms: int | None = None,
) -> list[dict[str, object]]:
    """Records as Claude writes them: a file-history snapshot first (no cwd),
    then user/assistant pairs carrying cwd and sessionId, and `forkedFrom`
    on every message record of a fork. `pad` adds that many characters to
    each assistant message (big transcripts)."""
    start_ms = int(time.time() * 1000) if start_ms is None else start_ms
    first = str(uuid.uuid4())
    records: list[dict[str, object]] = [
        {
            "type": "file-history-snapshot",
            "messageId": first,
            "snapshot": {"messageId": first, "trackedFileBackups": {}, "timestamp": start_ms},
            "isSnapshotUpdate": False,
        }
    ]
    previous: str | None = None
    for n in range(messages * 2):
        role = "user" if n % 2 == 0 else "assistant"
        this = first if n == 0 else str(uuid.uuid4())
        content = f"message {n}" + ("x" * pad if role == "assistant" else "")
        record: dict[str, object] = {
            "parentUuid": previous,
            "isSidechain": False,
            "userType": "external",
            "cwd": cwd,
            "sessionId": session_id,
            "version": "2.1.0",
            "gitBranch": "main",
            "type": role,
            "message": {"role": role, "content": content},
            "uuid": this,
            "timestamp": start_ms + n * 1000,
        }
        if parent is not None:
            record["forkedFrom"] = {"sessionId": parent, "messageUuid": this}
        records.append(record)
        previous = this
    return records


def write_session(
    config: Path, *, cwd: str, age_days: float, now: float, parent: str | None = None, pad: int = 0
) -> str:
    """A session in the config dir `config`, idle `age_days` before `now`:
    its transcript, a kept tool result, file history, debug log and todos.
    Returns its id."""
    sid = str(uuid.uuid4())
    when = now - age_days * DAY
    folder = config / "projects" / project_key(cwd)
    records = transcript_records(sid, cwd, parent=parent, pad=pad, start_ms=int(when * 1000))
    history = config / "file-history" / sid
    transcript = write(folder / f"{sid}.jsonl", jsonl(records))
    write(folder / sid / "tool-results" / f"{BASH_TASK}.txt", "tool result\n" * 16)
    write(history / "3f2a9c1e8b7d6a50@v1", "original contents\n")
    debug = write(config / "debug" / f"{sid}.txt", f"[DEBUG] session {sid} started in {cwd}\n")
    todos = write(config / "todos" / f"{sid}-agent-{sid}.json", "[]")
    for path in (transcript, folder / sid, history, debug, todos):
        age(path, age_days)
    return sid


def write_shared(config: Path, home: Path, *, cwd: str, session_ids: list[str]) -> None:
    """What every session shares and none owns: the prompt history and
    `~/.claude.json`, both naming sessions."""
    lines = [
        {"display": "fix it", "timestamp": 0, "project": cwd, "sessionId": s} for s in session_ids
    ]
    write(config / "history.jsonl", jsonl(lines))
    projects = {cwd: {"lastSessionId": session_ids[-1]}}
    write(home / ".claude.json", json.dumps({"projects": projects}))
