"""Codex's rollouts: where they lie, the session id their names end with, and
what their first line (session_meta) says of the session.

Rollouts live in `sessions/YYYY/MM/DD/` (the date is the start, never the
activity) and `archived_sessions/`, plain or `.jsonl.zst`; Codex compresses
and decompresses them under a watcher, so every listing looks for both names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

import structlog
import zstandard

from agentkeep import disk, fsio
from agentkeep.adapters import heads
from agentkeep.adapters.dirs import Unlisted, entries
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Artifact
from agentkeep.processes import ProcessTable

log = structlog.get_logger("agentkeep.adapters.codex")

T = TypeVar("T")

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The id is the last 36 characters before the extension; the timestamp in
# front of it is Codex's business and is not parsed.
_ROLLOUT = re.compile(r"rollout-.+-(?P<id>[0-9A-Za-z-]{36})\.jsonl(?:\.zst)?")
# session_meta carries the base instructions: tens of KiB is normal.
_META_LIMIT = 4 << 20
_CHUNK = 64 << 10

KIND_ROLLOUT = "rollout"
KIND_ARCHIVED = "archived-rollout"
KINDS = (KIND_ROLLOUT, KIND_ARCHIVED)


@dataclass(frozen=True)
class File:
    """A file naming a session, as listed: a rollout or a TUI reference."""

    path: Path
    kind: str
    linked: bool


@dataclass(frozen=True)
class Meta:
    """What a rollout's session_meta line says of its session."""

    cwd: str | None
    parent: str | None


def id_from_name(name: str) -> str | None:
    """The session id a rollout file name ends with; None unless it is a
    canonical lowercase UUID (Codex writes no other)."""
    match = _ROLLOUT.fullmatch(name)
    if match is None or not UUID.fullmatch(match["id"]):
        return None
    return match["id"]


def rollout_files(
    root: Path, only: frozenset[str] | None, linked: bool, unlisted: Unlisted
) -> Iterator[tuple[str, File]]:
    """(id, file) of every rollout (of `only`'s ids when given); one reached
    through a link is listed to be reported, never removed."""
    sessions = root / "sessions"
    for year, y_link in _dirs(sessions, linked or disk.is_link(sessions), unlisted):
        for month, m_link in _dirs(year, y_link, unlisted):
            for day, d_link in _dirs(month, m_link, unlisted):
                yield from _rollouts_in(day, KIND_ROLLOUT, only, d_link, unlisted)
    archived = root / "archived_sessions"
    archived_link = linked or disk.is_link(archived)
    yield from _rollouts_in(archived, KIND_ARCHIVED, only, archived_link, unlisted)


def _dirs(path: Path, linked: bool, unlisted: Unlisted) -> Iterator[tuple[Path, bool]]:
    """Subdirectories of `path`; one reached through a link is walked (its
    files are reported as linked, never removed)."""
    if not os.path.isdir(path):
        return
    for entry in entries(path, unlisted):
        if entry.dir:
            yield Path(entry.path), linked or entry.link


def _rollouts_in(
    directory: Path, kind: str, only: frozenset[str] | None, linked: bool, unlisted: Unlisted
) -> Iterator[tuple[str, File]]:
    for entry in (e for e in entries(directory, unlisted) if e.name.startswith("rollout-")):
        sid = id_from_name(entry.name)
        if sid is None:
            log.warning("rollout name without a session id; skipped", path=entry.path)
        elif only is not None and sid not in only:
            continue
        elif entry.dir and not entry.link:
            log.warning("a directory named like a rollout; skipped", path=entry.path)
        else:
            yield sid, File(Path(entry.path), kind, linked)


def open_rollouts(artifacts: Iterable[Artifact], procs: ProcessTable) -> Iterator[tuple[str, int]]:
    """(path, pid) of each rollout among `artifacts` a process has open
    (Codex keeps the rollout open while it appends to it)."""
    for artifact in artifacts:
        if artifact.kind in KINDS:
            for pid, _mode in procs.holding_open(artifact.path):
                yield artifact.path, pid


def read_meta(path: Path, sid: str) -> Meta | None:
    """Workspace and parent from the rollout's first line; None (logged)
    when it cannot be read. The id comes from the file name either way."""
    line = _first_line(path)
    if line is None:
        return None
    record = heads.json_object(line)
    if record is None:
        log.warning("rollout first line is not JSON; parent and workspace unknown", path=str(path))
        return None
    payload = record.get("payload") if record.get("type") == "session_meta" else None
    if not isinstance(payload, dict):
        log.warning("rollout does not start with session_meta", path=str(path))
        return None
    if payload.get("id") != sid:
        log.warning(
            "session_meta names another id; ignored",
            path=str(path),
            id=repr(payload.get("id"))[:80],
        )
        return None
    cwd = payload.get("cwd")
    return Meta(cwd if isinstance(cwd, str) else None, _meta_parent(payload, sid))


def _meta_parent(payload: dict[str, object], sid: str) -> str | None:
    """A fork's source (its history may not be copied) before a subagent's
    spawning thread; both must stay while this session stays."""
    source = payload.get("source")
    subagent = source.get("subagent") if isinstance(source, dict) else None
    spawn = subagent.get("thread_spawn") if isinstance(subagent, dict) else None
    candidates = [payload.get("forked_from_id")]
    candidates += [spawn.get("parent_thread_id")] if isinstance(spawn, dict) else []
    for candidate in candidates:
        if isinstance(candidate, str) and UUID.fullmatch(candidate) and candidate != sid:
            return candidate
    return None


def _first_line(path: Path) -> bytes | None:
    try:
        data = _reading(path, lambda stream: _head(stream, 0))
    except (OSError, zstandard.ZstdError) as exc:
        log.warning("rollout cannot be read", path=str(path), error=str(exc))
        return None
    line, newline, _ = data.partition(b"\n")
    if not newline and len(data) >= _META_LIMIT:
        log.warning("rollout first line too long; parent and workspace unknown", path=str(path))
        return None
    return line


def _reading(path: Path, read: Callable[[IO[bytes]], T]) -> T:
    """What `read` makes of a rollout's data (fsio.open_regular), through
    zstd when it is compressed. Raises OSError or ZstdError."""
    with fsio.open_regular(path) as handle:
        if not path.name.endswith(".zst"):
            return read(handle)
        with zstandard.ZstdDecompressor().stream_reader(handle, closefd=False) as stream:
            return read(stream)


def rollout_head(path: Path) -> tuple[str | None, float | None]:
    """(first prompt, start) from a rollout's head, compressed or not: its
    session_meta line (tens of KiB of instructions) and HEAD bytes more."""
    try:
        data = _reading(path, lambda stream: _head(stream, heads.HEAD))
    except (OSError, zstandard.ZstdError):
        return None, None
    prompt: str | None = None
    started: float | None = None
    for record in heads.records_in(data):
        payload = record.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        if started is None and record.get("type") == "session_meta":
            started = parse_agent_time(payload.get("timestamp") or record.get("timestamp"))
        if prompt is None and payload.get("type") == "user_message":
            prompt = heads.cut(payload.get("message"))
        if prompt is not None and started is not None:
            break
    return prompt, started


def _head(stream: IO[bytes], more: int) -> bytes:
    """The first line (at most _META_LIMIT) with its newline, and up to
    `more` bytes after it."""
    data = bytearray()
    while len(data) < _META_LIMIT + more:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        data += chunk
        newline = data.find(b"\n")
        if newline >= 0 and len(data) - newline > more:
            return bytes(data[: newline + 1 + more])
    return bytes(data)
