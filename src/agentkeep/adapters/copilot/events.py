"""What a Copilot session's own files say: its `events.jsonl` (workspace,
start, parent, tool outputs named) and its name in `workspace.yaml`."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import structlog

from agentkeep import fsio
from agentkeep.adapters import heads
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Described

log = structlog.get_logger("agentkeep.adapters.copilot")

_UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
ID = re.compile(_UUID)
EVENTS = "events.jsonl"
WORKSPACE = "workspace.yaml"
TOOL_OUTPUT = re.compile(rf"\d{{10,17}}-copilot-tool-output-(\d{{1,10}})-{_UUID}\.txt")
_TOOL_OUTPUT_BYTES = re.compile(TOOL_OUTPUT.pattern.encode())
# The child's own fork event: `Forked from "<name>" (<parent>) as "<name>" (<child>).`
_FORKED = re.compile(rf'^Forked from .*\(({_UUID})\) as ".*" \(({_UUID})\)\.?$', re.DOTALL)
# events.jsonl is read in pieces this long; a tool output's name is never
# longer than the overlap kept between two pieces of one line.
_PIECE, _OVERLAP = 1 << 20, 256


def canonical_id(raw: str) -> str | None:
    """The id as it is (Copilot keeps the case `--session-id` was given in)."""
    return raw if isinstance(raw, str) and ID.fullmatch(raw) else None


@dataclass(frozen=True)
class Events:
    """What a session's events.jsonl says of it."""

    cwd: str | None = None
    # When the session began: a fork's session.start is the fork's own.
    start: float | None = None
    parent: str | None = None
    outputs: frozenset[str] = frozenset()
    # The first event is not a session.start naming this session.
    undated: bool = False


def read_events(path: Path, sid: str) -> Events:
    """What events.jsonl says, read in pieces (it can be tens of MB). A first
    event that is not this session's session.start makes it undated."""
    handle = fsio.open_quietly(path)
    if handle is None:
        return Events()
    outputs: set[str] = set()
    parent: str | None = None
    with handle:
        head = handle.readline(_PIECE)
        first = _first_event(head, sid, path)
        tail, starts_line = b"", True
        for piece in itertools.chain([head], iter(lambda: handle.readline(_PIECE), b"")):
            outputs.update(m[0].decode() for m in _TOOL_OUTPUT_BYTES.finditer(tail + piece))
            ends_line = piece.endswith(b"\n")
            if starts_line and ends_line and b"Forked from" in piece:
                parent = _fork_parent(piece, sid) or parent
            starts_line = ends_line
            tail = b"" if ends_line else piece[-_OVERLAP:]
    # A fork's copied events name its parent's tool outputs, written before
    # the fork began: those stay the parent's.
    if first.start is not None:
        outputs = {name for name in outputs if int(name.split("-", 1)[0]) / 1000 >= first.start}
    return dataclasses.replace(first, parent=parent, outputs=frozenset(outputs))


def _first_event(line: bytes, sid: str, path: Path) -> Events:
    """The first event's workspace and start; undated when it is not the
    session.start of this session."""
    if not line.strip():
        return Events()
    if (record := heads.json_object(line)) is None:
        log.info("malformed first event; the session is undated", path=str(path))
        return Events(undated=True)
    data = record.get("data")
    if not isinstance(data, dict) or record.get("type") != "session.start":
        log.info("first event is no session.start; the session is undated", path=str(path))
        return Events(undated=True)
    if data.get("sessionId") != sid:
        named = str(data.get("sessionId"))[:80]
        log.info("events name another session; undated", path=str(path), names=named)
        return Events(undated=True)
    context = data.get("context")
    cwd = context.get("cwd") if isinstance(context, dict) else None
    ok = isinstance(cwd, str) and os.path.isabs(cwd) and "\0" not in cwd
    start = parse_agent_time(data.get("startTime") or record.get("timestamp"))
    return Events(cwd=cwd if ok else None, start=start)


def _fork_parent(line: bytes, sid: str) -> str | None:
    """The parent this session's own fork event names; None for any other
    line (one copied from an ancestor names another child)."""
    record = heads.json_object(line) or {}
    data = record.get("data")
    if record.get("type") != "session.info" or not isinstance(data, dict):
        return None
    message = data.get("message")
    if data.get("infoType") != "fork" or not isinstance(message, str):
        return None
    match = _FORKED.match(message)
    if match is None or match[2] != sid or match[1] == sid:
        return None
    return match[1]


def described(by_name: dict[str, str]) -> Described:
    """Its name (workspace.yaml's) else its first prompt, and its
    session.start's time, from the heads of those files (by file name)."""
    name = _yaml_name(by_name[WORKSPACE]) if WORKSPACE in by_name else None
    if EVENTS not in by_name:
        return Described(name)
    started: float | None = None
    for record in heads.head_records(by_name[EVENTS]):
        data = record.get("data")
        data = data if isinstance(data, dict) else {}
        if record.get("type") == "session.start":
            started = parse_agent_time(data.get("startTime") or record.get("timestamp"))
        elif record.get("type") == "user.message":
            return Described(name or heads.cut(heads.text_of(data.get("content"))), started)
    return Described(name, started)


def _yaml_name(path: str) -> str | None:
    """workspace.yaml's top-level `name`: a plain or quoted scalar only."""
    for line in (heads.read_head(path, heads.HEAD) or b"").decode("utf-8", "replace").splitlines():
        if not line.startswith("name:"):
            continue
        value = line[len("name:") :].strip()
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        elif value.startswith("'") and value.endswith("'") and len(value) > 1:
            value = value[1:-1].replace("''", "'")
        elif value[:1] in ("|", ">", "&", "*", "!"):
            return None
        return heads.cut(value)
    return None
