"""The commands about the daemon and what stands around it: serve,
status, service, doctor, adopt (an agent's own clean-up setting), and the
terminal view (ui)."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from agentkeep.cli.group import json_option, main
from agentkeep.errors import ServiceError, SetupError
from agentkeep.paths import Env
from agentkeep.runner import Runner, emit_json, status_doc, text_out


@main.command()
def ui() -> None:
    """Look at where the disk went and why each session stays, and act (Textual)."""
    try:
        from agentkeep.ui.app import run
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "textual":
            raise
        raise SetupError("`agentkeep ui` needs Textual: pip install 'agentkeep[ui]'") from None
    sys.exit(run())


@main.command()
def serve() -> None:
    """Run the daemon in the foreground (what the service runs)."""
    from agentkeep import dependencies

    # Checked before the daemon's modules are imported: a dependency of
    # another version may not import at all, or fail later in a thread.
    wrong = dependencies.problems()
    if wrong:
        raise SetupError("cannot start: " + "; ".join(wrong) + " (reinstall: deploy/install.sh)")
    from agentkeep.daemon.main import serve as run_daemon

    sys.exit(run_daemon(Env.from_environ()))


@main.command()
@json_option
def status(as_json: bool) -> None:
    """The daemon: pid, uptime, sessions, watch mode, config, prunes."""
    r = Runner()
    doc, code = status_doc(r)
    if not as_json:
        from agentkeep import render
        from agentkeep.core.reclaim import reclaim_hint

        doc["reclaim_hint"] = reclaim_hint(r.ctx)
        render.status(text_out(), doc)
    else:
        emit_json(doc)
    sys.exit(code)


@main.group()
def service() -> None:
    """The systemd user unit or launchd agent of this user."""


def _service_plan(verb: str, dry_run: bool, as_json: bool) -> NoReturn:
    from agentkeep import service as svc

    env = Env.from_environ()

    def say(step: svc.Step) -> None:
        # Each failure is said once, on stderr; everything else on stdout.
        failed = step.error is not None or step.action.kind == "warn"
        for line in svc.describe(step, dry_run=dry_run):
            click.echo(f"agentkeep: {line}" if failed else line, err=failed)

    try:
        plan = svc.install_plan(env) if verb == "install" else svc.uninstall_plan(env)
    except ServiceError as exc:
        if as_json:
            emit_json(svc.plan_json(verb, env, [], dry_run=dry_run, error=str(exc)))
        raise
    steps = svc.apply(plan, dry_run=dry_run, env=env, report=None if as_json else say)
    if as_json:
        emit_json(svc.plan_json(verb, env, steps, dry_run=dry_run))
    sys.exit(svc.exit_code(steps))


@service.command("install")
@click.option("--dry-run", is_flag=True, help="Print what would be written and run.")
@json_option
def service_install(dry_run: bool, as_json: bool) -> None:
    """Write the unit (or plist) for this installation and start it."""
    _service_plan("install", dry_run, as_json)


@service.command("uninstall")
@click.option("--dry-run", is_flag=True, help="Print what would be removed and run.")
@json_option
def service_uninstall(dry_run: bool, as_json: bool) -> None:
    """Stop the service and remove exactly what install wrote."""
    _service_plan("uninstall", dry_run, as_json)


@service.command("status")
@json_option
def service_status(as_json: bool) -> None:
    """Whether the service is installed and running; exits as `systemctl is-active` does."""
    from agentkeep import service as svc

    env = Env.from_environ()
    state = svc.status(env)
    if as_json:
        emit_json(state.to_json())
    else:
        click.echo(state.words())
        if state.linger is False:
            click.echo(
                "lingering is off: it stops when you log out "
                f"(`loginctl enable-linger {svc.user_name(env)}` keeps it running)"
            )
    sys.exit(state.exit_code())


@main.command()
@json_option
def doctor(as_json: bool) -> None:
    """What stands in the way: watch limits, config, service, agents' own clean-ups."""
    from agentkeep import doctor as doc_mod

    checks = doc_mod.run_checks(Env.from_environ())
    if as_json:
        emit_json([c.__dict__ for c in checks])
    else:
        doc_mod.render(checks, click.echo)
    sys.exit(doc_mod.exit_code(checks))


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
