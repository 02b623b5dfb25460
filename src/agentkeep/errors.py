"""The one error a request ends in: what the CLI exits with and the socket answers."""

from __future__ import annotations

from typing import Any


class Failure(Exception):
    """A request that cannot be answered: exit code, message, JSON-RPC code."""

    def __init__(
        self, exit: int, message: str, code: int = -32000, report: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.exit = exit
        self.message = message
        self.code = code
        # A refused purge still has a report worth printing.
        self.report = report
