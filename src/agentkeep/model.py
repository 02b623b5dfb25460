"""The words agentkeep speaks in: sessions, artifacts, holders, reasons.
They cross every module boundary, so they are plain types, never dicts."""

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
    """What holds a session: a process, an agent's registry, a lease."""

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
        """The holder in a few words (`pid 42 (claude)`)."""
        if self.pid is None:
            return self.detail or self.kind.value
        return f"pid {self.pid}" + (f" ({self.detail})" if self.detail else "")


class Artifact(NamedTuple):
    """One thing on disk (or one database row set) that belongs to a session.

    `path` lies below `root`, the agent root removal works relative to.
    `linked`: reached through a link or on a root another user can write to:
    never removed, only residual. `primary`: the record the agent lists the
    session by, removed first; a linked one makes the session `unsafe`. A
    directory carries its tree's size and newest mtime; `mtime` None: a time
    could not be read (undated). `foreign`: on a root another user owns or
    can write to, so its times are not the user's activity. `disk_bytes`:
    allocated, as measured (0 when read back from the index).
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


class Described(NamedTuple):
    """What a person recognises a session by: its title where the agent
    keeps one, else its first prompt (cut short, on one line); and when it
    began. Either is None when the agent's files do not say."""

    title: str | None = None
    started: float | None = None


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
    undated: bool = False  # a time that counts could not be read
    bytes: int = 0  # st_size over its files, each inode once
    # Things that name the session but are not the prune's to remove.
    residual: list[str] = field(default_factory=list)
    # Places where it could have entries that could not be listed: what it
    # has there is unknown, so it is kept `unsafe` and undated (invariant 2).
    unreadable: list[str] = field(default_factory=list)
    # Read back from the index, whose artifacts are not all at hand: why it
    # is unsafe, and what it takes on disk (None: its artifacts' sum).
    recorded_unsafe: str | None = None
    disk_bytes: int | None = None
    key: tuple[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = (self.agent, self.id)

    @property
    def primary(self) -> list[Artifact]:
        """The records the agent lists it by."""
        return [a for a in self.artifacts if a.primary]

    @property
    def unsafe(self) -> str | None:
        """Why the session must be kept `unsafe` (invariant 6), or None: its
        primary record, or all of it, lies behind a link or on an unsafe
        root, or a place of it cannot be listed."""
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
        times += [t for t in (self.updated, restored_at) if t is not None]
        return max(times, default=None)


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
    """An RFC 3339 time as a POSIX time."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
