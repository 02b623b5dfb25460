"""Reading a file Claude wrote without changing it: descriptors opened
without moving atimes, never following a link or blocking on a FIFO, and
only a bounded head of it is ever read."""

from __future__ import annotations

import json
import os
import stat

import structlog

from agentkeep import disk

# One logger for the whole adapter, named as it always was.
log = structlog.get_logger("agentkeep.adapters.claude")

# state.json and registry files are a few hundred bytes; anything bigger is
# not what we think it is.
SMALL_JSON = 64 * 1024


def read_head(path: str, limit: int) -> bytes | None:
    """Up to `limit` bytes from the start of a regular file, without following a
    link at `path`, blocking on a FIFO, or moving its atime. None if unreadable."""
    try:
        fd = disk.open_noatime(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


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
