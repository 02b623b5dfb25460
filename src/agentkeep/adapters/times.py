"""Agents' own time fields (RFC 3339 text or epoch numbers) as POSIX times."""

from __future__ import annotations

import math
from datetime import datetime

# Epoch numbers are told apart by magnitude: 1e11 s is the year 5138, so a
# larger number is in milliseconds, microseconds or nanoseconds.
_EPOCH_SCALES = ((1e11, 1.0), (1e14, 1e3), (1e17, 1e6), (math.inf, 1e9))


def parse_agent_time(value: object) -> float | None:
    """An agent's own time field as a POSIX time: RFC 3339 text (with an
    offset: a local time without one is ambiguous) or a number since the epoch
    in s, ms, us or ns. None when it cannot be read (a bool, NaN, zero or
    less, no offset, anything else): the caller treats that as undated."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().upper())
        except ValueError:
            return None
        return parsed.timestamp() if parsed.tzinfo is not None else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    if not math.isfinite(number) or number <= 0:
        return None
    return next(number / scale for limit, scale in _EPOCH_SCALES if number < limit)
