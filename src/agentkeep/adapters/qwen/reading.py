"""What Qwen Code's files say of a session: the tool outputs it names, the
ids a shared file names, a writer lock's holder, its title or first prompt."""

from __future__ import annotations

import os
import re
from pathlib import Path

from agentkeep import fsio
from agentkeep.adapters import heads
from agentkeep.adapters.claude.ids import UUID, canonical
from agentkeep.adapters.claude.reading import read_json
from agentkeep.adapters.claude.registry import record_holders
from agentkeep.adapters.qwen.layout import WRITER_LOCKS
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Described, Holder, HolderKind
from agentkeep.processes import ProcessTable

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
