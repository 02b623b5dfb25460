"""Sizes, ages and counts in words for a person: 3.2 GB, 41d, 3 hours,
"in 6 days", "3 sessions"."""

from __future__ import annotations

import time

from agentkeep.model import parse_rfc3339


def size(n: int | None) -> str:
    """Decimal units, as disks are sold: 3.2 GB."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


_UNITS = (("year", 365 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60))


def _elapsed(rfc: str, now: float | None, years: bool = False) -> tuple[int, str] | None:
    """How long ago `rfc` was, in the largest whole unit (days at most unless
    `years`); None under a minute."""
    seconds = max(0.0, (now if now is not None else time.time()) - parse_rfc3339(rfc))
    for unit, length in _UNITS if years else _UNITS[1:]:
        if seconds >= length:
            return int(seconds // length), unit
    return None


def idle(rfc: str | None, now: float | None = None, *, years: bool = False) -> str:
    """How long ago, short for a table: 41d, 3h, 12m, now (`years`: 2y past a
    year); "undated" when the time cannot be read."""
    if rfc is None:
        return "undated"
    ago = _elapsed(rfc, now, years)
    return f"{ago[0]}{ago[1][0]}" if ago else "now"


def age(rfc: str | None, now: float | None = None) -> str:
    """How long ago, in words for a sentence: 41 days, 3 hours, just now."""
    if rfc is None:
        return "undated"
    ago = _elapsed(rfc, now)
    if ago is None:
        return "just now"
    n, unit = ago
    return f"{n} {unit}{'s' if n != 1 else ''}"


def when(rfc: str | None, now: float | None = None) -> str:
    """A moment relative to now: "3 h ago", "in 6 days", "now"."""
    if rfc is None:
        return "never"
    delta = parse_rfc3339(rfc) - (now if now is not None else time.time())
    seconds = abs(delta)
    for unit, length in (("days", 2 * 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            # Days to the nearest (a week from now reads "in 7 days"), the
            # smaller units whole.
            n = round(seconds / 86400) if unit == "days" else int(seconds // length)
            text = f"{n} {unit}"
            return f"in {text}" if delta > 0 else f"{text} ago"
    return "now"


def duration(seconds: float) -> str:
    """An uptime: 45 s, 12 min, 3 h 20 min, 6 days 2 h."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} days {s % 86400 // 3600} h"


def count(n: int, noun: str) -> str:
    """ "3 sessions", "1 session"."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
