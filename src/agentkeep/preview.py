"""A new or shorter retention waits to be seen before the daemon acts on it.

A scheduled prune under a retention shape it has not pruned with (new, or
removing more) is a dry run whose result status shows; the real prune comes
one `prune_interval` later, or at once after a person's `agentkeep prune`.
`<state>/retention.json` holds the shapes last pruned with (or confirmed),
`<state>/preview.json` those a dry run previewed, and when.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import structlog

from agentkeep.config import Config
from agentkeep.statefiles import StateFileError, read_state, remove, write_json

log = structlog.get_logger("agentkeep.preview")

SEEN = "retention.json"
PREVIEW = "preview.json"


# A shape's key beside the agent's own (its retention): `<agent>:<shape>`.
_CAP, _LAST = ":max_size", ":keep_last"


def retentions(config: Config, agents: Iterable[str]) -> dict[str, float]:
    """Each agent's retention shapes, as numbers that get smaller when the
    shape removes more: `<agent>` (retention), `<agent>:max_size` and
    `<agent>:keep_last`; agents that remove by neither age nor size left out."""
    wanted: dict[str, float] = {}
    for a in agents:
        retention, cap = config.retention_for(a), config.max_size_for(a)
        if retention is None and cap is None:
            continue
        if retention is not None:
            wanted[a] = retention
        if cap is not None:
            wanted[a + _CAP] = float(cap[0])
        wanted[a + _LAST] = float(config.keep_last_for(a))
    return wanted


def _removes_more(key: str, value: float, seen: dict[str, float]) -> bool:
    """A shape new since the last real prune (not a keep_last: it only keeps
    more), or one that now removes more."""
    if key not in seen:
        return not key.endswith(_LAST)
    return value < seen[key]


def _seconds(value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        raise TypeError("not an object of retentions in seconds")
    return {k: float(v) for k, v in value.items()}


def _preview(value: Any) -> tuple[dict[str, float], float]:
    if not isinstance(value, dict) or not isinstance(value.get("at"), int | float):
        raise TypeError("not a preview")
    return _seconds(value.get("retentions")), float(value["at"])


def _read(state_dir: Path, name: str, check: Any) -> Any:
    """A record that cannot be read counts as none (one more preview)."""
    try:
        return read_state(state_dir / name, check)
    except StateFileError as exc:
        log.warning("retention record unreadable; previewing again", error=str(exc))
        return None


def due(state_dir: Path, wanted: dict[str, float], now: float, interval: float) -> str | None:
    """Why this scheduled prune must only show what it would remove (None: it
    may remove, as after a preview of these very shapes an interval ago)."""
    seen = _read(state_dir, SEEN, _seconds) or {}
    new = {key for key, value in wanted.items() if _removes_more(key, value, seen)}
    new |= {key for key in seen if key.endswith(_LAST) and key not in wanted}
    if not new:
        return None
    previewed = _read(state_dir, PREVIEW, _preview)
    if previewed is not None and previewed[0] == wanted and now >= previewed[1] + interval:
        return None
    agents = ", ".join(sorted({key.split(":")[0] for key in new}))
    return (
        f"a new or shorter retention ({agents}): this prune only shows what it would remove;"
        " the first real one runs one prune_interval later, or at once after you run"
        " `agentkeep prune`"
    )


def previewed(state_dir: Path, wanted: dict[str, float], now: float) -> None:
    """A dry run showed what `wanted` would remove (the wait counts from the
    first such moment)."""
    earlier = _read(state_dir, PREVIEW, _preview)
    if earlier is not None and earlier[0] == wanted:
        return
    write_json(state_dir / PREVIEW, {"retentions": wanted, "at": now})


def confirmed(state_dir: Path, wanted: dict[str, float]) -> None:
    """A real prune ran with `wanted`: later scheduled prunes remove."""
    write_json(state_dir / SEEN, wanted)
    remove(state_dir / PREVIEW)
