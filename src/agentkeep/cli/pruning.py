"""The commands that remove, keep or bring back sessions: prune, purge,
hold, pin, unpin, trash, restore, and history (the record of what went)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from agentkeep.cli.group import agent_option, json_option, main, session_arguments, wide_option
from agentkeep.errors import BadParams, Failed
from agentkeep.paths import Env
from agentkeep.runner import Runner, emit_json, emit_parts, progress_bar, text_out

if TYPE_CHECKING:
    from agentkeep.core.context import Context
    from agentkeep.prune.report import PruneReport


def _report(
    r: Runner, report: dict[str, Any] | PruneReport | None, as_json: bool, wide: bool
) -> int:
    """Print a prune's report (the daemon's answer, or the run's own, whose
    removals are written as they are read back); the exit code. A run here
    that moved sessions into the trash compresses them once its report is
    out (trash.packing says why then); the daemon does so for its own."""
    assert report is not None, "only a scheduled prune skips its turn"
    if as_json and not isinstance(report, dict):
        emit_parts(report.json_parts())
    elif as_json:
        emit_json(report)
    else:
        from agentkeep import render

        doc = report if isinstance(report, dict) else report.to_json(paths=False)
        render.report(text_out(wide), doc)
    if isinstance(report, dict):
        return Failed.exit if report["failed"] else 0
    if not report.dry_run and report.removed:
        sys.stdout.flush()
        from agentkeep.core.trashcan import compress_trash

        compress_trash(r.ctx.state_dir)
    return Failed.exit if report.failed else 0


@main.command()
@click.option("--dry-run", is_flag=True, help="Decide everything, remove nothing.")
@click.option(
    "--older-than",
    default=None,
    metavar="AGE",
    help="The cutoff (at least 1d); default: the config's retention.",
)
@agent_option()
@wide_option
@json_option
def prune(
    dry_run: bool, older_than: str | None, agent: str | None, wide: bool, as_json: bool
) -> None:
    """Remove sessions idle past the cutoff."""
    r = Runner()

    params: dict[str, Any] = {"dry_run": dry_run, "older_than": older_than, "agent": agent}

    def body() -> int:
        with progress_bar("pruning") as bar:

            def local(ctx: Context) -> PruneReport | None:
                from agentkeep.core import pruning

                return pruning.prune(ctx, **params, progress=bar.progress)

            doc = r.ask("prune", params, local)
        return _report(r, doc, as_json, wide)

    r.run(body, wide=wide)


@main.command()
@session_arguments()
@click.option("--dry-run", is_flag=True, help="Decide everything, remove nothing.")
@click.option("--cascade", is_flag=True, help="Remove the session's descendants first.")
@wide_option
@json_option
def purge(
    agent: str, session_id: str, dry_run: bool, cascade: bool, wide: bool, as_json: bool
) -> None:
    """Remove one session now, whatever its age."""
    r = Runner()
    params: dict[str, Any] = dict(agent=agent, id=session_id, dry_run=dry_run, cascade=cascade)

    def local(ctx: Context) -> PruneReport:
        from agentkeep.core import pruning

        return pruning.purge(ctx, **params)

    r.run(lambda: _report(r, r.ask("purge", params, local), as_json, wide), as_json, wide)


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@session_arguments()
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def hold(agent: str, session_id: str, command: tuple[str, ...]) -> None:
    """Hold a session's lease for as long as COMMAND runs: hold AGENT ID -- CMD [ARG...]."""
    from agentkeep import leases
    from agentkeep.core.ending import ends_as

    r = Runner()
    argv = list(command[1:] if command and command[0] == "--" else command)
    if not argv:
        raise BadParams("hold needs a command after --")
    sid = r.ctx.session_id(agent, session_id)
    try:
        leases.hold_and_exec(leases.lease_path(r.ctx.state_dir, agent, sid), argv)
    except leases.LeaseError as exc:
        raise ends_as(exc, f"cannot hold {agent} {sid}: {exc}") from None


