"""The adapter interface: what agentkeep must know of each agent (one
module per agent; docs/adding-an-agent.md says how to write one).

Adapters only read; removal goes through the `Remover` they are handed,
which owns link safety, the trash and dry runs. They treat every file as
possibly absent, malformed or of a newer version, and never guess in the
direction of deleting.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from agentkeep import agents, disk, fsio, rootsafety
from agentkeep.adapters.sqlite import TableRows
from agentkeep.model import Artifact, Described, Holder, Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable

_T = TypeVar("_T")


@dataclass(frozen=True)
class Root:
    """A directory an agent keeps sessions under; nothing is removed under one
    with a `problem` (another user can write to it, or to a link on the way)."""

    path: Path
    kind: str
    problem: str | None = None

    @classmethod
    def check(cls, path: Path, kind: str, uid: int) -> Root:
        """The root at `path`, with its problem when it exists."""
        return cls(path, kind, rootsafety.root_problem(path, uid) if path.exists() else None)


class Known:
    """What the caller knows already, so that listing some sessions costs
    less, for one piece of work: the index's view (a directory whose mtime
    still holds gained and lost no entry since: not listed again; never for
    a prune, whose check under the lease lists the disk), and memo()."""

    def __init__(self, mtimes: Mapping[str, int | None] | None = None) -> None:
        self._mtimes = mtimes or {}
        self._names: dict[str, list[str]] = {}
        self._memo: object = None

    def learn(self, paths: Iterable[str]) -> None:
        """Artifact paths the index holds of the sessions to be listed."""
        for path in paths:
            directory, name = os.path.split(path)
            self._names.setdefault(directory, []).append(name)

    def names_in(self, directory: str) -> list[str] | None:
        """The known entries of the sessions in `directory`, or None when it
        changed since it was known (or was never known): list it."""
        known = self._mtimes.get(directory)
        if known is None or disk.dir_mtimes([directory])[directory] != known:
            return None
        return self._names.get(directory, [])

    def memo(self, kind: type[_T]) -> _T:
        """The adapter's `kind` of memo, made at the first call."""
        if not isinstance(self._memo, kind):
            self._memo = kind()
        return self._memo


class Remover(Protocol):
    """What an adapter may do to the disk, through the removal engine."""

    dry_run: bool

    def remove_path(self, artifact: Artifact) -> None:
        """Remove (or trash) one artifact, link-safely. Raises RemovalError."""

    def removed_at_once(self, what: str, *, kept: bool = False) -> None:
        """Record that `what` (rows, an agent command's work) was removed
        outside the trash: the trash entry becomes partial, unless `what` is
        `<db>#<table>` whose rows were kept first (keep_rows), or `kept` says
        all it took is in the trash already."""

    def residual(self, path: str) -> None:
        """Report something that still names the session and is not ours."""

    def gone(self, session_id: str) -> bool:
        """Whether this run removed (or, dry, would have) another session of
        the agent: a child removed before its parent is gone."""

    def keep_rows(self, rows: TableRows) -> None:
        """Save rows about to be removed into the trash entry, for restore
        (nothing in a dry run or without a trash). Raises RemovalError when
        they cannot be saved: the caller must then remove none of them."""


class ScanPart(Protocol):
    """A piece of a scan: picklable, so that another process can run it."""

    def __call__(self) -> Iterable[Session]: ...


class Split(Protocol):
    """An agent's scan in parts (Adapter.split)."""

    def expected(self) -> int:
        """A cheap count of the sessions the scan will find, before listing."""
        ...

    def parts(self) -> Iterator[ScanPart]:
        """The scan as parts that a child process can run."""
        ...


@dataclass(frozen=True)
class WholeScan:
    """An agent's whole scan as one part (the adapter travels with it)."""

    adapter: Adapter

    def __call__(self) -> Iterator[Session]:
        return self.adapter.sessions()


