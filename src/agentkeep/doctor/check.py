"""One thing `agentkeep doctor` looked at."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    """One thing looked at: `ok`, what was found, and (when not ok) the fix."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
