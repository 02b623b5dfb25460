"""Planning the directory watches: which directories each root needs, and
whether they fit in the user's inotify budget. The daemon's watcher
(daemon/watch.py) follows the plan; `doctor` counts with the same rules
without starting a watcher.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentkeep.adapters.base import Adapter

log = structlog.get_logger("agentkeep.watchplan")

# Watches left for the user's other programs: agentkeep never takes the
# last tenth of the budget (editors fail confusingly without watches).
RESERVE_FRACTION = 0.1

INOTIFY = "inotify"
POLLING = "polling"
MIXED = "mixed"


def inotify_budget(proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """(max_user_watches, watches this user's processes hold now), or None
    where there is no inotify (not Linux, /proc unreadable)."""
    try:
        limit = int((proc / "sys/fs/inotify/max_user_watches").read_text().strip())
    except (OSError, ValueError):
        return None
    return limit, _watches_in_use(proc, os.getuid())


def budget_for(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """inotify_budget(), with AGENTKEEP_INOTIFY_MAX (when set) in place of the
    limit, so that `doctor` and the daemon count alike and a test can force
    the polling fallback on a real daemon."""
    budget = inotify_budget()
    forced = environ.get("AGENTKEEP_INOTIFY_MAX")
    if forced:
        with suppress(ValueError):
            return int(forced), budget[1] if budget else 0
        log.warning("AGENTKEEP_INOTIFY_MAX is not a number; ignored", value=forced)
    return budget


def _watches_in_use(proc: Path, uid: int) -> int:
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return 0
    return sum(process_watches(proc / pid) for pid in pids if _owner(proc / pid) == uid)


def _owner(path: Path) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def process_watches(process: Path) -> int:
    """Inotify watches held by one process (`/proc/<pid>`); 0 when unreadable."""
    try:
        fds = os.listdir(process / "fd")
    except OSError:
        return 0  # gone, or not ours to read
    used = 0
    for fd in fds:
        try:
            if os.readlink(process / "fd" / fd) != "anon_inode:inotify":
                continue
            info = (process / "fdinfo" / fd).read_text()
        except OSError:
            continue
        used += sum(1 for line in info.splitlines() if line.startswith("inotify wd:"))
    return used


@dataclass
class RootWatch:
    """One root's watching: the directories it needs and how it is kept current."""

    agent: str
    path: Path
    wanted: list[Path] = field(default_factory=list)
    targets: set[Path] = field(default_factory=set)
    mode: str = INOTIFY
    reason: str | None = None

    def as_json(self) -> dict[str, object]:
        """Its entry in `status`'s watch roots."""
        return {
            "agent": self.agent,
            "path": str(self.path),
            "mode": self.mode,
            "watches": len(self.targets) if self.mode == INOTIFY else 0,
            "reason": self.reason,
        }


def group_by_root(agent: str, adapter: Adapter) -> list[RootWatch]:
    """The adapter's watch dirs grouped under its roots (the longest root a
    dir lies under); each root is wanted itself, so the root's own new
    subdirectories are seen, and a dir under no root is its own group."""
    groups = {root.path: RootWatch(agent, root.path, [root.path]) for root in adapter.roots()}
    for directory in adapter.watch_dirs():
        owners = [p for p in groups if directory == p or directory.is_relative_to(p)]
        owner = max(owners, key=lambda p: len(p.parts)) if owners else directory
        group = groups.setdefault(owner, RootWatch(agent, owner))
        if directory not in group.wanted:
            group.wanted.append(directory)
    for group in groups.values():
        group.targets = {target for d in group.wanted if (target := _watch_target(d)) is not None}
    return list(groups.values())


def _watch_target(directory: Path) -> Path | None:
    """What to watch for `directory`: itself when it is a directory (or a
    link to one: ~/.claude is often a link into a dotfiles repo), else its
    nearest existing parent (to see it appear)."""
    if os.path.isdir(directory):
        return directory
    for parent in directory.parents:
        if os.path.isdir(parent):
            return parent
    return None


def plan(groups: Iterable[RootWatch], available: int | None) -> None:
    """Give each root inotify while its directories fit in what is left of
    `available` (None: no limit), else polling with the reason."""
    for group in groups:
        cost = len(group.targets)
        if group.mode == POLLING or available is None:
            continue  # polling: a watch failed for it since the last full plan
        if cost > available:
            group.mode, group.reason = POLLING, f"needs {cost} inotify watches, {available} free"
        else:
            available -= cost
