"""One look at what Copilot's sessions share (rows, tool outputs, shared
files), and the Session each id makes of it and of its dirs."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import structlog

from agentkeep import disk, fsio
from agentkeep.adapters.base import session_of
from agentkeep.adapters.copilot import store
from agentkeep.adapters.copilot.events import (
    EVENTS,
    ID,
    TOOL_OUTPUT,
    WORKSPACE,
    Events,
    canonical_id,
    read_events,
)
from agentkeep.adapters.dirs import directory_artifacts, entries, root_problem
from agentkeep.model import Artifact, Session
from agentkeep.paths import Env

log = structlog.get_logger("agentkeep.adapters.copilot")

_T = TypeVar("_T")

OPLOCKS = ".session-operation-locks"
KINDS = {
    EVENTS: "events",
    WORKSPACE: "workspace",
    "checkpoints": "checkpoints",
    "rewind-file-snapshots": "snapshots",
    "files": "files",
    "research": "research",
    "session.db": "session-db",
    ".workspace-fork.lock": "fork-lock",
}
KIND_INUSE_LOCK, KIND_INUSE_HOLD = "inuse-lock", "inuse-hold"
KIND_OPLOCK, KIND_TOOL_OUTPUT = "operation-lock", "tool-output"
_INUSE = re.compile(r"inuse\.(\d{1,10})\.(lock|hold)")
_SHARED_LIMIT = 32 << 20
_SHARED_FILES = ("open-sessions-state.json", "command-history-state.json", "config.json")


@dataclass(frozen=True)
class Place:
    """One `session-state` directory, under the root it lies in."""

    root: Path
    state: Path
    linked: bool


@dataclass
class Listing:
    """What the sessions listed together share."""

    rows: dict[str, store.Rows] = field(default_factory=dict)
    # A database could not be read: a newer time or a row may hide there.
    incomplete: bool = False
    # Tool outputs in the tmp dirs: (path, root, linked) by the writer's pid.
    outputs: dict[int, list[tuple[str, str, bool]]] = field(default_factory=dict)
    # The shared files (logs, state) and the ids each of them names.
    shared: dict[str, frozenset[str]] = field(default_factory=dict)


def once(items: list[_T], key: Callable[[_T], tuple[Path, bool]]) -> list[_T]:
    """Each real path once: the first not behind a link, else the first."""
    chosen: dict[str, _T] = {}
    for item in sorted(items, key=lambda i: key(i)[1]):
        chosen.setdefault(os.path.realpath(key(item)[0]), item)
    return [item for item in items if item in chosen.values()]


def look(
    env: Env, stores: list[tuple[Path, bool]], roots: list[Path], only: frozenset[str] | None
) -> Listing:
    """The rows of every store, the tool outputs in the tmp dirs and the ids
    the shared files name."""
    listing = Listing()
    for db, linked in stores:
        try:
            store.read_rows(db, linked, only, listing.rows)
        except sqlite3.Error as exc:
            log.warning(
                "session-store.db unreadable; copilot sessions undated", db=str(db), error=str(exc)
            )
            listing.incomplete = True
    _list_outputs(env, listing)
    for root in once(roots, lambda r: (r, disk.is_link(r))):
        _list_shared(root, listing)
    return listing


def _list_outputs(env: Env, listing: Listing) -> None:
    for tmp in env.tmp_dirs:
        linked = root_problem(env, tmp) is not None
        for entry in entries(tmp):
            match = TOOL_OUTPUT.fullmatch(entry.name)
            if match is None or entry.dir:
                continue
            try:
                st = os.lstat(entry.path)
            except OSError:
                continue
            if entry.link or st.st_uid != env.uid:
                log.info("skipped a tool output that is not the user's file", path=entry.path)
                continue
            pid = int(match[1])
            listing.outputs.setdefault(pid, []).append((entry.path, str(tmp), linked))


def _list_shared(root: Path, listing: Listing) -> None:
    """What the shared files name: read whole, as they are small and few."""
    logs = [Path(e.path) for e in entries(root / "logs") if e.name.endswith(".log")]
    state = [Path(e.path) for e in entries(root / "sidebar-sessions-state")]
    for path in [*logs, *state, *(root / name for name in _SHARED_FILES)]:
        if named := ID.findall(_read_bounded(path).decode("utf-8", "replace")):
            listing.shared[str(path)] = frozenset(named)


def _read_bounded(path: Path) -> bytes:
    """A shared file's bytes (none when missing, a link, or too big)."""
    try:
        return fsio.read_regular(path, limit=_SHARED_LIMIT)
    except OSError:
        return b""


