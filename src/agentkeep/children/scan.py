"""A big scan's children: one per CPU (measuring is the interpreter's work
per file, bound to one CPU). This process lists, hands out parts, and writes
the index as they come back. Children only read the disk, through the same
adapters and `disk` functions as a scan here, so they keep every rule a scan
keeps (no link followed, no atime moved).
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

# A child imports this module first: logs must import structlog
# (its way, without rich) before anything else does.
from agentkeep import logs

# isort: split
import structlog

from agentkeep import children, index, statefiles
from agentkeep.adapters.base import ScanPart, WholeScan
from agentkeep.index import Rows

log = structlog.get_logger("agentkeep.children.scan")

# Below this many expected sessions (adapters.base.expected_sessions) a
# scan is about a second in one process, and forked children do not pay; a
# spawned one starts an interpreter first, and pays from SPAWNED times as many.
PARALLEL_FROM = 1200
SPAWNED = 10 / 3

# Parts of a split scan handed to each child ahead. The whole-agent parts
# (few and first) are not counted: all of them are handed out before an
# agent that lists here starts its listing, so children run them meanwhile.
IN_FLIGHT = 4

Restored = Mapping[tuple[str, str], float]
Parts = list[tuple[str, ScanPart]]
Done = Iterator[tuple[str, Iterable[Rows]]]
# A part's rows, or how many batches of them its child wrote to its file.
Measured = list[Rows] | int


def cpus() -> int:
    """The CPUs this process may run on (its affinity mask where there is one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def worth_spreading(expected: int) -> bool:
    """Whether a scan of about `expected` sessions is spread over children."""
    least = PARALLEL_FROM if start_method() == "fork" else PARALLEL_FROM * SPAWNED
    return cpus() >= 2 and expected >= least


def run_parts(parts: Iterable[tuple[str, ScanPart]], restored: Restored, *, spread: bool) -> Done:
    """Run every part, yielding (agent, its sessions as index rows) as each
    finishes: here and in order unless `spread`, else in children in whatever
    order they finish. `parts` is consumed as children need more, so
    an agent that lists its sessions here before it hands out parts does so
    while children run the parts before it."""
    if not spread:
        return _here(parts, restored)
    return _pooled(iter(parts), restored, min(cpus(), 8))


def _here(parts: Iterable[tuple[str, ScanPart]], restored: Restored) -> Done:
    for agent, part in parts:
        yield agent, index.batches(part(), restored)


def start_method() -> str:
    """How children start: `fork` on Linux from a process with no other
    thread (a forked child is ready at once); `spawn` everywhere else (a
    forked child of a process with threads would inherit the locks they
    held, and macOS's system libraries are not safe to fork)."""
    if START_METHOD is not None:
        return START_METHOD
    return "fork" if sys.platform == "linux" and threading.active_count() == 1 else "spawn"


# Test seam, None in production: the start method every pool uses.
START_METHOD: str | None = None


def _pooled(parts: Iterator[tuple[str, ScanPart]], restored: Restored, children: int) -> Done:
    method = start_method()
    try:
        pool = ProcessPoolExecutor(
            children,
            mp_context=multiprocessing.get_context(method),
            initializer=_start_child,
            initargs=(os.getpid(), *logs.settings()),
        )
    except OSError as exc:  # no POSIX semaphores here (/dev/shm), no interpreter to start
        yield from _instead(exc, list(parts), restored)
        return
    log.info("scan spread over child processes", children=children, start=method)
    running: dict[Future[Measured], tuple[str, ScanPart, str | None]] = {}
    try:
        while True:
            # At most IN_FLIGHT split parts per child: bounds what waits
            # finished but not yet written.
            for agent, part in parts:
                path = _rows_file()
                try:
                    running[pool.submit(_measure, part, restored, path)] = (agent, part, path)
                except (OSError, BrokenProcessPool) as exc:  # a child could not start
                    _forget(path)
                    yield from _instead(exc, [(agent, part), *_left(running), *parts], restored)
                    return
                split = sum(not isinstance(p, WholeScan) for _, p, _ in running.values())
                if split >= IN_FLIGHT * children:
                    break
            if not running:
                return
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                agent, part, path = running.pop(future)
                try:
                    measured = future.result()
                except BrokenProcessPool as exc:  # a child died: killed, out of memory
                    _forget(path)
                    yield from _instead(exc, [(agent, part), *_left(running), *parts], restored)
                    return
                rows = measured if isinstance(measured, list) else _batches_in(path, measured)
                try:
                    yield agent, rows  # written (rows read) by the time the scan asks for more
                finally:
                    _forget(path)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for _, _, path in running.values():
            _forget(path)


def _left(running: dict[Future[Measured], tuple[str, ScanPart, str | None]]) -> Parts:
    """The parts in hand when the children failed."""
    return [(agent, part) for agent, part, _ in running.values()]


def _rows_file() -> str | None:
    """A file for a part's rows, made here (so that it is removed here,
    whatever becomes of the child); None when none can be made: the rows
    then come back in memory."""
    try:
        fd, path = tempfile.mkstemp(prefix="agentkeep-rows-")
    except OSError:
        return None
    os.close(fd)
    return path


def _forget(path: str | None) -> None:
    if path is not None:
        statefiles.remove(Path(path))


def _batches_in(path: str | None, count: int) -> Iterator[Rows]:
    """The first `count` batches of rows written to `path`."""
    assert path is not None
    with open(path, "rb") as f:
        for _ in range(count):
            yield pickle.load(f)


def _instead(exc: BaseException, left: Parts, restored: Restored) -> Done:
    """Children failed: what they had in hand, and the rest, is measured here.
    It costs time, never the scan."""
    log.warning("a scan's children failed; the rest is measured here", error=str(exc))
    return _here(left, restored)


def _start_child(parent: int, json: bool | None, level: str) -> None:
    # Ctrl-C reaches the whole group: the scan's own process decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A child that only reads ends at once when the scan's process is gone.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    children.end_with_parent(parent)
    # A child lives for one scan and makes no cycles worth collecting.
    gc.disable()
    logs.configure(json, level)


def _measure(part: ScanPart, restored: Restored, path: str | None) -> Measured:
    """The part's rows, sent back whole when they are one batch. More (an
    agent measured whole) are written to `path` a batch at a time and read
    back so, for parts finished at once must not all wait in memory. A
    write that fails (a full disk) sends back all of them instead."""
    batches = index.batches(part(), restored)
    first = next(batches)
    second = next(batches, None)
    if second is None:
        return [first]
    each = itertools.chain([first, second], batches)
    if path is None:
        return list(each)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    except OSError:
        return list(each)
    written = 0
    try:
        for batch in each:
            try:
                children.write_all(fd, pickle.dumps(batch, pickle.HIGHEST_PROTOCOL))
            except OSError:
                return [*_batches_in(path, written), batch, *each]
            written += 1
    finally:
        os.close(fd)
    return written
