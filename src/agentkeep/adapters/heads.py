"""The bounded head of an agent's file, read without changing it: what a
session is recognised by (title or first prompt) and when it began
(Adapter.describe)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterator
from typing import Any

from agentkeep.adapters import sqlite
from agentkeep.fsio import read_head, read_small_json

# Enough for the first records of a transcript, whose first prompt may sit
# behind a few lines of set-up; a longer first line is not read at all.
HEAD = 64 * 1024
# What the record of what went keeps of a title or a first prompt.
TITLE_CHARS = 80
_SPACE = re.compile(r"\s+")


def head_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects of the whole lines in the file's first HEAD bytes;
    a line that is not one is passed over."""
    return records_in(read_head(path, HEAD) or b"")


def records_in(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects of the whole lines of a head (not a line HEAD cut)."""
    for line in data.split(b"\n")[: -1 if len(data) >= HEAD else None]:
        if (record := json_object(line)) is not None:
            yield record


def json_object(text: bytes | str) -> dict[str, Any] | None:
    """The JSON object `text` holds; None when it is not JSON or no object."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def read_json_head(path: str | os.PathLike[str]) -> Any:
    """A JSON file's value when it is whole within HEAD bytes, else None."""
    return read_small_json(path, HEAD)


def text_of(content: object) -> str | None:
    """A message's text: a string, or the first text block of a list of
    blocks ({"type": "text", "text": ...} and the like)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type", "text") in ("text", "input_text"):
                text = block.get("text")
                if isinstance(text, str) and text.strip():
                    return text
    return None


def cut(text: object) -> str | None:
    """`text` on one line, cut to TITLE_CHARS; None when there is none."""
    if not isinstance(text, str):
        return None
    line = _SPACE.sub(" ", text).strip()
    if not line:
        return None
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def row_of(
    db: str | os.PathLike[str], table: str, sid: str, wanted: tuple[str, ...]
) -> dict[str, Any]:
    """The columns of `wanted` that `table` has, of its row whose `id` is
    `sid` (read-only); empty when there is none or it cannot be read."""
    try:
        with sqlite.reading(db) as conn:
            present = [c for c in wanted if c in sqlite.columns(conn, table)]
            if not present:
                return {}
            cols = ", ".join(f'"{c}"' for c in present)
            row = conn.execute(f'SELECT {cols} FROM "{table}" WHERE id = ?', (sid,)).fetchone()
    except sqlite3.Error:
        return {}
    return dict(zip(present, row, strict=True)) if row is not None else {}


def first_title(*candidates: object) -> str | None:
    """The first of `candidates` that is some text, cut()."""
    return next((title for c in candidates if (title := cut(c)) is not None), None)
