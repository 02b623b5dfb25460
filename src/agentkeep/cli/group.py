"""The `agentkeep` command group and what every command shares: -q and -v
(before or after the command's name), the log set up once the arguments are
parsed, a bad config refused, the common options and arguments, and every
Failure ended in one place (its words on stderr, its exit code).

The shell completes agent names from the config and session ids from the
index (and the trash, for `restore`). It runs at every Tab, so it is cheap
and changes nothing: the index read-only, never a scan, never the state dir
created, nothing completed rather than a failure.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click
from click.shell_completion import CompletionItem

from agentkeep import VERSION_LINE, __version__
from agentkeep.errors import BadParams, ConfigInvalid, Failure
from agentkeep.paths import Env
from agentkeep.runner import QUIET, fail

_VERBOSE = "agentkeep.verbose"


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--json."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")(f)


def wide_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--wide."""
    return click.option(
        "--wide", is_flag=True, help="Print ids, workspaces and paths whole, however wide."
    )(f)


def agent_option(help: str = "Only this agent's sessions.") -> Callable[..., Any]:
    """--agent A, completed from the config."""
    return click.option("--agent", default=None, help=help, shell_complete=_agents)


def session_arguments(trashed: bool = False) -> Callable[..., Any]:
    """AGENT ID, completed from the config and the index (or the trash)."""
    agent = click.argument("agent", shell_complete=_agents)
    ids = click.argument(
        "session_id", metavar="ID", shell_complete=_trashed_ids if trashed else _session_ids
    )
    return lambda f: agent(ids(f))


def _agents(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The agents the user's config enables, and its stores."""
    from agentkeep import view

    env = Env.from_environ()
    config, _ = view.load(env, env.state_dir)
    names = [*config.enabled, *(store.name for store in config.stores)]
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def _session_ids(
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


def _trashed_ids(
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


def _noted(ctx: click.Context, param: click.Parameter, value: int) -> None:
    """-q and -v may come before the command's name and after it: both count."""
    if value:
        key = QUIET if param.name == "quiet" else _VERBOSE
        ctx.meta[key] = ctx.meta.get(key, 0) + int(value)


def _verbosity() -> list[click.Parameter]:
    quiet = "Only errors on stderr: no warnings, no progress bar."
    verbose = "More on stderr: -v the info log, -vv the debug log."
    shared: dict[str, Any] = {"expose_value": False, "callback": _noted}
    return [
        click.Option(["-q", "--quiet"], is_flag=True, help=quiet, **shared),
        click.Option(["-v", "--verbose"], count=True, help=verbose, **shared),
    ]


def _log_level(ctx: click.Context, default: str) -> str:
    """-q or -v when given, else AGENTKEEP_LOG_LEVEL, else `default`."""
    from agentkeep.logs import level_from

    quiet, verbose = ctx.meta.get(QUIET, 0), ctx.meta.get(_VERBOSE, 0)
    if quiet and verbose:
        raise BadParams("-q and -v say opposite things: give one of them")
    if quiet:
        return "error"
    if verbose:
        return "info" if verbose == 1 else "debug"
    try:
        return level_from(os.environ, default)
    except ValueError as exc:
        raise BadParams(str(exc)) from None


def _reader_gone(code: int) -> NoReturn:
    """stdout's reader went away (`agentkeep ls | head`): not an error. What
    is still buffered goes to /dev/null, so that exiting is quiet too."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(code)


# Commands that run with a config that is bad: the daemon serves on (and
# its status says why it prunes nothing); `service` and `adopt` do not read
# it; status and doctor report it, then exit 2.
_BAD_CONFIG_RUNS = frozenset(
    {"serve", "service", "install", "uninstall", "status", "doctor", "adopt"}
)


class _Command(click.Command):
    """A command that sets up the log once its arguments are parsed, so that
    `--help` never imports the logging stack, and refuses a bad config."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_verbosity())

    def invoke(self, ctx: click.Context) -> Any:
        """Set up the log, refuse a bad config, run the command."""
        from agentkeep.logs import configure

        # A person at the CLI sees results, not the log; the daemon logs every
        # removal and kept session (-q, -v or AGENTKEEP_LOG_LEVEL say otherwise).
        configure(level=_log_level(ctx, "info" if self.name == "serve" else "warning"))
        if self.name not in _BAD_CONFIG_RUNS:
            from agentkeep import view

            env = Env.from_environ()
            error = view.load(env, env.state_dir)[1]
            if error is not None:  # exit 2, naming the key and the value
                raise ConfigInvalid(f"config error: {error}")
        return super().invoke(ctx)


class _Group(click.Group):
    command_class = _Command
    group_class = type  # subgroups (service) are _Groups too

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_verbosity())

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a reader gone away from stdout ends it quietly."""
        code = 0
        try:
            try:
                return self._answer(ctx)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
                raise
            finally:
                # Flushed here, where a reader gone away can still be told
                # from a real error (at exit it could only be printed).
                sys.stdout.flush()
        except BrokenPipeError:
            _reader_gone(code)

    def _answer(self, ctx: click.Context) -> Any:
        """The command's answer; the error it ended in said, and exited with."""
        try:
            return super().invoke(ctx)
        except Failure as exc:
            fail(exc)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentkeep", message=VERSION_LINE)
def main() -> None:
    """Keep coding agents' sessions, prune what has been idle past your retention."""
    # A file name that is not UTF-8 reaches text output as lone surrogates:
    # written as escapes, so that output is always UTF-8 and never an error.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
