"""Short forms for cells and lines: `~` for the home, compact ages."""

from __future__ import annotations

import time

from agentkeep.model import parse_rfc3339


def home_relative(path: str | None, home: str) -> str:
    """`path` with `~` for the home; "(unknown)" for none."""
    if not path:
        return "(unknown)"
    if home and (path == home or path.startswith(home.rstrip("/") + "/")):
        return "~" + path[len(home.rstrip("/")) :]
    return path


def fit_end(text: str, width: int) -> str:
    """`text` in `width` cells, its end kept (a path's last folders say most)."""
    if width <= 0:
        return ""
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def compact_age(rfc: str | None, now: float | None = None) -> str:
    """3m, 5h, 41d, 2y: a cell's worth of how long ago."""
    if rfc is None:
        return "undated"
    seconds = max(0.0, (time.time() if now is None else now) - parse_rfc3339(rfc))
    for unit, length in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{int(seconds // length)}{unit}"
    return "now"
