"""`agentkeep history`: the record of what went, as a person asks for it, and
its lines forgotten on request. Always in-process, like the trash."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agentkeep import history
from agentkeep.core.context import parse_age
from agentkeep.errors import BadParams
from agentkeep.leases import encode_id
from agentkeep.trash.entries import agent_dirs


def history_list(
    state_dir: Path,
    agent: str | None = None,
    workspace: str | None = None,
    grep: str | None = None,
) -> list[dict[str, Any]]:
    """Every line of the record that matches, oldest first. `workspace`: the
    folder and below; `grep`: text in the title, id or workspace, case aside.
    `restorable`: it is in the trash now."""
    folder = None if workspace is None else os.path.abspath(os.path.expanduser(workspace))
    needle = None if grep is None else grep.casefold()
    in_trash = _in_trash(state_dir)
    return [
        gone.to_json()
        | {"restorable": gone.restorable and (gone.agent, encode_id(gone.id)) in in_trash}
        for gone in history.read(state_dir)
        if (agent is None or gone.agent == agent)
        and (folder is None or _below(gone.workspace, folder))
        and (needle is None or _mentions(gone, needle))
    ]


def history_forget(
    state_dir: Path,
    agent: str | None = None,
    session_id: str | None = None,
    older_than: str | None = None,
) -> dict[str, int]:
    """Forget the lines of one session, or those older than `older_than` (of
    `agent` alone, when given): a forget must name what it removes."""
    if session_id is not None and older_than is not None:
        raise BadParams("history --forget takes --id or --older-than, not both")
    if session_id is not None:
        if agent is None:
            raise BadParams("history --forget --id needs --agent: ids are an agent's")
        one = (agent, session_id)
        return {"forgotten": history.forget(state_dir, lambda g: (g.agent, g.id) == one)}
    if older_than is None:
        raise BadParams("history --forget needs --agent A --id ID, or --older-than AGE")
    before = time.time() - parse_age(older_than, "--older-than")
    return {
        "forgotten": history.forget(
            state_dir, lambda g: g.time < before and (agent is None or g.agent == agent)
        )
    }


def _in_trash(state_dir: Path) -> set[tuple[str, str]]:
    """(agent, encoded id) of every entry in the trash, by its directory."""
    found: set[tuple[str, str]] = set()
    for agent_dir in agent_dirs(state_dir):
        found |= {(agent_dir.name, name) for name in os.listdir(agent_dir)}
    return found


def _below(workspace: str | None, folder: str) -> bool:
    below = folder.rstrip("/") + "/"
    return workspace is not None and (workspace == folder or workspace.startswith(below))


def _mentions(gone: history.Gone, needle: str) -> bool:
    return any(needle in (text or "").casefold() for text in (gone.title, gone.id, gone.workspace))
