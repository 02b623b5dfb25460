"""Who holds a session: the evidence of use the prune's plan reads.

In use: a process holds it (read through the agent's adapter), a lease of it
is held (agentkeep's own or an agent's lock file), or it is pinned. Looked up
on demand, only for sessions old enough to go, and again, `fresh`, under the
leases. `state` names the same rule for `ls` and `show`; `survey` looks it up
for many indexed sessions at once.
"""

from __future__ import annotations

import math
import os
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agentkeep import leases
from agentkeep.adapters.base import Adapter
from agentkeep.index import Index, IndexedSession
from agentkeep.model import Artifact, Holder, HolderKind, Session, State
from agentkeep.processes import ProcessTable

PROCESS_SNAPSHOT_TTL = 1.0


class Evidence(Protocol):
    """What the plan knows of a session's use."""

    def holders(self, s: Session) -> Sequence[Holder]:
        """The processes holding it."""
        ...

    def lease(self, s: Session) -> str | None:
        """A held lease of it, described (`lease <path>`), or None."""
        ...

    def pinned(self, s: Session) -> bool:
        """Whether it is pinned."""
        ...


@dataclass(frozen=True)
class Observed:
    """Evidence as plain values, looked at already."""

    holding: Mapping[tuple[str, str], Sequence[Holder]] = field(default_factory=dict)
    leased: Mapping[tuple[str, str], str] = field(default_factory=dict)
    pins: frozenset[tuple[str, str]] = frozenset()

    def holders(self, s: Session) -> Sequence[Holder]:
        """The processes seen holding it."""
        return self.holding.get(s.key, ())

    def lease(self, s: Session) -> str | None:
        """Its held lease seen, described."""
        return self.leased.get(s.key)

    def pinned(self, s: Session) -> bool:
        """Whether it was pinned."""
        return s.key in self.pins


class Watch:
    """The evidence of one user's sessions, looked up when asked: one process
    table for a whole run, read again as it ages."""

    def __init__(
        self,
        adapters: Mapping[str, Adapter],
        state_dir: Path,
        pins: set[tuple[str, str]],
        uid: int | None = None,
        procs: ProcessTable | None = None,
    ) -> None:
        """`procs`: a process table read already, kept for this Watch's life
        (only a `fresh` look adds what started since)."""
        self.adapters = adapters
        self.state_dir = state_dir
        self.pins = pins
        self.uid = uid
        self._procs = procs
        self._procs_at = math.inf if procs is not None else 0.0

    def evidence(self, fresh: bool = False) -> Evidence:
        """`fresh`: for the check under the leases, the process table looked
        at again now, once for every session checked with this evidence."""
        return _Looked(self, self.procs(fresh=True) if fresh else None)

    def procs(self, fresh: bool = False) -> ProcessTable:
        """The user's processes. `fresh`: every process started since the last
        look is read too; a full snapshot at most PROCESS_SNAPSHOT_TTL old also
        catches a command line exec'd in place."""
        stale = time.monotonic() - self._procs_at > PROCESS_SNAPSHOT_TTL
        if self._procs is None or stale:
            self._procs = ProcessTable.snapshot(self.uid)
            self._procs_at = time.monotonic()
        elif fresh:
            self._procs = self._procs.refreshed()
        return self._procs

    def lease(self, s: Session, ours: bool = True) -> str | None:
        """A held lease of `s`, described (`ours`: see _held_leases)."""
        held = next(self._held_leases(s, ours), None)
        return None if held is None else f"lease {held}"

    def _held_leases(self, s: Session, ours: bool = True) -> Iterator[Path]:
        """The held leases of `s`: agentkeep's own (unless `ours` is False: it
        has no lease file), then the agent's lock files."""
        paths = [leases.lease_path(self.state_dir, s.agent, s.id)] if ours else []
        paths += self.adapters[s.agent].lock_files(s)
        return (path for path in paths if leases.is_held(path))

    def holders(self, s: Session) -> list[Holder]:
        """Every holder of `s`, its held leases among them (what `show` lists)."""
        found = list(self.adapters[s.agent].holders(s, self.procs()))
        found += [Holder(None, HolderKind.LEASE, str(p)) for p in self._held_leases(s)]
        return found


@dataclass(frozen=True)
class _Looked:
    """The Watch's evidence (Watch.evidence)."""

    watch: Watch
    procs: ProcessTable | None  # read for the check under the leases; None: the plan's

    def holders(self, s: Session) -> Sequence[Holder]:
        """The processes holding it."""
        procs = self.procs if self.procs is not None else self.watch.procs()
        return self.watch.adapters[s.agent].holders(s, procs)

    def lease(self, s: Session) -> str | None:
        """A held lease of it, described."""
        return self.watch.lease(s)

    def pinned(self, s: Session) -> bool:
        """Whether it is pinned."""
        return s.key in self.watch.pins


