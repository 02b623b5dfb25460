"""Logging set-up: structlog for every line (the standard library's loggers
routed through the same renderer), JSON lines on stderr unless a person
watches, then readable `key=value` lines.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import types
from collections.abc import Mapping


def _import_structlog() -> None:
    """Import structlog without two modules it imports and agentkeep never
    uses, which were most of the CLI's start-up: rich (its traceback
    formatter), refused for the import, and asyncio (its async loggers),
    deferred (_Deferred)."""
    if "structlog" in sys.modules:
        return
    deferred = None
    if "asyncio" not in sys.modules:
        deferred = sys.modules["asyncio"] = _Deferred("asyncio")
    refused = "rich" not in sys.modules
    if refused:
        sys.modules["rich"] = None  # type: ignore[assignment]  # so that `import rich` fails
    try:
        import structlog  # noqa: F401
    finally:
        if refused:
            del sys.modules["rich"]
        if deferred is not None and sys.modules.get("asyncio") is deferred:
            # The next `import asyncio` is a real one, and what structlog
            # holds turns into it on first use.
            del sys.modules["asyncio"]


class _Deferred(types.ModuleType):
    """A stand-in for a module, importing it on the first access to one of
    its attributes and answering each from it."""

    def __getattr__(self, attr: str) -> object:
        # Used while still standing in (during the import it was made for):
        # step aside first, or the import would find this stand-in again.
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


_import_structlog()

import structlog  # noqa: E402

# Libraries that log every routine step at INFO (apscheduler: each job run).
_QUIET = ("apscheduler", "watchdog")


_LEVELS = ("debug", "info", "warning", "error")


def level_from(environ: Mapping[str, str], default: str) -> str:
    """AGENTKEEP_LOG_LEVEL, checked; ValueError names a bad one."""
    level = environ.get("AGENTKEEP_LOG_LEVEL") or default
    if level.lower() not in _LEVELS:
        raise ValueError(f"AGENTKEEP_LOG_LEVEL must be one of {', '.join(_LEVELS)}, not {level!r}")
    return level.lower()


# What configure() was last called with: worker processes log the same way.
_settings: tuple[bool | None, str] = (None, "info")


def settings() -> tuple[bool | None, str]:
    """configure()'s arguments as last given, for a worker process to repeat."""
    return _settings


def configure(json: bool | None = None, level: str = "info") -> None:
    """Send every log line to stderr: JSON lines when `json` (default: when
    stderr is not a terminal), else readable key=value lines."""
    if json is None:
        json = not sys.stderr.isatty()
    global _settings
    _settings = (json, level)
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    last: list[structlog.typing.Processor]
    if json:
        # Tracebacks as data, without locals: they would put whole configs
        # and sessions into the journal.
        as_data = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        last = [structlog.processors.ExceptionRenderer(as_data)]
        last.append(structlog.processors.JSONRenderer())
    else:
        # NO_COLOR (no-color.org) turns colours off on a terminal too.
        colors = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
        plain = structlog.dev.plain_traceback
        last = [structlog.dev.ConsoleRenderer(colors=colors, exception_formatter=plain)]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *last],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    threading.excepthook = _thread_ended


def _thread_ended(args: threading.ExceptHookArgs) -> None:
    """A thread that ends with an exception (a dependency's, say) is one log
    line like every other, never a bare traceback on stderr."""
    thread = args.thread.name if args.thread is not None else "?"
    exc = (args.exc_type, args.exc_value, args.exc_traceback)
    log = structlog.get_logger("agentkeep")
    log.error("a thread ended with an error", thread=thread, exc_info=exc)
