"""Measuring what a pass found of a session into a Session: its artifacts'
sizes (each inode counted once), its transcripts first, and the workspace
and parent their heads name. A scan part is measured where it runs, in a
worker process for a big home, so it is small and cheap to pickle."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from agentkeep import disk
from agentkeep.adapters.claude.grouping import FoundSession, Item
from agentkeep.adapters.claude.ids import AGENT
from agentkeep.adapters.claude.transcripts import lineage
from agentkeep.adapters.dirs import unreadable
from agentkeep.model import Session


def measure(
    sid: str, found: list[Item], job_parent: str | None, unlisted: tuple[str, ...]
) -> Session | None:
    """Measure what was found of a session into a Session; None when all of
    it vanished meanwhile. `unlisted`: the places that could not be listed
    where it could have entries (grouping.Reach), to which its own
    directories that cannot be are added."""
    seen: set[tuple[int, int]] = set()
    items = sorted(found, key=lambda f: (not f[4], f[0]))
    artifacts = []
    for path, kind, root, linked, primary, foreign in items:
        artifact = disk.artifact(
            path, kind, root, primary=primary, linked=linked, seen=seen, foreign=foreign
        )
        if artifact is not None:
            artifacts.append(artifact)
    if not artifacts:
        return None
    workspace, parent = lineage(sid, [item[0] for item in items if item[4]])
    return Session(
        agent=AGENT,
        id=sid,
        workspace=workspace,
        parent=parent or job_parent,
        artifacts=artifacts,
        bytes=sum(a.bytes for a in artifacts),
        unreadable=unreadable(artifacts, unlisted),
    )


@dataclass(frozen=True)
class Measuring:
    """A scan part: sessions one listing found, measured where it runs (in a
    worker process for a big home: measuring is most of a scan)."""

    found: list[FoundSession]

    def __call__(self) -> Iterator[Session]:
        for what in self.found:
            session = measure(*what)
            if session is not None:
                yield session
