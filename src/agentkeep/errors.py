"""Errors raised in one layer and caught in others: the one a request ends
in (what the CLI exits with and the socket answers), and a removal's."""

from __future__ import annotations

from typing import Any

from agentkeep.protocol import SERVER_ERROR


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


class RemovalError(Exception):
    """A removal step failed; the session is reported `failed` and retried."""
