"""The live-session registry: `sessions/<pid>.json` naming a session, with
its `sessions/<pid>.<hex>.key` files. A record is evidence of use, never of
disuse: only one whose process is alive and not a reused pid (its recorded
start matches) holds its session; what cannot be told counts as in use.
Qwen Code's records of the same shape are read here too."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import psutil

from agentkeep.adapters.claude.ids import canonical
from agentkeep.adapters.claude.reading import read_json
from agentkeep.fsio import Entry
from agentkeep.model import Holder, HolderKind
from agentkeep.processes import Proc, ProcessTable

# psutil's start time moves with clock steps: a registry file is stale only
# when it claims a start this much before the process's.
START_SLACK_S = 5.0

# `sessions/<pid>.json` and `sessions/<pid>.<hex>.key`.
REGISTRY_NAME = re.compile(r"(?P<pid>[0-9]{1,10})\.json")
REGISTRY_KEY_NAME = re.compile(r"(?P<pid>[0-9]{1,10})\.[0-9a-fA-F]+\.key")


@dataclass
class Registry:
    """`sessions/` as of its ctime: each pid's `<pid>.json` and `.key`
    files, the session its record names, and the reverse."""

    ctime: int
    files: dict[str, Entry]
    keys: dict[str, list[Entry]]
    sid_of: dict[str, str | None]
    pids_of: dict[str, set[str]]

    def name(self, pid: str, sid: str | None) -> None:
        """`pid`'s record now names `sid`."""
        old = self.sid_of.get(pid)
        if old is not None and old != sid:
            self.pids_of[old].discard(pid)
        self.sid_of[pid] = sid
        if sid is not None:
            self.pids_of.setdefault(sid, set()).add(pid)


def registry_id(record: object) -> str | None:
    """The session a record names."""
    return canonical(record.get("sessionId")) if isinstance(record, dict) else None


def alive_pids() -> set[int] | None:
    """Every live pid; None when the process table cannot be read."""
    try:
        return set(psutil.pids())
    except (psutil.Error, OSError):
        return None


def registry_holders(
    path: str, sid: str, procs: ProcessTable, names: re.Pattern[str] = REGISTRY_NAME
) -> list[Holder]:
    """Holders from one `sessions/<pid>.json` (a name `names` reads the pid
    from), read afresh. A file that is gone holds nothing; one that now
    names another session holds nothing; one that cannot be parsed still
    points at its file-name pid (cannot tell: in use)."""
    if not os.path.lexists(path):
        return []
    record = read_json(path)
    if not isinstance(record, dict):
        record = {}
    elif registry_id(record) not in (None, sid):
        return []
    named = names.fullmatch(os.path.basename(path))
    pids = {int(named["pid"])} if named else set()
    return record_holders(f"sessions/{os.path.basename(path)}", record, pids, procs)


def record_holders(
    name: str, record: dict[str, object], pids: set[int], procs: ProcessTable
) -> list[Holder]:
    """Holders from a record (`name` says which) of a process's hold on a
    session: its `pid` (and `pids` known otherwise) alive, and not a reused
    pid by its `procStart` or `startedAt` (ms); cannot tell: in use."""
    recorded = record.get("pid")
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0:
        pids = pids | {recorded}
    holders: list[Holder] = []
    for pid in sorted(pids):
        if pid in procs.unreadable:
            holders.append(Holder(pid, HolderKind.REGISTRY, f"{name}: process cannot be read"))
            continue
        proc = procs.alive(pid)
        if proc is None:
            continue
        same = _same_process(record, proc)
        if same is None:
            holders.append(Holder(pid, HolderKind.REGISTRY, f"{name}: start time cannot be told"))
        elif same:
            holders.append(Holder(pid, HolderKind.REGISTRY, name))
    return holders


def _started_seconds(value: object) -> float | None:
    """A registry `startedAt` (ms) as seconds, or None for "cannot tell"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = value / 1000
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read(64).decode("ascii", "replace").strip() or None
    except OSError:
        return None


def _proc_start_ticks(pid: int) -> str | None:
    """The process's start time as /proc/<pid>/stat gives it (field 22, clock
    ticks since boot): what newer Claude versions write as `procStart`."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    fields = raw.rpartition(b")")[2].split()
    # Fields after the command name start at field 3 (state).
    return fields[19].decode() if len(fields) > 19 else None


def _same_process(record: dict[str, object], proc: Proc) -> bool | None:
    """Whether the live process with its pid wrote the record: True, False
    (a reused pid), None (cannot tell: in use). procStart, whose format is
    not promised, can only confirm; startedAt alone can call a record stale."""
    proc_start = record.get("procStart")
    if isinstance(proc_start, str | int) and not isinstance(proc_start, bool):
        actual = _proc_start_ticks(proc.pid)
        # Claude writes the ticks alone; Qwen `<boot id>:<ticks>`, and
        # `linux:<boot id>:<ticks>` in its writer locks.
        boot, _, ticks = str(proc_start).strip().rpartition(":")
        boot = boot.removeprefix("linux:")
        if actual is not None and ticks == actual and boot in ("", _boot_id()):
            return True
    started = _started_seconds(record.get("startedAt"))
    if started is None:
        return None
    return started >= proc.create_time - START_SLACK_S