def ids(places: list[Place], listing: Listing) -> set[str]:
    """Every id a session dir, an operation lock or a row names."""
    found: set[str] = set(listing.rows)
    for place in places:
        for entry in entries(place.state):
            if entry.name == OPLOCKS:
                continue
            sid = canonical_id(entry.name)
            if sid is None or not entry.dir:
                log.info("skipped: not a copilot session dir", path=entry.path)
                continue
            found.add(sid)
        for entry in entries(place.state / OPLOCKS):
            sid = canonical_id(entry.name.removesuffix(".lock"))
            if sid is not None and entry.name.endswith(".lock"):
                found.add(sid)
    return found


def session(agent: str, sid: str, places: list[Place], listing: Listing) -> Session | None:
    """The session `sid` makes of its dirs, rows and tool outputs (None:
    nothing of it is left)."""
    seen: set[tuple[int, int]] = set()
    artifacts: list[Artifact] = []
    read: list[Events] = []
    for place in places:
        found, events_read = _in_place(sid, place, seen)
        artifacts += found
        read += [events_read] if events_read is not None else []
    events = read[0] if read else Events()
    rows = listing.rows.get(sid, store.Rows())
    artifacts += _outputs(events.outputs, inuse_pids(artifacts), listing, seen)
    file_times = [a.mtime for a in artifacts if a.mtime is not None]
    own_time = rows.updated if rows.updated is not None else max(file_times, default=None)
    artifacts += store.row_artifacts(rows, own_time)
    if not artifacts:
        return None
    return session_of(
        agent,
        sid,
        artifacts,
        workspace=events.cwd or rows.cwd,
        parent=events.parent,
        updated=rows.updated,
        undated=events.undated or rows.undated or listing.incomplete,
        residual=sorted(path for path, named in listing.shared.items() if sid in named),
    )


def _in_place(
    sid: str, place: Place, seen: set[tuple[int, int]]
) -> tuple[list[Artifact], Events | None]:
    """Its dir and operation lock in one place, and its events (None: none there)."""
    root, directory = str(place.root), place.state / sid
    artifacts: list[Artifact | None] = []
    events = None
    if directory.is_dir():
        listed = directory_artifacts(
            str(directory), root, primary=EVENTS, kinds=KINDS, linked=place.linked, seen=seen
        )
        artifacts += [_inuse_kind(a) for a in listed]
        if os.path.lexists(directory / EVENTS) and not place.linked:
            events = read_events(directory / EVENTS, sid)
    elif os.path.lexists(directory):
        log.info("skipped: not a session directory", path=str(directory))
    lock = place.state / OPLOCKS / f"{sid}.lock"
    artifacts.append(disk.artifact(lock, KIND_OPLOCK, root, linked=place.linked, seen=seen))
    return [a for a in artifacts if a is not None], events


def _outputs(
    named: frozenset[str], pids: set[int], listing: Listing, seen: set[tuple[int, int]]
) -> list[Artifact]:
    """The tool outputs its events name, or its `inuse.<pid>` processes wrote."""
    measured = (
        disk.artifact(path, KIND_TOOL_OUTPUT, root, linked=linked, seen=seen)
        for pid, files in listing.outputs.items()
        for path, root, linked in files
        if pid in pids or os.path.basename(path) in named
    )
    return [a for a in measured if a is not None]


def _inuse_kind(artifact: Artifact) -> Artifact:
    """An `inuse.<pid>` lock or hold by its kind."""
    match = _INUSE.fullmatch(os.path.basename(artifact.path))
    if match is None:
        return artifact
    return artifact._replace(kind=KIND_INUSE_LOCK if match[2] == "lock" else KIND_INUSE_HOLD)


def inuse_pids(artifacts: Iterable[Artifact]) -> set[int]:
    """The pids of the session's `inuse.<pid>` locks and holds."""
    kinds = (KIND_INUSE_LOCK, KIND_INUSE_HOLD)
    inuse = (_INUSE.fullmatch(os.path.basename(a.path)) for a in artifacts if a.kind in kinds)
    return {int(match[1]) for match in inuse if match is not None}
