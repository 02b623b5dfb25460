"""JSON-RPC 2.0 as the daemon's socket speaks it: a request's fields,
checked (each error one of errors.py's kinds, with its exit code)."""

from __future__ import annotations

import math

from agentkeep.errors import BadParams, BadRequest, NotJSON, error_message
from agentkeep.protocol import decode

TOO_LONG = error_message(None, BadRequest("line over 1 MiB"))


def request_id(value: object) -> object:
    """JSON-RPC ids are strings, integers or null; a float is tolerated when
    it can be written back (NaN and Infinity cannot: answered with id null)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise BadRequest("id must be a string, a number or null")


def load(line: bytes) -> dict[str, object]:
    """One line as a request object; BadRequest when it is not one."""
    try:
        request = decode(line)
    except ValueError as exc:
        raise NotJSON(f"not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise BadRequest("a request is a JSON object")
    return request


def fields(request: dict[str, object]) -> tuple[str, dict[str, object]]:
    """(method, params) of a request; BadRequest when it is not one."""
    method = request.get("method")
    params = request.get("params")
    if request.get("jsonrpc", "2.0") != "2.0":
        raise BadRequest('jsonrpc must be "2.0"')
    if not isinstance(method, str):
        raise BadRequest("method must be a string")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise BadParams("params must be an object")
    return method, params