def _pin_command(method: str, said: str, help: str) -> None:
    """`pin` or `unpin`, which differ only in what they set."""

    @main.command(method, help=help)
    @session_arguments()
    @json_option
    def command(agent: str, session_id: str, as_json: bool) -> None:
        r = Runner()

        def local(ctx: Context) -> dict[str, Any]:
            from agentkeep.core import sessions

            return sessions.pin(ctx, agent, session_id, method == "pin")

        def body() -> None:
            doc = r.ask(method, {"agent": agent, "id": session_id}, local)
            emit_json(doc) if as_json else click.echo(f"{said} {doc['agent']} {doc['id']}")

        r.run(body)


_pin_command("pin", "pinned", "Never prune this session.")
_pin_command("unpin", "unpinned", "Let this session be pruned again.")


@main.command("trash")
@click.option("--empty", is_flag=True, help="Free the trash now (under each session's lease).")
@click.option("--older-than", metavar="AGE", help="With --empty: only what was trashed before.")
@wide_option
@json_option
def trash_cmd(empty: bool, older_than: str | None, wide: bool, as_json: bool) -> None:
    """List the trash, or empty it now."""
    from agentkeep import render
    from agentkeep.core.trashcan import trash_empty, trash_list

    if older_than is not None and not empty:
        raise BadParams("--older-than goes with --empty")
    state_dir = Env.from_environ().state_dir

    def body() -> None:
        if not empty:
            doc = trash_list(state_dir)
            emit_json(doc) if as_json else render.trash_entries(text_out(wide), doc["entries"])
        else:
            doc = trash_empty(state_dir, older_than)
            emit_json(doc) if as_json else render.emptied(text_out(wide), doc)

    Runner().run(body, as_json)


@main.command()
@session_arguments(trashed=True)
@json_option
def restore(agent: str, session_id: str, as_json: bool) -> None:
    """Put a pruned session back where it was (with its trashed ancestors)."""
    from agentkeep import render
    from agentkeep.core import trashcan

    r = Runner()

    def body() -> None:
        doc = trashcan.restore(r.ctx, agent, session_id)
        if as_json:
            emit_json(doc)
            return
        for e in doc["restored"]:
            title = f": {e['title']}" if e["title"] else ""
            click.echo(f"restored {e['agent']} {e['id']} ({render.size(e['bytes'])}){title}")

    r.run(body)


@main.command()
@agent_option("Only this agent's.")
@click.option("--workspace", default=None, metavar="W", help="Only this folder and below.")
@click.option("--grep", default=None, metavar="TEXT", help="Only with TEXT in title, id or folder.")
@click.option(
    "--forget", is_flag=True, help="Remove lines: --agent A --id ID, or --older-than AGE."
)
@click.option("--id", "session_id", default=None, metavar="ID", help="With --forget: one session.")
@click.option("--older-than", default=None, metavar="AGE", help="With --forget: lines that old.")
@wide_option
@json_option
def history(
    agent: str | None,
    workspace: str | None,
    grep: str | None,
    forget: bool,
    session_id: str | None,
    older_than: str | None,
    wide: bool,
    as_json: bool,
) -> None:
    """The record of every session removed, newest last, and whether it can be restored."""
    from agentkeep import render
    from agentkeep.core.gone import history_forget, history_list

    if not forget and (session_id is not None or older_than is not None):
        raise BadParams("--id and --older-than go with --forget")
    if forget and (workspace is not None or grep is not None):
        raise BadParams("--forget takes --agent A --id ID, or --older-than AGE (and --agent)")
    state_dir = Env.from_environ().state_dir

    def body() -> None:
        if forget:
            doc: Any = history_forget(state_dir, agent, session_id, older_than)
            words = f"forgot {render.count(doc['forgotten'], 'line')}"
            emit_json(doc) if as_json else click.echo(words)
        else:
            doc = history_list(state_dir, agent, workspace, grep)
            emit_json(doc) if as_json else render.history(text_out(wide), doc)

    Runner().run(body, as_json)
