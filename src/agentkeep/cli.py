"""The `agentkeep` command: parse, ask (the daemon or the core), render.

Every command that the socket serves is first asked of the running daemon,
with the config path, state dir and roots this process resolved; when no
daemon answers, or it sees another user's view (ENV_MISMATCH), the same core
function runs in-process. The output is the same either way.

Start-up is most of what a command the daemon answers costs, so the modules
only in-process work or text output needs (the core and everything under
it) are imported inside the commands that use them: `--version`, `--help`
and shell completion import none of them.

Every command takes `-q` (errors only on stderr) and `-v`/`-vv` (the info
or debug log), before or after its name; the tables take `--wide`.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from agentkeep import VERSION_LINE, __version__, completion
from agentkeep.errors import Failure
from agentkeep.paths import Env
from agentkeep.runner import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    QUIET,
    Runner,
    emit_json,
    emit_parts,
    fail,
    progress_bar,
    status_doc,
    text_out,
)

if TYPE_CHECKING:
    from agentkeep import core
    from agentkeep.prune import PruneReport

_VERBOSE = "agentkeep.verbose"


def _json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")(f)


def _wide_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--wide", is_flag=True, help="Print ids, workspaces and paths whole, however wide."
    )(f)


def _agent_argument(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.argument("agent", shell_complete=completion.agents)(f)


def _id_argument(
    complete: Callable[..., Any] = completion.session_ids,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.argument("session_id", metavar="ID", shell_complete=complete)


def _noted(ctx: click.Context, param: click.Parameter, value: int) -> None:
    """-q and -v may come before the command's name and after it: both count."""
    if value:
        key = QUIET if param.name == "quiet" else _VERBOSE
        ctx.meta[key] = ctx.meta.get(key, 0) + int(value)


def _verbosity() -> list[click.Parameter]:
    return [
        click.Option(
            ["-q", "--quiet"],
            is_flag=True,
            expose_value=False,
            callback=_noted,
            help="Only errors on stderr: no warnings, no progress bar.",
        ),
        click.Option(
            ["-v", "--verbose"],
            count=True,
            expose_value=False,
            callback=_noted,
            help="More on stderr: -v the info log, -vv the debug log.",
        ),
    ]


def _log_level(ctx: click.Context, default: str) -> str:
    """-q or -v when given, else AGENTKEEP_LOG_LEVEL, else `default`."""
    from agentkeep.logs import level_from

    quiet, verbose = ctx.meta.get(QUIET, 0), ctx.meta.get(_VERBOSE, 0)
    if quiet and verbose:
        fail(EXIT_USAGE, "-q and -v say opposite things: give one of them")
    if quiet:
        return "error"
    if verbose:
        return "info" if verbose == 1 else "debug"
    try:
        return level_from(os.environ, default)
    except ValueError as exc:
        fail(EXIT_USAGE, str(exc))


def _reader_gone(code: int) -> NoReturn:
    """stdout's reader went away (`agentkeep ls | head`): not an error. What
    is still buffered goes to /dev/null, so that exiting is quiet too."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(code)


# Commands that run with a config that is bad: the daemon serves on (and
# its status says why it prunes nothing); `service` does not read it;
# status and doctor report it, then exit 2.
_BAD_CONFIG_RUNS = frozenset({"serve", "service", "install", "uninstall", "status", "doctor"})


class _Command(click.Command):
    """A command that sets up the log once its arguments are parsed, so that
    `--help` never imports the logging stack, and refuses a bad config."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_verbosity())

    def invoke(self, ctx: click.Context) -> Any:
        from agentkeep.logs import configure

        # A person at the CLI sees results, not the log; the daemon logs every
        # removal and kept session (-q, -v or AGENTKEEP_LOG_LEVEL say otherwise).
        configure(level=_log_level(ctx, "info" if self.name == "serve" else "warning"))
        if self.name not in _BAD_CONFIG_RUNS:
            error = config_error(Env.from_environ())
            if error is not None:
                fail(EXIT_USAGE, f"config error: {error}")
        return super().invoke(ctx)


