"""zero: one directory per session under `$XDG_DATA_HOME/zero/sessions`.

`<root>/<id>/` holds `metadata.json` (what zero lists sessions by:
`sessionId`, `parentSessionId`, `updatedAt`), `events.jsonl`, checkpoints,
`session.lock` and `lease.lock`. zero holds `lease.lock` with a shared flock
while a process has the session open and its own pruner takes it
exclusively; agentkeep honours the same lock (FIELD-NOTES.md "zero").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import structlog

from agentkeep import agents, fsio
from agentkeep.adapters import heads
from agentkeep.adapters.base import NAME_ID, Adapter, Known, Root
from agentkeep.adapters.dirs import (
    Unlisted,
    directory_artifacts,
    entries,
    parts_below,
    root_problem,
    unreadable,
)
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Described, Session

log = structlog.get_logger("agentkeep.adapters.zero")

ID = NAME_ID
METADATA = "metadata.json"
LEASE = "lease.lock"
KINDS = {
    METADATA: "metadata",
    "events.jsonl": "events",
    "checkpoints": "checkpoints",
    "session.lock": "session-lock",
    LEASE: "lease-lock",
}
# metadata.json is a few hundred bytes; anything this big is not zero's.
METADATA_LIMIT = 256 * 1024
# Where zero might record the workspace; the first absolute path wins.
WORKSPACE_FIELDS = ("workspace", "workspaceRoot", "cwd")


@dataclass(frozen=True)
class _Metadata:
    parent: str | None = None
    updated: float | None = None
    workspace: str | None = None
    # Set when metadata.json exists but cannot be trusted for a time.
    undated: bool = False


class ZeroAdapter(Adapter):
    name = "zero"

    @cached_property
    def root(self) -> Path:
        return agents.roots(self.name, self.env)[0]

    def roots(self) -> list[Root]:
        return [Root.check(self.root, "sessions", self.env.uid)]

    def watch_dirs(self) -> list[Path]:
        return [self.root] if os.path.isdir(self.root) else []

    def canonical_id(self, raw: str) -> str | None:
        return raw if isinstance(raw, str) and ID.fullmatch(raw) else None

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        problem = root_problem(self.env, self.root)
        if names is not None:
            ids: list[str] = sorted(names)
        else:
            ids = []
            for entry in entries(self.root):
                sid = self.canonical_id(entry.name)
                if sid is None:
                    log.info("skipped: not a zero session id", path=entry.path)
                else:
                    ids.append(sid)
        for sid in ids:
            session = self._session(sid, problem)
            if session is not None:
                yield session

    def session_for_path(self, path: str) -> str | None:
        parts = parts_below(path, self.root)
        return self.canonical_id(parts[0]) if parts else None

    def lock_files(self, session: Session) -> list[Path]:
        sid = self.canonical_id(session.id)
        return [self.root / sid / LEASE] if sid is not None else []

    # -- reading ----------------------------------------------------------
    def describe(self, session: Session) -> Described:
        """Its title and creation time, where metadata.json has them."""
        for artifact in session.artifacts:
            if os.path.basename(artifact.path) == METADATA and not artifact.linked:
                meta = heads.read_json_head(artifact.path)
                if isinstance(meta, dict):
                    title = heads.first_title(meta.get("title"), meta.get("name"))
                    return Described(title, parse_agent_time(meta.get("createdAt")))
        return Described()

    def _session(self, sid: str, problem: str | None) -> Session | None:
        """The session in `<root>/<sid>/`; a directory of it that cannot be
        listed keeps it unsafe. A root that cannot be listed shows none
        (base.unlisted names it): nothing of them is known."""
        directory = self.root / sid
        if not os.path.isdir(directory):  # follows a link: a linked session dir is reported
            if os.path.lexists(directory):
                log.info("skipped: not a session directory", path=str(directory))
            return None
        # Invariant 6: what lies behind a link (or on a root others can
        # write to) is never removed; a linked metadata.json makes it unsafe.
        seen: set[tuple[int, int]] = set()
        unlisted = Unlisted()
        artifacts = directory_artifacts(
            str(directory),
            str(self.root),
            primary=METADATA,
            kinds=KINDS,
            linked=problem is not None,
            seen=seen,
            unlisted=unlisted,
        )
        if not artifacts:
            return None
        meta = self._metadata(sid, directory / METADATA)
        return Session(
            agent=self.name,
            id=sid,
            workspace=meta.workspace,
            parent=meta.parent,
            artifacts=artifacts,
            updated=meta.updated,
            undated=meta.undated,
            bytes=sum(a.bytes for a in artifacts),
            unreadable=unreadable(artifacts, unlisted),
        )

    def _metadata(self, sid: str, path: Path) -> _Metadata:
        """What metadata.json says. Absent (a half-removed session) says
        nothing; present but unreadable, malformed or naming another session
        makes the session undated: a time we cannot read never makes it idle."""
        if not os.path.lexists(path):
            return _Metadata()
        try:
            record = fsio.load_json(path, METADATA_LIMIT)
        except OSError as exc:
            log.info("metadata unreadable", path=str(path), error=str(exc))
            return _Metadata(undated=True)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            log.info("malformed metadata", path=str(path))
            return _Metadata(undated=True)
        named = record.get("sessionId")
        if named is not None and named != sid:
            log.info("metadata names another session", path=str(path), names=str(named)[:200])
            return _Metadata(undated=True)
        updated, undated = None, False
        if record.get("updatedAt") is not None:
            updated = parse_agent_time(record["updatedAt"])
            if updated is None:
                log.info(
                    "unreadable updatedAt", path=str(path), value=str(record["updatedAt"])[:64]
                )
                undated = True
        return _Metadata(_parent(record, sid, path), updated, _workspace(record), undated)


def _parent(record: dict[str, object], sid: str, path: Path) -> str | None:
    raw = record.get("parentSessionId")
    if raw in (None, ""):
        return None
    if not isinstance(raw, str) or not ID.fullmatch(raw) or raw == sid:
        log.info("ignored an invalid parentSessionId", path=str(path), value=str(raw)[:200])
        return None
    return raw


def _workspace(record: dict[str, object]) -> str | None:
    for field in WORKSPACE_FIELDS:
        value = record.get(field)
        if isinstance(value, str) and os.path.isabs(value) and "\0" not in value:
            return value
    return None


ADAPTER = ZeroAdapter
