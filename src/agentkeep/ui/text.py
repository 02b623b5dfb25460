"""Short forms for cells and lines: `~` for the home, a path's end."""

from __future__ import annotations


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
