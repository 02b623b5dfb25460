"""Answering one command (for cli/ and ui/): through the daemon when one
answers with the same view, else in-process; and ending it with its output
and exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from agentkeep import __version__
from agentkeep.errors import ConfigInvalid, EnvMismatch, Failed, Failure, state_file_failure
from agentkeep.paths import Env

if TYPE_CHECKING:
    from agentkeep import render
    from agentkeep.core.context import Context

# Where -q is kept (click shares `meta` with every nested context).
QUIET = "agentkeep.quiet"


def text_out(wide: bool = False) -> render.Out:
    """stdout for text: fitted to the terminal (or COLUMNS); whole in a pipe
    or with --wide, each table row on one line either way."""
    from agentkeep import render

    return render.Out.of(sys.stdout, wide=wide)


def progress_bar(what: str) -> render.Bar:
    """The progress bar for long work: on stderr when it is a terminal, and
    not with -q."""
    from agentkeep import render

    ctx = click.get_current_context(silent=True)
    return render.Bar(what, enabled=not (ctx and ctx.meta.get(QUIET)))


def fail(exc: Failure) -> NoReturn:
    """End the command in `exc`: its words on stderr, its exit code."""
    click.echo(f"agentkeep: {exc.message}", err=True)
    sys.exit(exc.exit)


# indented_parts() are written joined up to this many characters at a time.
_CHUNK = 1 << 16


def emit_json(doc: Any) -> None:
    """`doc` as indented JSON on stdout."""
    from agentkeep.jsontext import indented_parts

    emit_parts(indented_parts(doc))


def emit_parts(parts: Iterable[str]) -> None:
    """A JSON document's indented parts, written as they come, and a newline."""
    chunk: list[str] = []
    size = 0
    for part in parts:
        chunk.append(part)
        size += len(part)
        if size >= _CHUNK:
            click.echo("".join(chunk), nl=False)
            chunk, size = [], 0
    click.echo("".join(chunk))


class Runner:
    """Answers one command through the daemon, or in-process."""

    def __init__(self) -> None:
        self.env = Env.from_environ()
        self._ctx: Context | None = None

    @property
    def ctx(self) -> Context:
        """The in-process context, opened on first use."""
        if self._ctx is None:
            from agentkeep.core.context import Context

            self._ctx = Context.open(self.env)
        return self._ctx

    def fingerprint(self) -> dict[str, Any]:
        """The config path, state dir and roots this process resolved (sent
        to the daemon), without opening the index."""
        from agentkeep import view

        return self._ctx.fingerprint() if self._ctx else view.resolve(self.env)

    def ask(
        self,
        method: str,
        params: dict[str, Any],
        local: Callable[[Context], Any],
        raw: bool = False,
    ) -> Any:
        """The daemon's answer, else `local`'s; with `raw`, the answer as
        JSON text (client.request), which `local` then gives too."""
        import structlog

        from agentkeep import client

        log = structlog.get_logger("agentkeep.cli")
        try:
            with client.connect(self.env) as sock:
                # Resolved once a daemon answers.
                fingerprint = self.fingerprint()
                answer = client.request(sock, method, {**params, "env": fingerprint}, raw=raw)
            log.debug("answered by the daemon", method=method)
            return answer
        except client.NoDaemon as exc:
            # Nothing of the request was done (no daemon, or a busy one that
            # took none of it): doing it here cannot do it twice.
            log.debug("working in-process", method=method, why=str(exc))
        except EnvMismatch as exc:
            # The daemon's view is not ours: its answer would not be ours either.
            log.debug("working in-process", method=method, why=exc.message)
        from agentkeep.methods import METHODS

        if not METHODS[method].reads_index:
            return local(self.ctx)
        from agentkeep.core.indexing import reconcile

        with progress_bar("indexing") as bar:
            # No daemon keeps the index current: bring it up to date first
            # (cheap when little changed; a full scan the first time).
            reconcile(self.ctx, bar.progress)
            return local(self.ctx)

    def run(
        self, body: Callable[[], int | None], as_json: bool = False, wide: bool = False
    ) -> NoReturn:
        """Exit with `body`'s code, or end in the Failure it raised."""
        try:
            code = body() or 0
        except Failure as exc:
            if exc.report is not None:  # a refused purge still says what it kept
                if as_json:
                    emit_json(exc.report)
                else:
                    from agentkeep import render

                    render.report(text_out(wide), exc.report)
            fail(exc)
        except BrokenPipeError:
            raise  # the reader went away: _Group.invoke ends quietly
        except OSError as exc:
            fail(state_file_failure(exc))
        sys.exit(code)


def status_doc(r: Runner) -> tuple[dict[str, Any], int]:
    """The daemon's status, or with no daemon answering the same object
    from the state dir with `pid` null; and the exit code `status` gives."""
    from agentkeep import client

    try:
        doc = client.call(r.env, "status", {})
        code = 0
    except (client.NoDaemon, Failure):
        from agentkeep.core.status import status_fields

        doc = {"pid": None, "version": __version__, "uptime_s": None, **status_fields(r.ctx)}
        doc.update(watch={"mode": None, "roots": []}, next_prune=None)
        code = Failed.exit  # no daemon answers
    if not (doc.get("config") or {}).get("ok", True):
        code = ConfigInvalid.exit  # a bad config: shown, and what to fix first
    return doc, code
