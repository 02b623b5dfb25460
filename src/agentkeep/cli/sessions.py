"""The commands that read the sessions: scan, ls, show, du."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from agentkeep.cli.group import agent_option, json_option, main, session_arguments, wide_option
from agentkeep.runner import Runner, emit_json, progress_bar, text_out

if TYPE_CHECKING:
    from agentkeep.core.context import Context


@main.command()
@json_option
def scan(as_json: bool) -> None:
    """Rebuild the index from disk now."""
    r = Runner()

    def body() -> None:
        from agentkeep import render

        with progress_bar("scanning") as bar:

            def local(ctx: Context) -> dict[str, Any]:
                from agentkeep.core import indexing

                return indexing.scan(ctx, bar.progress)

            doc = r.ask("scan", {}, local)
        emit_json(doc) if as_json else render.scan(text_out(), doc)

    r.run(body)


@main.command("ls")
@agent_option()
@click.option(
    "--idle-over",
    default=None,
    metavar="AGE",
    help="Only sessions idle longer than AGE (30d, 12h).",
)
@wide_option
@json_option
def ls_cmd(agent: str | None, idle_over: str | None, wide: bool, as_json: bool) -> None:
    """The sessions in the index, oldest activity first."""
    r = Runner()

    def local(ctx: Context) -> str:
        from agentkeep.core.sessions import ls_text

        return ls_text(ctx, agent, idle_over).text

    def body() -> None:
        # As text: the daemon's answer (or the core's) is printed as it
        # came, never decoded and encoded again (jsontext).
        text = r.ask("ls", {"agent": agent, "idle_over": idle_over}, local, raw=True)
        if as_json:
            from agentkeep.jsontext import unfolded

            click.echo(unfolded(text))
        else:
            import json

            from agentkeep import render
            from agentkeep.core.reclaim import reclaim_hint

            rows = json.loads(text)
            # The states just listed are not looked at again for the hint.
            known = {(row["agent"], row["id"]): row["state"] for row in rows}
            render.sessions(text_out(wide), rows, reclaim_hint(r.ctx, known))

    r.run(body)


@main.command()
@session_arguments()
@wide_option
@json_option
def show(agent: str, session_id: str, wide: bool, as_json: bool) -> None:
    """One session: its artifacts, holders, parent and children."""
    r = Runner()

    def local(ctx: Context) -> dict[str, Any]:
        from agentkeep.core import sessions

        return sessions.show(ctx, agent, session_id)

    def body() -> None:
        doc = r.ask("show", {"agent": agent, "id": session_id}, local)
        if as_json:
            emit_json(doc)
        else:
            from agentkeep import render

            render.show(text_out(wide), doc)

    r.run(body)


@main.command()
@click.option(
    "--by",
    type=click.Choice(["agent", "workspace", "kind"]),
    default="agent",
    show_default=True,
    help="Group the sessions by agent or by workspace, or the whole disk use by kind.",
)
@wide_option
@json_option
def du(by: str, wide: bool, as_json: bool) -> None:
    """Where the disk went (allocated blocks, as du counts), largest first,
    with what is reclaimable now."""
    r = Runner()

    def local(ctx: Context) -> dict[str, Any]:
        from agentkeep.core import reclaim

        return reclaim.du(ctx, by)

    def body() -> None:
        doc = r.ask("du", {"by": by}, local)
        if as_json:
            emit_json(doc)
        else:
            from agentkeep import render
            from agentkeep.core.reclaim import reclaim_hint
            from agentkeep.core.trashcan import trash_total

            # By kind, the trash is a group of its own.
            held = trash_total(r.env.state_dir) if by != "kind" else None
            render.du(text_out(wide), doc, reclaim_hint(r.ctx), held)

    r.run(body)
