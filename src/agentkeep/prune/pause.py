"""The scheduled prune's pause: the one owner of pause.json,
pause-lifted.json and the record of the last prune (last_prune.json)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agentkeep.model import Session, rfc3339
from agentkeep.prune.report import PruneOptions
from agentkeep.statefiles import StateFileError, read_json, read_state, remove, write_json

if TYPE_CHECKING:
    from agentkeep.prune.view import DiskView

log = structlog.get_logger("agentkeep.prune")


def pause_for(
    state_dir: Path,
    views: dict[str, DiskView],
    opts: PruneOptions,
    activity: Callable[[Session], float | None],
) -> str | None:
    """Why this scheduled run pauses: a pause recorded already, a full disk,
    or a new reason (recorded in pause.json). An empty index never pauses."""
    existing = read_pause(state_dir) or state_disk_full(state_dir)
    if existing or not any(view.sessions for view in views.values()):
        return existing
    # Agents with a size cap alone have no cutoff: only the clock is checked.
    cutoffs = {a: c for a, c in opts.cutoffs.items() if c is not None}
    times = [
        (t, agent)
        for agent, view in views.items()
        if agent in cutoffs
        for s in view.sessions.values()
        if (t := activity(s)) is not None
    ]
    reason = _reason(state_dir, opts.now, cutoffs, times)
    if reason:
        write_json(state_dir / "pause.json", {"reason": reason, "since": rfc3339(opts.now)})
        log.warning("scheduled prune paused", reason=reason)
    return reason


def _reason(
    state_dir: Path, now: float, cutoffs: dict[str, float], times: list[tuple[float, str]]
) -> str | None:
    """The clock or the machine looks wrong: a clock behind the last prune,
    more than the retention since it, or even the newest session (`times`,
    by agent) idle past the retention."""
    try:
        last = read_state(state_dir / "last_prune.json", _summary)
    except StateFileError as exc:
        # Without it the clock cannot be checked: pause (a person's prune
        # writes it afresh).
        return f"the record of the last prune cannot be read: {exc}"
    retention = min((now - c for c in cutoffs.values()), default=None)
    if last and isinstance(last.get("ts"), int | float):
        if now < last["ts"]:
            return f"the clock reads {rfc3339(now)}, before the last prune at {last.get('time')}"
        if retention is not None and now - last["ts"] > retention:
            return f"more than the retention has passed since the last prune at {last.get('time')}"
    acknowledged = state_dir / "pause-lifted.json"
    if not times or any(t >= cutoffs[a] for t, a in times):
        remove(acknowledged)  # the machine looks normal again
        return None
    # A person who lifted this pause has seen it: the sessions a capped
    # lifting run left are still all idle, and must not pause it again.
    if read_json(acknowledged, None) is None:
        return "even the newest session is idle past the retention"
    return None


def _summary(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return value


def _pause(value: Any) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("reason"), str):
        raise TypeError("no reason in it")
    return value["reason"]


def read_pause(state_dir: Path) -> str | None:
    """Why the scheduled prune is paused, or None. A damaged pause file still
    pauses it (a pause that cannot be read must not let a prune run)."""
    try:
        return read_state(state_dir / "pause.json", _pause)
    except StateFileError as exc:
        return f"the pause file cannot be read: {exc}"


# Below this much room, a prune cannot journal its removals.
_ROOM = 64 * 1024


def state_disk_full(state_dir: Path) -> str | None:
    """Why the scheduled prune waits for room: the disk holding the state dir
    is full, so no removal could be journaled. Not recorded (no room to)."""
    try:
        st = os.statvfs(state_dir)
    except OSError:
        return None
    if st.f_bavail * st.f_frsize >= _ROOM:
        return None
    return f"the disk holding {state_dir} is full: nothing can be pruned until there is room"


def lift_pause(state_dir: Path, now: float) -> None:
    """A person's prune (not a dry run) lifts the pause and acknowledges what
    made it, until the machine looks normal again."""
    if (state_dir / "pause.json").exists():
        write_json(state_dir / "pause-lifted.json", {"since": rfc3339(now)})
    remove(state_dir / "pause.json")


def record_last_prune(state_dir: Path, summary: dict[str, Any]) -> None:
    """Record the last prune's summary (what `status` shows)."""
    write_json(state_dir / "last_prune.json", summary)
