"""The command that changes an agent's own settings: adopt."""

from __future__ import annotations

import click

from agentkeep.cli.group import json_option, main
from agentkeep.runner import Runner, emit_json, text_out


def _adoptable(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from agentkeep.adopt.settings import SETTINGS

    return [name for name in SETTINGS if name.startswith(incomplete)]


@main.command()
@click.argument("agent", shell_complete=_adoptable)
@click.option("--dry-run", is_flag=True, help="Show the change, write nothing.")
@click.option("--undo", is_flag=True, help="Put back what adopt changed.")
@json_option
def adopt(agent: str, dry_run: bool, undo: bool, as_json: bool) -> None:
    """Leave an agent's old sessions to agentkeep: turn off its own clean-up
    in its own settings (claude, gemini, qwen), keeping every other setting."""
    from agentkeep import adopt as adopting
    from agentkeep import render

    r = Runner()

    def body() -> None:
        change = adopting.plan_undo(r.env, agent) if undo else adopting.plan(r.env, agent)
        out = None if as_json else text_out()
        if out is not None:
            render.change(out, change)  # what it does, before it does it
        if not dry_run:
            adopting.apply(r.env, change)
        if out is not None:
            render.changed(out, change, dry_run, adopting.retention_note(r.env, change))
        else:
            emit_json(change.to_json(dry_run))

    r.run(body, as_json)
