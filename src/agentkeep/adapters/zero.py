"""zero: one directory per session under `$XDG_DATA_HOME/zero/sessions`.

`<root>/<id>/` holds `metadata.json` (what zero lists sessions by:
`sessionId`, `parentSessionId`, `updatedAt`), `events.jsonl`, checkpoints,
`session.lock` and `lease.lock`, which zero flocks shared while a process
has the session open: agentkeep honours it (FIELD-NOTES.md "zero").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from agentkeep import fsio
from agentkeep.adapters import dirs, heads
from agentkeep.adapters.base import Adapter, Known, each_session, name_id, session_of
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Described, Session

log = structlog.get_logger("agentkeep.adapters.zero")

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
    """zero's sessions."""

    name = "zero"
    root_kind = "sessions"
    canonical_id = staticmethod(name_id)

    def watch_dirs(self) -> list[Path]:
        """The root, whose entries are the sessions."""
        return [self.root] if os.path.isdir(self.root) else []

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """Every `<root>/<id>/`, or those of `names`."""
        problem = dirs.root_problem(self.env, self.root)
        if names is None:
            names = frozenset(self._ids())
        return each_session(names, lambda sid: self._session(sid, problem))

    def session_for_path(self, path: str) -> str | None:
        """The id of the session dir `path` lies in."""
        parts = dirs.parts_below(path, self.root)
        return name_id(parts[0]) if parts else None

    def lock_files(self, session: Session) -> list[Path]:
        """zero's own `lease.lock`."""
        sid = name_id(session.id)
        return [self.root / sid / LEASE] if sid is not None else []

    def describe(self, session: Session) -> Described:
        """Its title and creation time, where metadata.json has them."""
        for artifact in session.artifacts:
            if os.path.basename(artifact.path) == METADATA and not artifact.linked:
                meta = heads.read_json_head(artifact.path)
                if isinstance(meta, dict):
                    title = heads.first_title(meta.get("title"), meta.get("name"))
                    return Described(title, parse_agent_time(meta.get("createdAt")))
        return Described()

    def _ids(self) -> Iterator[str]:
        for entry in dirs.entries(self.root):
            if (sid := name_id(entry.name)) is None:
                log.info("skipped: not a zero session id", path=entry.path)
            else:
                yield sid

    def _session(self, sid: str, problem: str | None) -> Session | None:
        """The session in `<root>/<sid>/`; a directory of it that cannot be
        listed keeps it unsafe. Invariant 6: what lies behind a link (or on a
        root others can write to) is never removed."""
        directory = self.root / sid
        if not os.path.isdir(directory):  # follows a link: a linked session dir is reported
            if os.path.lexists(directory):
                log.info("skipped: not a session directory", path=str(directory))
            return None
        unlisted = dirs.Unlisted()
        artifacts = dirs.directory_artifacts(
            str(directory),
            str(self.root),
            primary=METADATA,
            kinds=KINDS,
            linked=problem is not None,
            seen=set(),
            unlisted=unlisted,
        )
        if not artifacts:
            return None
        meta = _metadata(sid, directory / METADATA)
        return session_of(
            self.name,
            sid,
            artifacts,
            workspace=meta.workspace,
            parent=meta.parent,
            updated=meta.updated,
            undated=meta.undated,
            unreadable=dirs.unreadable(artifacts, unlisted),
        )


def _metadata(sid: str, path: Path) -> _Metadata:
    """What metadata.json says. Absent (a half-removed session) says nothing;
    unreadable, malformed or naming another session makes the session
    undated: a time we cannot read never makes it idle."""
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
    updated, raw = None, record.get("updatedAt")
    if raw is not None and (updated := parse_agent_time(raw)) is None:
        log.info("unreadable updatedAt", path=str(path), value=str(raw)[:64])
    undated = raw is not None and updated is None
    return _Metadata(_parent(record, sid, path), updated, _workspace(record), undated)


def _parent(record: dict[str, object], sid: str, path: Path) -> str | None:
    raw = record.get("parentSessionId")
    if raw in (None, ""):
        return None
    if not isinstance(raw, str) or name_id(raw) is None or raw == sid:
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
