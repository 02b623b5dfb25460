"""Reading a file Claude wrote without changing it: only a bounded head of
it, as adapters.heads reads one."""

from __future__ import annotations

import json

import structlog

from agentkeep.adapters.heads import read_head

# One logger for the whole adapter, named as it always was.
log = structlog.get_logger("agentkeep.adapters.claude")

# state.json and registry files are a few hundred bytes; anything bigger is
# not what we think it is.
SMALL_JSON = 64 * 1024


def read_json(path: str) -> object:
    """A small JSON file's value; None when missing, unreadable or malformed."""
    data = read_head(path, SMALL_JSON + 1)
    if data is None or len(data) > SMALL_JSON:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        log.info("malformed json skipped", path=path)
        return None
