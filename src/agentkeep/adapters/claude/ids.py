"""Claude's session ids: a canonical id is a lowercased 8-4-4-4-12 hex UUID,
whatever spelling it has on disk (macOS folds case, and Claude has written
both); a name that does not parse as one names no session."""

from __future__ import annotations

import re
import sys

AGENT = "claude"
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def canonical(raw: object) -> str | None:
    """A canonical Claude session id or None. Interned: each of a session's
    files names it, and a listing would hold a copy for each."""
    if isinstance(raw, str) and UUID.fullmatch(raw):
        return sys.intern(raw.lower())
    return None


def spellings_of(sids: frozenset[str]) -> list[str]:
    """The names the ids may have on disk: as written and uppercase (macOS
    file systems fold case, and Claude has written both)."""
    return [name for sid in sorted(sids) for name in (sid, sid.upper())]
