"""The 1.x JSON storage under `<data>/storage/` (session files, message
dirs, the part dir each message names, todo and diff files) and
`tool-output/`: what names a session. A storage folder that cannot be listed
keeps every session unsafe; a session's own message dir, that session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from agentkeep import disk, fsio
from agentkeep.adapters import sqlite
from agentkeep.adapters.base import NAME_ID
from agentkeep.adapters.dirs import Unlisted, entries, unlisted_error

log = structlog.get_logger("agentkeep.adapters.opencode")

FOLDERS = ("message", "part", "todo", "session_diff")
_JSON_LIMIT = 4 << 20

DB = "opencode.db"
TOOL_OUTPUT = "tool-output"

KIND_SESSION = "session-info"
KIND_MESSAGES = "messages"
KIND_PARTS = "parts"
KIND_TODO = "todo"
KIND_DIFF = "session-diff"
KIND_TOOL_OUTPUT = "tool-output"


def canonical_id(raw: object) -> str | None:
    """`raw` when it is an opencode id."""
    return raw if isinstance(raw, str) and NAME_ID.fullmatch(raw) else None


@dataclass(frozen=True)
class Record:
    """What a session file or listing row says of its session."""

    updated: float | None
    parent: str | None
    directory: str | None


def record(sid: str, updated: float | None, parent: object, directory: object) -> Record:
    """The Record of a file's or row's values: a parent link only when it
    names another session."""
    link = canonical_id(parent)
    workspace = directory if isinstance(directory, str) else None
    return Record(updated, link if link != sid else None, workspace)


@dataclass(frozen=True)
class File:
    """A file naming a session, as listed."""

    path: str
    kind: str
    linked: bool
    primary: bool = False


class Folder:
    """A storage folder: its path, whether it lies behind a link, and for a
    scan the names it holds (listed once, not looked up per session). One
    that cannot be listed or looked into is added to `unlisted`."""

    def __init__(self, path: str, linked: bool, listed: bool, unlisted: Unlisted) -> None:
        self.path = path
        self.linked = linked
        self.unlisted = unlisted
        self._names = _names(path, unlisted) if listed else None

    def has(self, name: str) -> str | None:
        """The path of `name` in this folder when it exists (as anything)."""
        path = f"{self.path}/{name}"
        if self._names is not None:
            return path if name in self._names else None
        try:
            os.lstat(path)
        except OSError as exc:
            if unlisted_error(exc):
                self.unlisted.add(self.path, exc)
            return None
        return path

    def may_hold(self, prefix: str) -> bool:
        """Whether a name starting with `prefix` may be here (True when the
        folder was not listed, or could not be)."""
        return self._names is None or any(n.startswith(prefix) for n in self._names)


def _names(directory: str, unlisted: Unlisted) -> frozenset[str] | None:
    """Every name in `directory`; None when it cannot be listed (each name
    is then looked up on its own; it is added to `unlisted` all the same)."""
    try:
        with disk.scandir(directory) as listing:
            return frozenset(entry.name for entry in listing)
    except FileNotFoundError:
        return frozenset()
    except OSError as exc:
        if unlisted_error(exc) and not disk.is_link(directory):
            unlisted.add(directory, exc)
        return None


def session_files(
    storage: Path, linked_root: bool, only: frozenset[str] | None, unlisted: Unlisted
) -> Iterator[tuple[str, File, Record | None]]:
    """Each session file, with what it says (None when it cannot be read,
    or lies behind a link)."""
    sessions = storage / "session"
    linked = linked_root or disk.is_link(storage) or disk.is_link(sessions)
    for project in (p for p in entries(sessions, unlisted) if p.dir):
        for entry in entries(project.path, unlisted):
            if not entry.name.endswith(".json") or entry.dir:
                continue
            sid = canonical_id(entry.name.removesuffix(".json"))
            if sid is None:
                log.warning("session file name is not a session id; skipped", path=entry.path)
                continue
            if only is not None and sid not in only:
                continue
            file = File(entry.path, KIND_SESSION, linked or project.link, True)
            yield sid, file, None if entry.link else _read_info(entry.path, sid)


def leftovers(storage: Path, only: frozenset[str] | None, unlisted: Unlisted) -> list[str]:
    """The sessions message dirs, todo and diff files name: what a removal
    stopped half way (or opencode's delete) leaves, for the next to finish."""
    names: list[str] = []
    for folder, suffix in (("message", ""), ("todo", ".json"), ("session_diff", ".json")):
        if only is not None:
            present = Folder(str(storage / folder), False, False, unlisted).has
            names.extend(s for s in only if present(f"{s}{suffix}"))
            continue
        names.extend(
            e.name.removesuffix(suffix)
            for e in entries(storage / folder, unlisted)
            if e.name.endswith(suffix) and e.dir == (suffix == "")
        )
    return [sid for sid in map(canonical_id, names) if sid is not None]


def storage_files(sid: str, folders: dict[str, Folder], unlisted: Unlisted) -> Iterator[File]:
    """The part dir of each of its messages, its message dir, its todo and
    diff files, in the order they are removed; its message dir is added to
    `unlisted` when it cannot be listed."""
    message = folders["message"]
    messages = message.has(sid)
    if messages is not None:
        # Message names read through a link could name anyone's parts.
        if not (message.linked or disk.is_link(messages)):
            yield from _part_dirs(messages, folders["part"], unlisted)
        # After the part dirs: only its message files name them, so a
        # removal stopped between the two must not have taken it first.
        yield File(messages, KIND_MESSAGES, message.linked)
    for folder, kind in (("todo", KIND_TODO), ("session_diff", KIND_DIFF)):
        path = folders[folder].has(f"{sid}.json")
        if path is not None:
            yield File(path, kind, folders[folder].linked)


def _part_dirs(messages: str, parts: Folder, unlisted: Unlisted) -> Iterator[File]:
    for entry in entries(messages, unlisted):
        msgid = entry.name.removesuffix(".json")
        if entry.dir or not entry.name.endswith(".json") or canonical_id(msgid) is None:
            continue
        path = parts.has(msgid)
        if path is not None:
            yield File(path, KIND_PARTS, parts.linked)


def _read_info(path: str, sid: str) -> Record | None:
    """Parent, update time and workspace from a 1.x session file; None
    (logged) when it cannot be read (the session is then undated)."""
    try:
        info = fsio.load_json(path, _JSON_LIMIT)
    except OSError:
        log.warning("session file cannot be read, or is too large; undated", path=path)
        return None
    except ValueError:
        log.warning("session file is not JSON (truncated?); undated", path=path)
        return None
    if not isinstance(info, dict) or info.get("id", sid) != sid:
        log.warning("session file names another session; undated", path=path)
        return None
    times = info.get("time")
    updated = sqlite.column_time(times.get("updated")) if isinstance(times, dict) else None
    return record(sid, updated, info.get("parentID"), info.get("directory"))
