"""What the shell completes: agent names from the config, session ids from
the index (and the trash, for `restore`).

Click's completion machinery runs the command with `_AGENTKEEP_COMPLETE`
set at every Tab, so this must be cheap and must never change anything: it
reads the index read-only and never scans, never creates the state dir,
and completes nothing rather than fail.
"""

from __future__ import annotations

import click
from click.shell_completion import CompletionItem

from agentkeep.paths import Env


def agents(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The agents the user's config enables, and its stores."""
    from agentkeep import view

    env = Env.from_environ()
    config, _ = view.load(env, env.state_dir)
    names = [*config.enabled, *(store.name for store in config.stores)]
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def session_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The indexed sessions of the agent already given, newest first, each
    with its workspace as help (zsh and fish show it)."""
    import sqlite3
    import urllib.parse
    from contextlib import closing

    agent = ctx.params.get("agent")
    if not agent:
        return []
    index = Env.from_environ().state_dir / "index.sqlite"
    if not index.is_file():
        return []
    # Read-only, and no other way in: completion never writes the index.
    uri = f"file:{urllib.parse.quote(str(index))}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True, timeout=1)) as db:
            rows = db.execute(
                "SELECT id, workspace FROM sessions WHERE agent = ? AND substr(id, 1, ?) = ?"
                " ORDER BY last_activity IS NULL, last_activity DESC",
                (agent, len(incomplete), incomplete),
            ).fetchall()
    except sqlite3.Error:
        return []
    return [CompletionItem(sid, help=ws if isinstance(ws, str) else None) for sid, ws in rows]


def trashed_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The sessions of the agent already given that wait in the trash."""
    from agentkeep import logs
    from agentkeep.trash.entries import TrashError, list_entries

    # An unreadable entry is logged: on stderr, never into the completions.
    logs.configure(level="error")
    agent = ctx.params.get("agent")
    try:
        entries = list_entries(Env.from_environ().state_dir)
    except (TrashError, OSError):
        return []
    return [
        CompletionItem(e.id) for e in entries if e.agent == agent and e.id.startswith(incomplete)
    ]
