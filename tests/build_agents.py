"""The gemini, grok and zero builders of agentkeep.demo.agents with each
agent's root, and the stores' own: each writes a session the way it lies on
disk and returns where everything went. `mtimes()` records every timestamp under a root so a test
can prove a scan changed none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentkeep.demo.agents import (
    DAY,
    GeminiSession,
    GrokSession,
    ZeroSession,
    age,
    gemini_chat_lines,
    gemini_project_hash,
    gemini_time,
    make_gemini_session,
    make_grok_session,
    make_zero_session,
    write,
    write_gemini_projects,
)

__all__ = [
    "DAY",
    "GeminiSession",
    "GrokSession",
    "Store",
    "ZeroSession",
    "age",
    "gemini_chat_lines",
    "gemini_project_hash",
    "gemini_root",
    "gemini_time",
    "grok_root",
    "make_gemini_session",
    "make_grok_session",
    "make_store_session",
    "make_zero_session",
    "mtimes",
    "write",
    "write_gemini_projects",
    "zero_root",
]


def gemini_root(home: Path) -> Path:
    return home / ".gemini"


def grok_root(home: Path) -> Path:
    return home / ".grok"


def zero_root(data_home: Path) -> Path:
    return data_home / "zero" / "sessions"


def mtimes(root: Path) -> dict[str, tuple[int, int]]:
    """(mtime_ns, atime_ns) of `root` and every entry below it, by lstat."""
    found: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, ""]:
            p = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(p)
            found[p] = (st.st_mtime_ns, st.st_atime_ns)
    return found


# -- stores ---------------------------------------------------------------


@dataclass(frozen=True)
class Store:
    """Stands in for config.StoreConfig (the adapter duck-types it)."""

    name: str
    root: Path
    depth: int


def make_store_session(root: Path, rel: str, *, days: float = 0.0) -> Path:
    """A store session directory `root/rel` with a file and a nested file."""
    directory = root / rel
    write(directory / "issue.md", "# issue\n")
    write(directory / "work" / "notes.txt", "notes\n")
    age(directory, days)
    return directory
