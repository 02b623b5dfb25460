"""Every place a session id names, and the kind of artifact each is:
`projects/<key>/` entries, the config areas, `jobs/<id[:8]>/` when its
state.json names the id, the registry, and the tmp trees. Only a name that
positively carries the id is the session's: everything else there is
shared and never touched, even a file whose content names a session
(history.jsonl, 2.1.332's `plugins/store/<plugin>.json`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentkeep.adapters.base import valid_name
from agentkeep.adapters.claude.ids import canonical
from agentkeep.adapters.claude.reading import read_json
from agentkeep.adapters.claude.registry import REGISTRY_KEY_NAME, REGISTRY_NAME, registry_id
from agentkeep.adapters.claude.roots import Layout

# The kinds of artifact, as the index records them.
TRANSCRIPT = "transcript"
SESSION_DIR = "session-dir"
FILE_HISTORY = "file-history"
SESSION_ENV = "session-env"
TASKS = "tasks"
UPLOADS = "uploads"
TODOS = "todos"
DEBUG_LOG = "debug-log"
USAGE_DATA = "usage-data"
REMOTE_TIP = "remote-tip"
RECORDING = "recording"
JOB = "job"
REGISTRY = "registry"
REGISTRY_KEY = "registry-key"
TMP = "tmp"

# The names an id is read from: `todos/<id>-agent-<...>.json`,
# `jobs/<id[:8]>/`, `projects/<key>/<id>-<ms>.cast`, `<id>.ccr-tip.json`.
_TODO = re.compile(r"(?P<id>[0-9a-fA-F-]{36})-agent-.+\.json")
JOB_NAME = re.compile(r"[0-9a-fA-F]{8}")
_RECORDING = re.compile(r"(?P<id>[0-9a-fA-F-]{36})-[0-9]{1,20}\.cast")
_REMOTE_TIP_SUFFIX = ".ccr-tip.json"


@dataclass(frozen=True)
class _Area:
    """A directory of the config root whose entries are named by session:
    `<area>/<id><suffix>` (a directory when `suffix` is empty, and then
    everything below it is the session's too), or, when `suffix` is None,
    `<id>-agent-<...>.json` (todos: listed, not probed)."""

    path: str
    kind: str
    suffix: str | None

    @property
    def parts(self) -> tuple[str, ...]:
        """The path's components."""
        return tuple(self.path.split("/"))

    def identify(self, name: str) -> str | None:
        """The session id an entry's name carries, or None."""
        if self.suffix is None:
            match = _TODO.fullmatch(name)
            return canonical(match["id"]) if match else None
        return (
            canonical(name[: len(name) - len(self.suffix)]) if name.endswith(self.suffix) else None
        )

    def probe(self, spellings: list[str] | None) -> list[str] | None:
        """The names to probe for `spellings` of ids; None: list the area."""
        if spellings is None or self.suffix is None:
            return None
        return [s + self.suffix for s in spellings]


# What Claude writes per session under its config root (FIELD-NOTES.md):
# 2.x writes tasks/<id>/ where older versions wrote todos/; usage-data/ is
# /insights' cache. Each is what Claude's own sweep treats as per-session.
AREAS: tuple[_Area, ...] = (
    _Area("file-history", FILE_HISTORY, ""),
    _Area("session-env", SESSION_ENV, ""),
    _Area("tasks", TASKS, ""),
    _Area("uploads", UPLOADS, ""),
    _Area("todos", TODOS, None),
    _Area("debug", DEBUG_LOG, ".txt"),
    _Area("usage-data/session-meta", USAGE_DATA, ".json"),
    _Area("usage-data/facets", USAGE_DATA, ".json"),
)

WATCHED_AREAS = (*(a.path for a in AREAS), "jobs", "sessions")


def project_entry(name: str) -> tuple[str, str] | None:
    """(id, kind) of a session's entry in `projects/<key>/`: its transcript
    `<id>.jsonl`, its directory `<id>/`, the remote session's tip
    `<id>.ccr-tip.json`, a recording `<id>-<ms>.cast`. None for the rest
    (memory/ and anything else there is shared)."""
    if name.endswith(".jsonl"):
        sid, kind = canonical(name.removesuffix(".jsonl")), TRANSCRIPT
    elif name.endswith(_REMOTE_TIP_SUFFIX):
        sid, kind = canonical(name.removesuffix(_REMOTE_TIP_SUFFIX)), REMOTE_TIP
    elif match := _RECORDING.fullmatch(name):
        sid, kind = canonical(match["id"]), RECORDING
    else:
        sid, kind = canonical(name), SESSION_DIR
    return (sid, kind) if sid is not None else None


def project_id(name: str) -> str | None:
    """The id of project_entry()."""
    entry = project_entry(name)
    return entry[0] if entry is not None else None


def project_path_id(parts: list[str]) -> str | None:
    """A session's entry of `<key>/` or anything under `<key>/<id>/`; memory
    and the rest are shared."""
    if len(parts) < 2 or not valid_name(parts[0]):
        return None
    return project_id(parts[1]) if len(parts) == 2 else canonical(parts[1])


def config_path_id(layout: Layout, parts: list[str]) -> str | None:
    """The session a path below the config root (as `parts`) belongs to: an
    area's entry or anything in a session's directory there, a job its
    state.json names, a registry file by its record; None when shared."""
    for known in AREAS:
        depth = len(known.parts)
        if tuple(parts[:depth]) == known.parts and len(parts) > depth:
            # A session's directory holds its files; a file is itself.
            if known.suffix == "" or len(parts) == depth + 1:
                return known.identify(parts[depth])
            return None
    if len(parts) < 2:
        return None
    area, name = parts[0], parts[1]
    if area == "jobs" and JOB_NAME.fullmatch(name):
        state = read_json(str(layout.config.path / "jobs" / name / "state.json"))
        sid = canonical(state.get("sessionId")) if isinstance(state, dict) else None
        return sid if sid is not None and sid[:8] == name.lower() else None
    if area == "sessions" and len(parts) == 2:
        match = REGISTRY_NAME.fullmatch(name) or REGISTRY_KEY_NAME.fullmatch(name)
        if match:
            registry = layout.config.path / "sessions" / f"{match['pid']}.json"
            return registry_id(read_json(str(registry)))
    return None
