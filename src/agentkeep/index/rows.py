"""Sessions as the index stores them, a row per session and per artifact."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from agentkeep.model import Session

# Sessions written per statement by a scan.
BATCH = 500


@dataclass(slots=True)
class Rows:
    """A row per session and per artifact, built where the sessions are
    measured (a scan's worker sends tuples: they pickle far faster)."""

    sessions: list[tuple[object, ...]]
    artifacts: list[tuple[object, ...]]
    bytes: int = 0


def rows(sessions: Iterable[Session], restored: Mapping[tuple[str, str], float]) -> Rows:
    """The rows of `sessions`, dated with their `restored` times."""
    done = Rows([], [])
    for s in sessions:
        activity = s.last_activity(restored.get(s.key))
        done.bytes += s.bytes
        disk = sum(a.disk_bytes for a in s.artifacts)
        unreadable = json.dumps(sorted(set(s.unreadable))) if s.unreadable else None
        done.sessions.append(
            (s.agent, s.id, s.workspace, s.parent, activity)
            + (s.bytes, len(s.artifacts), s.unsafe, disk, unreadable)
        )
        done.artifacts += [
            (s.agent, s.id, a.path, a.kind, a.bytes, a.mtime, a.root)
            + (a.primary, a.linked, a.is_dir, a.disk_bytes)
            for a in s.artifacts
        ]
    return done


def batches(
    sessions: Iterable[Session], restored: Mapping[tuple[str, str], float]
) -> Iterator[Rows]:
    """rows() of BATCH sessions at a time: a batch bounds a scan's memory
    and its statements."""
    batch: list[Session] = []
    for session in sessions:
        batch.append(session)
        if len(batch) == BATCH:
            yield rows(batch, restored)
            batch.clear()
    yield rows(batch, restored)