def state(evidence: Evidence, s: Session) -> State:
    """The rule of use as `ls` and `show` name it, in static_reason's order."""
    if evidence.holders(s):
        return State.LIVE
    if evidence.lease(s):
        return State.HELD
    return State.PINNED if evidence.pinned(s) else State.IDLE


def shown(watch: Watch, s: Session) -> tuple[State, list[Holder]]:
    """Every holder of `s` (held leases among them) and its state, from one look."""
    holders = watch.holders(s)
    held = [h.detail for h in holders if h.kind is HolderKind.LEASE]
    seen = Observed(
        holding={s.key: [h for h in holders if h.kind is not HolderKind.LEASE]},
        leased={s.key: f"lease {held[0]}"} if held else {},
        pins=frozenset(watch.pins),
    )
    return state(seen, s), holders


def indexed(s: IndexedSession, artifacts: list[Artifact] | None = None) -> Session:
    """An indexed session as the plan reads one, with `artifacts` (those the
    adapter reads its evidence of use from)."""
    return Session(
        s.agent,
        s.id,
        s.workspace,
        s.parent,
        artifacts or [],
        updated=s.last_activity,
        undated=s.last_activity is None,
        bytes=s.bytes,
        recorded_unsafe=s.unsafe,
        disk_bytes=s.disk_bytes,
    )


def survey(watch: Watch, index: Index, ids: Mapping[str, Iterable[str]]) -> Observed:
    """The evidence of the sessions `ids` (by agent, each read once), looked
    up at once: only the suspects (_suspects) one by one; every other one is
    idle for certain. The pins given back are those of `ids`."""
    kinds = set().union(*(a.evidence_kinds for a in watch.adapters.values()))
    arts = index.all_artifacts(next(iter(ids)) if len(ids) == 1 else None, kinds)
    procs = watch.procs()  # one table for the whole survey
    holding: dict[tuple[str, str], Sequence[Holder]] = {}
    leased: dict[tuple[str, str], str] = {}
    pins: set[tuple[str, str]] = set()
    for agent, agent_ids in ids.items():
        adapter = watch.adapters.get(agent)
        pinned = {i for a, i in watch.pins if a == agent}
        evident = {
            i
            for (a, i), found in arts.items()
            if a == agent and (adapter is None or adapter.may_hold(found, procs))
        }
        suspects, leased_ids = _suspects(
            adapter, procs, agent, agent_ids, pinned | evident, _lease_named(watch.state_dir, agent)
        )
        # A pinned id is always a suspect: the pins of `ids` are among them.
        pins.update((agent, sid) for sid in suspects if sid in pinned)
        for start in range(0, len(suspects), _LOOKED_AT):
            for r in index.sessions_of(agent, suspects[start : start + _LOOKED_AT]):
                s = indexed(r, arts.get((agent, r.id), []))
                if held_by := watch.adapters[agent].holders(s, procs):
                    holding[s.key] = held_by  # live either way: its leases need no probe
                elif lease := watch.lease(s, ours=s.id in leased_ids):
                    leased[s.key] = lease
    return Observed(holding, leased, frozenset(pins))


# Suspects read from the index at a time.
_LOOKED_AT = 1000


def _lease_named(state_dir: Path, agent: str) -> Callable[[str], bool] | None:
    """Whether an id has a lease file (only those can be held); None when none
    has. The few names are decoded rather than every id encoded, unless one
    is a long id's digest form (`%%`)."""
    try:
        names = os.listdir(state_dir / "leases" / agent)
    except OSError:
        return None
    stems = {n[: -len(".lock")] for n in names if n.endswith(".lock")}
    if any("%%" in stem for stem in stems):
        return lambda sid: _encodes_to(sid, stems)
    decoded = {sid for sid in map(urllib.parse.unquote, stems) if _encodes_to(sid, stems)}
    return decoded.__contains__ if decoded else None


def _encodes_to(sid: str, stems: set[str]) -> bool:
    try:
        return leases.encode_id(sid) in stems
    except (ValueError, UnicodeError):  # an empty id, an unencodable one
        return False


def _suspects(
    adapter: Adapter | None,
    procs: ProcessTable,
    agent: str,
    ids: Iterable[str],
    found: set[str],
    lease_named: Callable[[str], bool] | None,
) -> tuple[list[str], set[str]]:
    """Those of `ids` that may be other than idle, and those of them with a
    lease file. holders() reads a session through its id (a whole token of
    a command line), its evidence artifacts (`found`: with those, or a pin)
    and what no session names, which a probe with an empty id finds: when
    that probe or an unreadable process could hold any session, or the
    adapter has lock files of its own, every session is a suspect."""
    every = (
        adapter is None
        or bool(procs.doubtful())
        or type(adapter).lock_files is not Adapter.lock_files
        or bool(adapter.holders(Session(agent, ""), procs))
    )
    suspects, leased = [], set()
    for sid in ids:
        if lease_named is not None and lease_named(sid):
            leased.add(sid)
        elif not (every or sid in found or procs.names(sid)):
            continue
        suspects.append(sid)
    return suspects, leased
