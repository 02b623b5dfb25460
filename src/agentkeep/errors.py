"""Errors raised in one layer and caught in others: the one a request ends
in (what the CLI exits with and the socket answers), and a removal's."""

from __future__ import annotations

from typing import Any

from agentkeep.protocol import INVALID_PARAMS, SERVER_ERROR


class Failure(Exception):
    """A request that cannot be answered: exit code, message, JSON-RPC code."""

    def __init__(
        self,
        exit: int,
        message: str,
        code: int = SERVER_ERROR,
        report: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.exit = exit
        self.message = message
        self.code = code
        # A refused purge still has a report worth printing.
        self.report = report


class NotFound(Failure):
    """What a request names is not there (a session, a trash entry)."""

    exit = 5

    def __init__(self, message: str) -> None:
        super().__init__(NotFound.exit, message)


class BadParams(Failure):
    """A request's parameters are wrong: a usage error to the CLI, invalid
    params on the socket."""

    exit = 2

    def __init__(self, message: str) -> None:
        super().__init__(BadParams.exit, message, INVALID_PARAMS)


def state_file_failure(exc: OSError) -> Failure:
    """A state file that cannot be written (a full disk): said in words,
    naming it, the same from the CLI, the daemon and a process apart."""
    where = f" ({exc.filename})" if exc.filename else ""
    return Failure(1, f"{exc.strerror or exc}{where}")


class RemovalError(Exception):
    """A removal step failed; the session is reported `failed` and retried."""
