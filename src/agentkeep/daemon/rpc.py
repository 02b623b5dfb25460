"""JSON-RPC 2.0 as the daemon's socket speaks it: a request's fields,
checked, and the error answers (each with the CLI's exit code for it)."""

from __future__ import annotations

import math

from agentkeep.protocol import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, decode


class RpcError(Exception):
    """An error answer. `exit` is the CLI's exit code for it (error.data.exit)."""

    def __init__(
        self, code: int, message: str, *, exit: int = 1, data: dict[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit = exit
        self.data = data or {}

    def payload(self) -> dict[str, object]:
        return {
            "code": self.code,
            "message": self.message,
            "data": {**self.data, "exit": self.exit},
        }


class BadRequest(RpcError):
    """A request the client got wrong (not JSON, not a request, an unknown
    method or parameter): the CLI exits 2 for it, as for any usage error."""

    exit = 2

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message, exit=BadRequest.exit)


def error_message(request_id: object, error: RpcError) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.payload()}


TOO_LONG = error_message(None, BadRequest(INVALID_REQUEST, "line over 1 MiB"))


def request_id(value: object) -> object:
    """JSON-RPC ids are strings, integers or null; a float is tolerated when
    it can be written back (NaN and Infinity cannot: answered with id null)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise BadRequest(INVALID_REQUEST, "id must be a string, a number or null")


def load(line: bytes) -> dict[str, object]:
    """One line as a request object; BadRequest when it is not one."""
    try:
        request = decode(line)
    except ValueError as exc:
        raise BadRequest(PARSE_ERROR, f"not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise BadRequest(INVALID_REQUEST, "a request is a JSON object")
    return request


def fields(request: dict[str, object]) -> tuple[str, dict[str, object]]:
    """(method, params) of a request; BadRequest when it is not one."""
    method = request.get("method")
    params = request.get("params")
    if request.get("jsonrpc", "2.0") != "2.0":
        raise BadRequest(INVALID_REQUEST, 'jsonrpc must be "2.0"')
    if not isinstance(method, str):
        raise BadRequest(INVALID_REQUEST, "method must be a string")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise BadRequest(INVALID_PARAMS, "params must be an object")
    return method, params
