"""Which workspace a Gemini project temp dir is for, and the project hash
(the sha256 of the workspace's path: older Gemini's dir name, every chat's
`projectHash`, and Qwen Code's `tmp/<hash>/`).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentkeep import fsio

log = structlog.get_logger("agentkeep.adapters.gemini")

# A project temp dir's name when it is a workspace's project_hash.
PROJECT_HASH = re.compile(r"[0-9a-f]{64}")
PROJECT_ROOT_FILE = ".project_root"
PROJECTS_FILE = "projects.json"
PROJECTS_LIMIT = 4 * 1024 * 1024
SMALL_FILE = 4 * 1024


def project_hash(workspace: str) -> str:
    """The hash a workspace's project temp dir and chats are named by."""
    return hashlib.sha256(workspace.encode()).hexdigest()


def is_workspace(value: object) -> bool:
    """Whether `value` can be a workspace: an absolute path, no NUL in it."""
    return isinstance(value, str) and os.path.isabs(value) and "\0" not in value


@dataclass(frozen=True)
class Workspaces:
    """`projects.json`: each workspace by its project's name and by the
    sha256 of its path (the legacy dir name, and every chat's projectHash)."""

    by_name: dict[str, str] = field(default_factory=dict)
    by_hash: dict[str, str] = field(default_factory=dict)

    def of(self, project: str, hashed: str | None = None) -> str | None:
        """The workspace of a project dir's name, or of a chat's projectHash."""
        return (
            self.by_name.get(project)
            or self.by_hash.get(project)
            or (self.by_hash.get(hashed) if hashed else None)
        )


def workspaces(root: Path) -> Workspaces:
    """What `projects.json` says (nothing when it is missing, a link, too big
    or malformed: the workspace is then unknown)."""
    path = root / PROJECTS_FILE
    value = fsio.read_small_json(path, PROJECTS_LIMIT)
    projects = value.get("projects") if isinstance(value, dict) else None
    if not isinstance(projects, dict):
        if os.path.lexists(path):
            log.info("projects.json is not readable", path=str(path))
        return Workspaces()
    found = Workspaces()
    for workspace, name in projects.items():
        if not (isinstance(name, str) and is_workspace(workspace)):
            continue
        found.by_name.setdefault(name, workspace)
        found.by_hash[project_hash(workspace)] = workspace
    return found


def project_root(project: Path) -> str | None:
    """The workspace Gemini recorded for a project dir (`.project_root`)."""
    try:
        text = fsio.read_regular(project / PROJECT_ROOT_FILE, limit=SMALL_FILE).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # missing, a link, too big, unreadable or not text
    text = text.strip()
    return text if is_workspace(text) and "\n" not in text else None
