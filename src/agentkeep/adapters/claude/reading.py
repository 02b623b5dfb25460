"""Reading a file Claude wrote without changing it: only a small one
(fsio.read_small_json)."""

from __future__ import annotations

from agentkeep.fsio import read_small_json

# state.json and registry files are a few hundred bytes; anything bigger is
# not what we think it is.
SMALL_JSON = 64 * 1024


def read_json(path: str) -> object:
    """A small JSON file's value; None when missing, unreadable or malformed."""
    return read_small_json(path, SMALL_JSON)
