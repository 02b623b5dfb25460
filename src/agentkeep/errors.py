"""The errors a request ends in, each class with the CLI's exit code and the
socket's JSON-RPC code for it (CONTRACT, "Exit codes"), converted to the
socket's error answer and back; and a removal's error, which never ends a
request. core/ending.py maps a module's own errors to these."""

from __future__ import annotations

from typing import Any

from agentkeep.protocol import (
    BUSY,
    ENV_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
)


class Failure(Exception):
    """A request that cannot be answered. Each subclass is one kind, whose
    `exit` (error.data.exit) and `code` (error.code) are its class's; Failure
    itself carries the numbers it is given (an answer no kind has, read back)."""

    exit: int = 1
    code: int = SERVER_ERROR

    def __init__(
        self,
        exit: int,
        message: str,
        code: int = SERVER_ERROR,
        report: dict[str, Any] | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.exit = exit
        self.code = code
        self.message = message
        # A refused purge still has a report worth printing.
        self.report = report
        # What else the answer says (the daemon's view, for ENV_MISMATCH).
        self.data: dict[str, Any] = data or {}

    def answer(self) -> dict[str, Any]:
        """The socket's error answer for it."""
        data = dict(self.data) | ({"report": self.report} if self.report is not None else {})
        return {"code": self.code, "message": self.message, "data": {**data, "exit": self.exit}}

    @staticmethod
    def from_answer(error: object) -> Failure:
        """The error an error answer stands for: the kind its numbers name."""
        if not isinstance(error, dict):
            return Failed(f"malformed error answer: {error!r}")
        code, message = error.get("code"), str(error.get("message", ""))
        data = dict(error["data"]) if isinstance(error.get("data"), dict) else {}
        exit = data.pop("exit", Failed.exit)
        if not isinstance(exit, int) or isinstance(exit, bool):
            exit = Failed.exit
        code = code if isinstance(code, int) and not isinstance(code, bool) else SERVER_ERROR
        report = data.pop("report", None)
        report = report if isinstance(report, dict) else None
        kind = next((k for k in ANSWERED if (k.exit, k.code) == (exit, code)), None)
        if kind is None:
            return Failure(exit, message, code, report, data)
        return kind(message, report=report, data=data)


class Kind(Failure):
    """A Failure whose numbers are its class's."""

    def __init__(
        self,
        message: str,
        *,
        report: dict[str, Any] | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(type(self).exit, message, type(self).code, report, data)


class Failed(Kind):
    """Something failed: a removal, the daemon, a state file, the disk."""


class BadRequest(Kind):
    """A request the client got wrong (not a request at all): a usage error."""

    exit = 2
    code = INVALID_REQUEST


class NotJSON(BadRequest):
    """A request line that is not JSON."""

    code = PARSE_ERROR


class UnknownMethod(BadRequest):
    """A method the socket does not answer."""

    code = METHOD_NOT_FOUND


class BadParams(BadRequest):
    """What a command or request was given is wrong (an unknown agent, an
    age that is no duration, options that go against each other)."""

    code = INVALID_PARAMS


class ConfigInvalid(Kind):
    """The user's config does not parse or holds a bad value."""

    exit = 2


class Refused(Kind):
    """Refused: the session is in use, pinned, or the ancestor of one that
    stays (a refused purge carries its report)."""

    exit = 4


class NotFound(Kind):
    """What a request names is not there (a session, a trash entry)."""

    exit = 5


class Busy(Kind):
    """Every slot of the daemon is taken, or it is stopping: nothing of the
    request was done."""

    code = BUSY


class EnvMismatch(Kind):
    """The daemon sees another config file, state dir or agent roots than
    the client: the client does the work itself."""

    code = ENV_MISMATCH


class SetupError(Kind):
    """This installation lacks what the command needs (Textual for `ui`,
    dependencies of the tested versions for `serve`)."""

    exit = 2


class ServiceError(Kind):
    """The service cannot be described for this installation (a path a unit
    file cannot hold, a bad AGENTKEEP_SERVICE_KIND)."""

    exit = 2


class ManagerUnreachable(ServiceError):
    """No user service manager answers here: nothing can be installed."""

    exit = 1


# The kinds an error answer is read back as (each pair of numbers names one).
ANSWERED: tuple[type[Kind], ...] = (
    Failed,
    BadRequest,
    NotJSON,
    UnknownMethod,
    BadParams,
    ConfigInvalid,
    Refused,
    NotFound,
    EnvMismatch,
)


def error_message(request_id: object, error: Failure) -> dict[str, object]:
    """The whole JSON-RPC error answer to a request."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.answer()}


def state_file_failure(exc: OSError) -> Failed:
    """A state file that cannot be written (a full disk), said in words naming it."""
    where = f" ({exc.filename})" if exc.filename else ""
    return Failed(f"{exc.strerror or exc}{where}")


class RemovalError(Exception):
    """A removal step failed; the session is reported `failed` and retried."""
