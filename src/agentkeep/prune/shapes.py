"""Retention shapes beside age, pure like plan.decide: `keep_last` (the N most
recently active of each workspace stay) and `max_size` (while the sessions
take more, the longest idle go). A session kept for any reason counts toward
the size and never goes for it; nothing active in the last 24 hours goes."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable

from agentkeep.model import Session
from agentkeep.prune.report import Kept

Key = tuple[str, str]
Activity = Callable[[Session], float | None]


def recent(listed: Iterable[Session], keep_last: int, activity: Activity) -> dict[str, str]:
    """The ids among the `keep_last` most recently active of their workspace,
    with the words that say so. An unreadable time ranks as the most recent:
    never guess towards removing."""
    if keep_last <= 0:
        return {}
    by_workspace: dict[str | None, list[Session]] = {}
    for s in listed:
        by_workspace.setdefault(s.workspace, []).append(s)
    found: dict[str, str] = {}
    for workspace, group in by_workspace.items():
        group.sort(key=lambda s: _newest_first(activity(s)))
        where = workspace or "its unknown workspace"
        for s in group[:keep_last]:
            found[s.id] = f"one of the {keep_last} most recently active in {where}"
    return found


def _newest_first(activity: float | None) -> float:
    return -activity if activity is not None else float("-inf")


def over_size(
    limit: int,
    sessions: list[Session],
    planned: set[Key],
    kept: Collection[Key],
    *,
    activity: Activity,
    floor: float,
    children: Callable[[Session], Iterable[Key]],
    stays: Callable[[Session], Kept | None],
) -> list[Session]:
    """The sessions to remove, longest idle first, so that `sessions` (all of
    the agents sharing a cap) fit in `limit`: never one `planned` already,
    `kept`, active since `floor`, or with a child that stays (invariant 3).
    `stays` is asked last, of each one that would go."""
    total = sum(allocated(s) for s in sessions if s.key not in planned)
    if total <= limit:
        return []
    eligible = {
        s.key: s
        for s in sessions
        if s.key not in planned
        and s.key not in kept
        and (t := activity(s)) is not None
        and t < floor
    }
    # A session waits for its children still there; the idlest ready one goes first.
    waiting: dict[Key, int] = {}
    parent_of: dict[Key, Key] = {}
    for key, s in eligible.items():
        staying = [c for c in children(s) if c not in planned]
        waiting[key] = len(staying)
        for child in staying:
            parent_of[child] = key
    ready = [(activity(s) or 0.0, key) for key, s in eligible.items() if not waiting[key]]
    heapq.heapify(ready)
    chosen: list[Session] = []
    while total > limit and ready:
        _, key = heapq.heappop(ready)
        s = eligible[key]
        if stays(s) is not None:
            continue  # and so does its parent, which waits for it for ever
        chosen.append(s)
        total -= allocated(s)
        parent = parent_of.get(key)
        if parent is not None:
            waiting[parent] -= 1
            if not waiting[parent]:
                heapq.heappush(ready, (activity(eligible[parent]) or 0.0, parent))
    return chosen


def allocated(s: Session) -> int:
    """What a session takes on disk, as `du` counts it."""
    return s.disk_bytes if s.disk_bytes is not None else sum(a.disk_bytes for a in s.artifacts)
