"""When each restored session was last restored (`restored.json`): activity,
so a session just brought back is not pruned again at once. A scan reads
it: this module imports nothing that removes."""

from __future__ import annotations

import json
from pathlib import Path

import structlog

from agentkeep import fsio
from agentkeep.leases import hold_exclusive
from agentkeep.statefiles import write_json
from agentkeep.trash.entries import RESTORED, TrashError, number, text

log = structlog.get_logger("agentkeep.trash")


def _read(path: Path) -> dict[str, float]:
    try:
        data = json.loads(fsio.read_regular(path, limit=fsio.SMALL_FILE_LIMIT))
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return {text(key): number(value) for key, value in data.items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.error("restore times unreadable", path=str(path), error=str(exc))
        raise TrashError(f"{path} cannot be read: {exc}") from exc


def record_restored(state_dir: Path, keys: list[tuple[str, str]], now: float) -> None:
    """Record that the sessions `keys` were restored at `now`."""
    path = state_dir / RESTORED
    with hold_exclusive(state_dir / f"{RESTORED}.lock"):
        times = _read(path)
        times.update({f"{agent}/{session_id}": now for agent, session_id in keys})
        write_json(path, times)


def restored_at(state_dir: Path) -> dict[tuple[str, str], float]:
    """When each restored session was last restored. TrashError when the
    record cannot be read: then nothing may be pruned, as a restored
    session would look idle."""
    times = {key.partition("/"): at for key, at in _read(state_dir / RESTORED).items()}
    return {(agent, sid): at for (agent, sep, sid), at in times.items() if sep and sid}
