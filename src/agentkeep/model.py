"""The words agentkeep speaks in: sessions, artifacts, holders, reasons.

These types cross every module boundary (adapters -> index -> prune -> cli),
so they are plain dataclasses, named tuples and enums, never dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import NamedTuple


class State(StrEnum):
    """A session's state in `ls`: the first of live, held, pinned that applies."""

    IDLE = "idle"
    LIVE = "live"
    HELD = "held"
    PINNED = "pinned"


class Reason(StrEnum):
    """Why a session old enough to go stayed (the prune report's `reason`)."""

    LIVE = "live"
    HELD = "held"
    PINNED = "pinned"
    ANCESTOR = "ancestor"
    UPDATED = "updated"
    UNDATED = "undated"
    UNSAFE = "unsafe"
    CAPPED = "capped"
    RECENT = "recent"


class HolderKind(StrEnum):
    PROCESS = "process"
    REGISTRY = "registry"
    LEASE = "lease"


@dataclass(frozen=True)
class Holder:
    """Evidence that something has a session open. pid is None when unknown."""

    pid: int | None
    kind: HolderKind
    detail: str = ""

    def describe(self) -> str:
        if self.pid is None:
            return self.detail or self.kind.value
        return f"pid {self.pid}" + (f" ({self.detail})" if self.detail else "")


class Artifact(NamedTuple):
    """One thing on disk (or one database row set) that belongs to a session.

    `root` is the agent root the path lies under: removal opens that root once
    and works relative to its descriptor, so `path` must lie below `root`.
    `linked` marks an artifact reached through a symbolic link or lying on a
    root another user can write to: it is never removed, only reported as
    residual. `primary` marks the record the agent lists the session by; it is
    removed first, and a linked primary makes the whole session `unsafe`.
    Directory artifacts carry the summed size and newest mtime of their tree.
    `mtime` None means a time in it could not be read (the session is undated).
    `foreign` marks one on a root another user owns or can write to (a
    planted `/tmp/claude-<uid>`): its times are not the user's activity, so
    another user cannot keep the user's sessions from ever being pruned.
    `disk_bytes` is what it takes on disk (allocated blocks, as `du` counts),
    beside `bytes`, its apparent size; as measured only: the index keeps it
    for `du --by kind` alone, and an artifact read back from it has 0.
    A named tuple, immutable like a frozen dataclass: a scan makes one per
    artifact of every session, and a frozen dataclass costs three times as
    much to make.
    """

    path: str
    kind: str
    bytes: int
    mtime: float | None
    root: str | None = None
    primary: bool = False
    linked: bool = False
    is_dir: bool = False
    foreign: bool = False
    disk_bytes: int = 0


@dataclass(slots=True)
class Session:
    """A session as listed from the disk by its adapter."""

    agent: str
    id: str
    workspace: str | None = None
    parent: str | None = None
    artifacts: list[Artifact] = field(default_factory=list)
    # The agent's own update time (a database column, a metadata field).
    updated: float | None = None
    # True when some time that counts toward activity could not be read.
    undated: bool = False
    # Sum of st_size over the session's files, each inode counted once.
    bytes: int = 0
    # Things that name the session but are not the prune's to remove.
    residual: list[str] = field(default_factory=list)
    # Places that could not be listed or read where the session could have
    # entries (adapters.base.Unlisted): what it has there is unknown, so it
    # is kept `unsafe` and undated (invariant 2).
    unreadable: list[str] = field(default_factory=list)
    # Why it is unsafe as the index recorded it (a session read back from the
    # index, whose artifacts are not all at hand).
    recorded_unsafe: str | None = None
    # What it takes on disk (allocated, as du counts) when its artifacts are
    # not all at hand (None: their sum, see prune.shapes.allocated).
    disk_bytes: int | None = None
    # (agent, id), made once: the plan looks a session up by it many times.
    key: tuple[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = (self.agent, self.id)

    @property
    def primary(self) -> list[Artifact]:
        return [a for a in self.artifacts if a.primary]

    @property
    def unsafe(self) -> str | None:
        """Why the session must be kept `unsafe`, or None: the record the
        agent lists it by lies behind a link (or on a root others can write
        to), or all of it does. Nothing of such a session can be removed
        (invariant 6), and reporting it `removed` would say so at every run."""
        if self.recorded_unsafe:
            return self.recorded_unsafe
        for artifact in self.artifacts:
            if artifact.primary and artifact.linked:
                return f"{artifact.path} lies behind a link or on an unsafe root"
        if self.unreadable:
            return "cannot list " + ", ".join(self.unreadable)
        if self.artifacts and all(a.linked for a in self.artifacts):
            return f"all of it lies behind a link or on an unsafe root ({self.artifacts[0].path})"
        return None

    @property
    def own_artifacts(self) -> list[Artifact]:
        """The artifacts whose times are the user's activity (not `foreign`)."""
        return [a for a in self.artifacts if not a.foreign]

    def last_activity(self, restored_at: float | None = None) -> float | None:
        """Newest of every artifact's mtime (foreign ones left out), the
        agent's update time and the last restore; None (undated) when any of
        them could not be read, or a place of the session could not be."""
        own = self.own_artifacts
        if self.undated or self.unreadable or any(a.mtime is None for a in own):
            return None
        times = [a.mtime for a in own if a.mtime is not None]
        if self.updated is not None:
            times.append(self.updated)
        if restored_at is not None:
            times.append(restored_at)
        return max(times) if times else None


@dataclass(frozen=True)
class Shape:
    """An agent's retention beside its age: `keep_last` (in each workspace
    the N most recently active stay) and `max_size` (a cap, in bytes,
    shared by the agents of `size_group`; None: no cap)."""

    keep_last: int = 0
    max_size: int | None = None
    size_group: str = ""


def rfc3339(ts: float | None) -> str | None:
    """A POSIX time as RFC 3339 in UTC, e.g. 2026-10-01T12:00:00Z."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