def config_error(env: Env) -> str | None:
    """The user's config's error, or None: every command that reads it
    refuses a bad one (exit 2, naming the key and the value)."""
    from agentkeep import view

    return view.load(env, env.state_dir)[1]


class _Group(click.Group):
    command_class = _Command
    group_class = type  # subgroups (service) are _Groups too

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_verbosity())

    def invoke(self, ctx: click.Context) -> Any:
        code = 0
        try:
            try:
                return super().invoke(ctx)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
                raise
            finally:
                # Flushed here, where a reader gone away can still be told
                # from a real error (at exit it could only be printed).
                sys.stdout.flush()
        except BrokenPipeError:
            _reader_gone(code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentkeep", message=VERSION_LINE)
def main() -> None:
    """Keep coding agents' sessions, prune what has been idle past your retention."""
    # A file name that is not UTF-8 reaches text output as lone surrogates:
    # written as escapes, so that output is always UTF-8 and never an error.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")


@main.command()
@_json_option
def scan(as_json: bool) -> None:
    """Rebuild the index from disk now."""
    r = Runner()

    def body() -> int:
        from agentkeep import render

        with progress_bar("scanning") as bar:

            def local(ctx: core.Context) -> dict[str, Any]:
                from agentkeep import core

                return core.scan(ctx, bar.progress)

            doc = r.ask("scan", {}, local)
        emit_json(doc) if as_json else render.scan(text_out(), doc)
        return EXIT_OK

    r.run(body)


@main.command("ls")
@click.option(
    "--agent", default=None, help="Only this agent's sessions.", shell_complete=completion.agents
)
@click.option(
    "--idle-over",
    default=None,
    metavar="AGE",
    help="Only sessions idle longer than AGE (30d, 12h).",
)
@_wide_option
@_json_option
def ls_cmd(agent: str | None, idle_over: str | None, wide: bool, as_json: bool) -> None:
    """The sessions in the index, oldest activity first."""
    r = Runner()

    def local(ctx: core.Context) -> str:
        from agentkeep import core

        return core.ls_text(ctx, agent, idle_over).text

    def body() -> int:
        # As text: the daemon's answer (or the core's) is printed as it
        # came, never decoded and encoded again (jsontext).
        text = r.ask("ls", {"agent": agent, "idle_over": idle_over}, local, raw=True)
        if as_json:
            from agentkeep.jsontext import unfolded

            click.echo(unfolded(text))
        else:
            import json

            from agentkeep import core, render

            rows = json.loads(text)
            # The states just listed are not looked at again for the hint.
            known = {(row["agent"], row["id"]): row["state"] for row in rows}
            render.sessions(text_out(wide), rows, core.reclaim_hint(r.ctx, known))
        return EXIT_OK

    r.run(body)


@main.command()
@_agent_argument
@_id_argument()
@_wide_option
@_json_option
def show(agent: str, session_id: str, wide: bool, as_json: bool) -> None:
    """One session: its artifacts, holders, parent and children."""
    r = Runner()

    def local(ctx: core.Context) -> dict[str, Any]:
        from agentkeep import core

        return core.show(ctx, agent, session_id)

    def body() -> int:
        doc = r.ask("show", {"agent": agent, "id": session_id}, local)
        if as_json:
            emit_json(doc)
        else:
            from agentkeep import render

            render.show(text_out(wide), doc)
        return EXIT_OK

    r.run(body)


@main.command()
@click.option(
    "--by",
    type=click.Choice(["agent", "workspace"]),
    default="agent",
    show_default=True,
    help="Group the sessions by agent or by workspace.",
)
@_wide_option
@_json_option
def du(by: str, wide: bool, as_json: bool) -> None:
    """Where the disk went (allocated blocks, as du counts), largest first,
    with what is reclaimable now."""
    r = Runner()

    def local(ctx: core.Context) -> dict[str, Any]:
        from agentkeep import core

        return core.du(ctx, by)

    def body() -> int:
        doc = r.ask("du", {"by": by}, local)
        if as_json:
            emit_json(doc)
        else:
            from agentkeep import core, render

            held = core.trash_total(r.env.state_dir)
            render.du(text_out(wide), doc, core.reclaim_hint(r.ctx), held)
        return EXIT_OK

    r.run(body)


def _print_report(report: dict[str, Any] | PruneReport | None, as_json: bool, wide: bool) -> int:
    """A prune's report: the daemon's answer, or the run's own (whose
    removals are written as they are read back, never held whole)."""
    assert report is not None, "only a scheduled prune skips its turn"
    if as_json:
        if isinstance(report, dict):
            emit_json(report)
            return EXIT_FAILED if report["failed"] else EXIT_OK
        emit_parts(report.json_parts())
        return EXIT_FAILED if report.failed else EXIT_OK
    from agentkeep import render

    doc = report if isinstance(report, dict) else report.to_json(paths=False)
    render.report(text_out(wide), doc)
    return EXIT_FAILED if doc["failed"] else EXIT_OK


def _compress_here(r: Runner, report: dict[str, Any] | PruneReport | None) -> None:
    """A prune run here moved sessions into the trash: compress them once
    its report is out (trash.packing says why then). The daemon does so
    for the prunes it runs."""
    if report is None or isinstance(report, dict) or report.dry_run or not report.removed:
        return
    sys.stdout.flush()
    from agentkeep import core

    core.compress_trash(r.ctx.state_dir)


@main.command()
@click.option("--dry-run", is_flag=True, help="Decide everything, remove nothing.")
@click.option(
    "--older-than",
    default=None,
    metavar="AGE",
    help="The cutoff (at least 1d); default: the config's retention.",
)
@click.option(
    "--agent", default=None, help="Only this agent's sessions.", shell_complete=completion.agents
)
@_wide_option
@_json_option
def prune(
    dry_run: bool, older_than: str | None, agent: str | None, wide: bool, as_json: bool
) -> None:
    """Remove sessions idle past the cutoff."""
    r = Runner()

    def body() -> int:
        params = {"dry_run": dry_run, "older_than": older_than, "agent": agent}
        with progress_bar("pruning") as bar:

            def local(ctx: core.Context) -> PruneReport | None:
                from agentkeep import core

                return core.prune(
                    ctx, dry_run=dry_run, older_than=older_than, agent=agent, progress=bar.progress
                )

            doc = r.ask("prune", params, local)
        code = _print_report(doc, as_json, wide)
        _compress_here(r, doc)
        return code

    r.run(body, wide=wide)


@main.command()
@_agent_argument
@_id_argument()
@click.option("--dry-run", is_flag=True, help="Decide everything, remove nothing.")
@click.option("--cascade", is_flag=True, help="Remove the session's descendants first.")
@_wide_option
@_json_option
def purge(
    agent: str, session_id: str, dry_run: bool, cascade: bool, wide: bool, as_json: bool
) -> None:
    """Remove one session now, whatever its age."""
    r = Runner()

    def local(ctx: core.Context) -> PruneReport:
        from agentkeep import core

        return core.purge(ctx, agent=agent, id=session_id, dry_run=dry_run, cascade=cascade)

    def body() -> int:
        params = {"agent": agent, "id": session_id, "dry_run": dry_run, "cascade": cascade}
        doc = r.ask("purge", params, local)
        code = _print_report(doc, as_json, wide)
        _compress_here(r, doc)
        return code

    r.run(body, as_json, wide)


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_agent_argument
@_id_argument()
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def hold(agent: str, session_id: str, command: tuple[str, ...]) -> None:
    """Hold a session's lease for as long as COMMAND runs: hold AGENT ID -- CMD [ARG...]."""
    from agentkeep import leases

    r = Runner()
    argv = list(command[1:] if command and command[0] == "--" else command)
    if not argv:
        fail(EXIT_USAGE, "hold needs a command after --")
    try:
        sid = r.ctx.session_id(agent, session_id)
    except Failure as exc:
        fail(exc.exit, exc.message)
    try:
        leases.hold_and_exec(leases.lease_path(r.ctx.state_dir, agent, sid), argv)
    except leases.LeaseError as exc:
        fail(EXIT_FAILED, f"cannot hold {agent} {sid}: {exc}")


def _pin(agent: str, session_id: str, pinned: bool, as_json: bool) -> None:
    r = Runner()
    method = "pin" if pinned else "unpin"

    def local(ctx: core.Context) -> dict[str, Any]:
        from agentkeep import core

        return core.pin(ctx, agent, session_id, pinned)

    def body() -> int:
        doc = r.ask(method, {"agent": agent, "id": session_id}, local)
        if as_json:
            emit_json(doc)
        else:
            click.echo(f"{'pinned' if pinned else 'unpinned'} {doc['agent']} {doc['id']}")
        return EXIT_OK

    r.run(body)


@main.command()
@_agent_argument
@_id_argument()
@_json_option
def pin(agent: str, session_id: str, as_json: bool) -> None:
    """Never prune this session."""
    _pin(agent, session_id, True, as_json)


@main.command()
@_agent_argument
@_id_argument()
@_json_option
def unpin(agent: str, session_id: str, as_json: bool) -> None:
    """Let this session be pruned again."""
    _pin(agent, session_id, False, as_json)


@main.command("trash")
@click.option("--empty", is_flag=True, help="Free the trash now (under each session's lease).")
@click.option("--older-than", metavar="AGE", help="With --empty: only what was trashed before.")
@_wide_option
@_json_option
def trash_cmd(empty: bool, older_than: str | None, wide: bool, as_json: bool) -> None:
    """List the trash, or empty it now."""
    from agentkeep import core, render

    if older_than is not None and not empty:
        fail(EXIT_USAGE, "--older-than goes with --empty")
    state_dir = Env.from_environ().state_dir

    def body() -> int:
        if not empty:
            doc = core.trash_list(state_dir)
            if as_json:
                emit_json(doc)
            else:
                render.trash_entries(text_out(wide), doc["entries"])
            return EXIT_OK
        doc = core.trash_empty(state_dir, older_than)
        if as_json:
            emit_json(doc)
        else:
            render.emptied(text_out(wide), doc)
        return EXIT_OK

    Runner().run(body, as_json)


@main.command()
@_agent_argument
@_id_argument(complete=completion.trashed_ids)
@_json_option
def restore(agent: str, session_id: str, as_json: bool) -> None:
    """Put a pruned session back where it was (with its trashed ancestors)."""
    from agentkeep import core, render

    r = Runner()

    def body() -> int:
        doc = core.restore(r.ctx, agent, session_id)
        if as_json:
            emit_json(doc)
        else:
            for e in doc["restored"]:
                title = f": {e['title']}" if e["title"] else ""
                click.echo(f"restored {e['agent']} {e['id']} ({render.size(e['bytes'])}){title}")
        return EXIT_OK

    r.run(body)


@main.command()
@click.option("--agent", default=None, help="Only this agent's.", shell_complete=completion.agents)
@click.option("--workspace", default=None, metavar="W", help="Only this folder and below.")
@click.option("--grep", default=None, metavar="TEXT", help="Only with TEXT in title, id or folder.")
@click.option(
    "--forget", is_flag=True, help="Remove lines: --agent A --id ID, or --older-than AGE."
)
@click.option("--id", "session_id", default=None, metavar="ID", help="With --forget: one session.")
@click.option("--older-than", default=None, metavar="AGE", help="With --forget: lines that old.")
@_wide_option
@_json_option
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
    from agentkeep import core, render

    if not forget and (session_id is not None or older_than is not None):
        fail(EXIT_USAGE, "--id and --older-than go with --forget")
    if forget and (workspace is not None or grep is not None):
        fail(EXIT_USAGE, "--forget takes --agent A --id ID, or --older-than AGE (and --agent)")
    state_dir = Env.from_environ().state_dir

    def body() -> int:
        if forget:
            doc: Any = core.history_forget(state_dir, agent, session_id, older_than)
            if as_json:
                emit_json(doc)
            else:
                click.echo(f"forgot {render.count(doc['forgotten'], 'line')}")
            return EXIT_OK
        doc = core.history_list(state_dir, agent, workspace, grep)
        if as_json:
            emit_json(doc)
        else:
            render.history(text_out(wide), doc)
        return EXIT_OK

    Runner().run(body, as_json)


@main.command()
def ui() -> None:
    """Look at where the disk went and why each session stays, and act (Textual)."""
    try:
        from agentkeep.ui.app import run
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "textual":
            raise
        fail(EXIT_USAGE, "`agentkeep ui` needs Textual: pip install 'agentkeep[ui]'")
    sys.exit(run())


@main.command()
def serve() -> None:
    """Run the daemon in the foreground (what the service runs)."""
    from agentkeep import dependencies

    # Checked before the daemon's modules are imported: a dependency of
    # another version may not import at all, or fail later in a thread.
    wrong = dependencies.problems()
    if wrong:
        fail(EXIT_USAGE, "cannot start: " + "; ".join(wrong) + " (reinstall: deploy/install.sh)")
    from agentkeep.daemon.main import serve as run_daemon

    sys.exit(run_daemon(Env.from_environ()))


@main.command()
@_json_option
def status(as_json: bool) -> None:
    """The daemon: pid, uptime, sessions, watch mode, config, prunes."""
    r = Runner()
    doc, code = status_doc(r)
    if not as_json:
        from agentkeep import core, render

        doc["reclaim_hint"] = core.reclaim_hint(r.ctx)
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
    except svc.ServiceError as exc:
        if as_json:
            emit_json(svc.plan_json(verb, env, [], dry_run=dry_run, error=str(exc)))
        fail(exc.exit, str(exc))
    steps = svc.apply(plan, dry_run=dry_run, env=env, report=None if as_json else say)
    if as_json:
        emit_json(svc.plan_json(verb, env, steps, dry_run=dry_run))
    sys.exit(svc.exit_code(steps))


@service.command("install")
@click.option("--dry-run", is_flag=True, help="Print what would be written and run.")
@_json_option
def service_install(dry_run: bool, as_json: bool) -> None:
    """Write the unit (or plist) for this installation and start it."""
    _service_plan("install", dry_run, as_json)


@service.command("uninstall")
@click.option("--dry-run", is_flag=True, help="Print what would be removed and run.")
@_json_option
def service_uninstall(dry_run: bool, as_json: bool) -> None:
    """Stop the service and remove exactly what install wrote."""
    _service_plan("uninstall", dry_run, as_json)


@service.command("status")
@_json_option
def service_status(as_json: bool) -> None:
    """Whether the service is installed and running; exits as `systemctl is-active` does."""
    from agentkeep import service as svc

    env = Env.from_environ()
    try:
        state = svc.status(env)
    except svc.ServiceError as exc:
        fail(exc.exit, str(exc))
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
@_json_option
def doctor(as_json: bool) -> None:
    """What stands in the way: watch limits, config, service, agents' own clean-ups."""
    from agentkeep import doctor as doc_mod

    checks = doc_mod.run_checks(Env.from_environ())
    if as_json:
        emit_json([c.__dict__ for c in checks])
    else:
        doc_mod.render(checks, click.echo)
    if any(c.name == "config" and not c.ok for c in checks):
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_OK if all(c.ok for c in checks) else EXIT_FAILED)
