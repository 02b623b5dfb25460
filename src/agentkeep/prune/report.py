"""What a prune reports: every session old enough to go ends here, removed,
kept with a reason, or failed (invariant 9); and the options of one run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from agentkeep.jsontext import indented_parts
from agentkeep.model import Reason, Shape, rfc3339
from agentkeep.progress import Progress
from agentkeep.spool import Spool

if TYPE_CHECKING:
    from agentkeep.compaction import Compacted
    from agentkeep.leftovers import Leftover

log = structlog.get_logger("agentkeep.prune")


class PruneRefused(Exception):
    """The prune cannot run as asked (no cutoff, a cutoff under the floor)."""


@dataclass
class Kept:
    """A session old enough to go that stays, and why."""

    agent: str
    id: str
    reason: Reason
    detail: str = ""


@dataclass
class Removed:
    """A session removed (a dry run: that would be)."""

    agent: str
    id: str
    bytes: int
    last_activity: float | None
    paths: list[str]
    residual: list[str] = field(default_factory=list)
    trashed: int = 0  # of `bytes`, what went into the trash
    why: str = "age"  # "age", "size" or "purge"
    # The agent's databases its rows were in: they have free pages now.
    databases: list[str] = field(default_factory=list)


class RemovedLog:
    """The sessions one run removed, in order. Past HELD they wait in a Spool
    and are read back as they are reported; a spool that cannot be written
    keeps the rest in memory: the report loses nothing."""

    HELD = 256

    def __init__(self) -> None:
        self._held: list[Removed] = []
        self._spool: Spool[Removed] = Spool()
        self._spilled = 0
        self._spilling = True
        self.bytes = 0
        self.trashed = 0
        self.databases: set[str] = set()

    def append(self, removed: Removed) -> None:
        """One more removed."""
        self._held.append(removed)
        self.bytes += removed.bytes
        self.trashed += removed.trashed
        self.databases.update(removed.databases)
        if self._spilling and len(self._held) >= self.HELD:
            self._spill()

    def _spill(self) -> None:
        try:
            self._spool.write(self._held)
        except OSError as exc:
            self._spilling = False
            log.warning("the report is held in memory", error=exc.strerror or str(exc))
            return
        self._spilled += len(self._held)
        self._held = []

    def __del__(self) -> None:
        self._spool.close()

    def __len__(self) -> int:
        return self._spilled + len(self._held)

    def __iter__(self) -> Iterator[Removed]:
        yield from self._spool
        yield from self._held


@dataclass
class Failed:
    """A session whose removal failed, and the error."""

    agent: str
    id: str
    reason: str


@dataclass
class PruneReport:
    """What one run did (the contract's prune report)."""

    cutoff: float | None
    cutoffs: dict[str, float | None]
    dry_run: bool
    removed: RemovedLog = field(default_factory=RemovedLog)
    kept: list[Kept] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    residual: list[tuple[str, str, str]] = field(default_factory=list)
    paused: str | None = None
    trash_until: float | None = None  # when what this run trashes expires
    leftovers: list[Leftover] = field(default_factory=list)
    compacted: list[Compacted] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        """Bytes of the sessions removed."""
        return self.removed.bytes

    @property
    def trashed(self) -> int:
        """Bytes moved to the trash, freed only when it expires."""
        if self.trash_until is None:
            return 0
        return self.bytes if self.dry_run else self.removed.trashed

    def to_json(self, paths: bool = True) -> dict[str, Any]:
        """The report as JSON; without `paths`, what a table of it shows."""
        doc = self._doc(paths)
        doc["removed"] = list(doc["removed"])
        return doc

    def json_parts(self) -> Iterator[str]:
        """`json.dumps(self.to_json(), indent=2)` in parts, never held whole."""
        return indented_parts(self._doc(paths=True))

    def _doc(self, paths: bool) -> dict[str, Any]:
        """The report as JSON, its "removed" an iterator (read once)."""
        doc: dict[str, Any] = {
            "cutoff": rfc3339(self.cutoff),
            "cutoffs": {a: rfc3339(c) for a, c in sorted(self.cutoffs.items())},
            "dry_run": self.dry_run,
            "removed": (
                {
                    "agent": r.agent,
                    "id": r.id,
                    "bytes": r.bytes,
                    "last_activity": rfc3339(r.last_activity),
                    "why": r.why,
                    **({"paths": r.paths} if paths else {}),
                }
                for r in self.removed
            ),
            "kept": [
                {"agent": k.agent, "id": k.id, "reason": k.reason.value, "detail": k.detail}
                for k in self.kept
            ],
            "failed": [{"agent": f.agent, "id": f.id, "reason": f.reason} for f in self.failed],
            "residual": [{"agent": a, "id": i, "path": p} for a, i, p in self.residual],
            "leftovers": [leftover.to_json() for leftover in self.leftovers],
            "compacted": [c.to_json() for c in self.compacted],
            "trash": None
            if self.trash_until is None
            else {
                "until": rfc3339(self.trash_until),
                "bytes": self.trashed,
                "freed_bytes": self.bytes - self.trashed,
            },
        }
        if self.paused:
            doc["paused"] = self.paused
        return doc

    def counts(self) -> dict[str, Any]:
        """How many sessions each outcome had (a dry run: `would_remove`)."""
        removed = len(self.removed)
        return {
            "removed": 0 if self.dry_run else removed,
            **({"would_remove": removed} if self.dry_run else {}),
            "kept": len(self.kept),
            "failed": len(self.failed),
            "paused": self.paused,
        }

    def summary(self, now: float, scheduled: bool) -> dict[str, Any]:
        """What `status` shows of the run (its last_prune)."""
        return {
            "time": rfc3339(now),
            "ts": now,
            "scheduled": scheduled,
            "dry_run": self.dry_run,
            **self.counts(),
            "bytes": 0 if self.dry_run else self.bytes,
            **({"would_free": self.bytes} if self.dry_run else {}),
            "trashed_bytes": self.trashed,
            "leftover_bytes": sum(leftover.bytes for leftover in self.leftovers),
            "compacted_bytes": sum(c.bytes_before - c.bytes_after for c in self.compacted),
            # What went wrong, in words (status must say why, not only how many).
            "errors": sorted({f.reason for f in self.failed})[:5],
        }


@dataclass
class PruneOptions:
    """One run. `cutoffs`: every agent considered and its cutoff (None: a size
    cap only); `shapes`: every enabled agent's; `purge`: the sessions a
    person named (whatever their age)."""

    cutoffs: dict[str, float | None]
    now: float
    dry_run: bool = False
    max_removals: int | None = None
    trash_for: float = 0.0
    scheduled: bool = False
    purge: list[tuple[str, str]] | None = None
    shapes: dict[str, Shape] = field(default_factory=dict)
    progress: Progress | None = None