class Adapter(ABC):
    """One agent. Instances are cheap and keep nothing from one call to the
    next but paths derived from `env` (a config reload builds new ones)."""

    name: ClassVar[str]
    # The artifact kinds holders() reads beyond the id: `ls` surveys many
    # sessions with only these loaded from the index (prune/evidence.py).
    evidence_kinds: ClassVar[frozenset[str]] = frozenset()
    # Finds the agent's session ids inside file names, for looking again
    # after a removal (lookagain.py); None where ids are not distinct enough.
    id_in_name: ClassVar[re.Pattern[str] | None] = None
    # The kind (Root.kind) of its one root, by default its name.
    root_kind: ClassVar[str | None] = None

    def __init__(self, env: Env) -> None:
        self.env = env

    @cached_property
    def root(self) -> Path:
        """Its first root as `env` names it (agents.roots)."""
        return agents.roots(self.name, self.env)[0]

    def roots(self) -> list[Root]:
        """Every root this agent reads, whether or not it exists yet: by
        default its first root alone."""
        return [Root.check(self.root, self.root_kind or self.name, self.env.uid)]

    @abstractmethod
    def watch_dirs(self) -> list[Path]:
        """The directories whose entries name sessions (watched, not whole trees)."""

    def listed_dirs(self) -> list[Path]:
        """The directories a listing of every session reads, which unlisted()
        checks: the watched ones, and any it reads without watching."""
        return self.watch_dirs()

    def databases(self) -> list[Path]:
        """Its SQLite databases whose rows may name sessions (looked at
        again for the id after a removal)."""
        return []

    @abstractmethod
    def canonical_id(self, raw: str) -> str | None:
        """The canonical form of a session id, or None when `raw` is not one.
        Everything a user or a file names goes through here first."""

    @abstractmethod
    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """Every session (or those of canonical ids `names`) with every
        artifact, from the disk, never the index; half-removed ones too.
        Malformed entries are skipped with a log line, never raised."""

    @abstractmethod
    def session_for_path(self, path: str) -> str | None:
        """The session a path (as a watcher reports it) belongs to."""

    def names_leftovers(self, paths: list[str]) -> set[str]:
        """Which of `paths` (runtime leftovers, leftovers.KINDS) a session
        still names: those stay. By default every one."""
        return set(paths)

    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """Evidence that a process has the session open; by default a
        command line holding the id as a token."""
        return procs.naming(session.id)

    def lock_files(self, session: Session) -> list[Path]:
        """The agent's own lock files the pruner must hold exclusively too."""
        return []

    def describe(self, session: Session) -> Described:
        """Its title or first prompt and its start (adapters.heads). Never raises."""
        return Described()

    def remove(self, session: Session, remover: Remover) -> None:
        """Remove the session: the record the agent lists it by first
        (invariant 5); linked artifacts are reported, never removed (6)."""
        remove_files(session.artifacts, remover)
        for path in session.residual:
            remover.residual(path)

    def split(self) -> Split | None:
        """The scan in parts that child processes run; None: one part."""
        return None

    def may_hold(self, evidence: Sequence[Artifact], procs: ProcessTable) -> bool:
        """Whether holders() may find a session in use through `evidence`
        (its artifacts of `evidence_kinds`): the survey looks only at those."""
        return True


def remove_files(artifacts: Iterable[Artifact], remover: Remover) -> None:
    """The primary records first (invariant 5), then the rest; one behind a
    link is reported, never removed (invariant 6)."""
    for artifact in sorted(artifacts, key=lambda a: not a.primary):
        if artifact.linked:
            remover.residual(artifact.path)
        else:
            remover.remove_path(artifact)


def session_of(agent: str, sid: str, artifacts: list[Artifact], **fields: Any) -> Session:
    """The Session of `artifacts` (and Session `fields`): the primary records
    first (invariant 5), its bytes their sum."""
    artifacts.sort(key=lambda a: not a.primary)
    size = sum(a.bytes for a in artifacts)
    return Session(agent=agent, id=sid, artifacts=artifacts, bytes=size, **fields)


def each_session(ids: Iterable[str], make: Callable[[str], Session | None]) -> Iterator[Session]:
    """make(sid) of each id in sorted order, but for those that made none."""
    return (s for sid in sorted(ids) if (s := make(sid)) is not None)


def listed(
    adapter: Adapter, ids: Iterable[str], known: Known | None = None
) -> dict[str, Session | None]:
    """sessions() of `ids` as given (any spelling), by the id as given:
    None for one that is not the agent's or has nothing on the disk."""
    sids = {raw: adapter.canonical_id(raw) for raw in ids}
    wanted = frozenset(sid for sid in sids.values() if sid is not None)
    found = {s.id: s for s in adapter.sessions(wanted, known)} if wanted else {}
    return {raw: found.get(sid) if sid is not None else None for raw, sid in sids.items()}


def load(adapter: Adapter, sid: str) -> Session | None:
    """One session listed again from the disk; None when nothing of it is left."""
    return listed(adapter, [sid])[sid]


def expected_sessions(adapter: Adapter) -> int | None:
    """split()'s cheap count of the sessions a scan will find, or None."""
    split = adapter.split()
    return split.expected() if split is not None else None


def sessions_named(adapter: Adapter, paths: Iterable[str]) -> set[str]:
    """The sessions these paths (new entries, changed files) belong to."""
    return {sid for path in paths if (sid := adapter.session_for_path(path))}


def unlisted(adapter: Adapter) -> dict[str, str]:
    """The agent's roots and listed dirs that cannot be listed now (path ->
    why): a change rescans it (no mtime or watch sees a permission change)."""
    return fsio.unlisted([*(r.path for r in adapter.roots()), *adapter.listed_dirs()])


# Past this many changes, or a quarter of the agent's sessions, listing the
# whole agent again costs less than looking each change up.
LOOKUPS_ALONE = 256


def listing_again_is_cheaper(changes: int, sessions: int) -> bool:
    """Whether listing the whole agent again costs less than `changes` lookups."""
    return changes > max(LOOKUPS_ALONE, sessions // 4)


# The ids of zero, grok, gemini and opencode: a letter or digit, then up to
# 127 letters, digits, `_` and `-`. No `/`, `.` or `..` can ever pass.
NAME_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def name_id(raw: str) -> str | None:
    """`raw` when it is a NAME_ID, else None."""
    return raw if isinstance(raw, str) and NAME_ID.fullmatch(raw) else None


def valid_name(name: str) -> bool:
    """A single path component that cannot walk anywhere."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name
