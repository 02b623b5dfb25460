"""`ls` holds no more Python memory with more sessions: their ids are
surveyed as they are read from the index and their texts sent a batch at
a time, so what it holds at its peak is a batch, whatever the index holds."""

from __future__ import annotations

import gc
import tracemalloc
import uuid

from agentkeep.core.context import Context
from agentkeep.core.sessions import ls_text
from agentkeep.model import Artifact, Session
from agentkeep.paths import Env
from fakehome import FakeHome

SESSIONS = 3000
# An id kept per session costs some 90 bytes (a list of every id, by
# agent, was one of ls's peaks); what a peak holds besides moves by a few KB.
PER_SESSION = 20
RUNS = 3


def _index(ctx: Context, start: int, count: int) -> None:
    """Idle Claude sessions straight into the index (ls reads nothing else)."""
    sessions = []
    for n in range(start, start + count):
        sid = str(uuid.UUID(int=n + 1))
        path = f"/nowhere/{sid}.jsonl"
        artifact = Artifact(path, "transcript", 10, 1.0e9, "/nowhere", primary=True)
        sessions.append(Session("claude", sid, "/w", None, [artifact], bytes=10))
    ctx.index.put(sessions)


def _ls_peaks(ctx: Context) -> tuple[int, int, int]:
    """Python's peak while `ls` decides its states (before it sends
    anything), its peak while its text is read whole, and the text's size."""
    tracemalloc.start()
    try:
        text = ls_text(ctx)
        deciding = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        sent = sum(len(part) for part in text.parts())
        return deciding, tracemalloc.get_traced_memory()[1], sent
    finally:
        tracemalloc.stop()


def _least_peaks(ctx: Context) -> tuple[int, int, int]:
    """_ls_peaks(), each the least of a few runs, each after a full
    collection. A full collection empties Python's free lists, and objects
    made from a free list are not traced: which of two runs a collection
    fell before moved a peak by some 180 KB at random. What else a peak may
    hold (cycles not collected yet) only ever adds to it: the least is kept."""
    runs = []
    for _ in range(RUNS):
        gc.collect()
        runs.append(_ls_peaks(ctx))
    deciding, sending, sent = zip(*runs, strict=True)
    assert len(set(sent)) == 1, "SETUP INVALID: the runs listed different texts"
    return min(deciding), min(sending), sent[0]


def test_ls_peak_does_not_grow_with_the_sessions(fake_home: FakeHome) -> None:
    ctx = Context.open(Env.from_environ(fake_home.environ))
    _index(ctx, 0, SESSIONS)
    _ls_peaks(ctx)  # every cache and code path warmed once
    *at_n, sent_n = _least_peaks(ctx)
    _index(ctx, SESSIONS, SESSIONS)
    *at_2n, sent_2n = _least_peaks(ctx)
    assert sent_2n > 1.9 * sent_n, "SETUP INVALID: the second ls did not list twice as many"
    for phase, before, after in zip(("deciding", "sending"), at_n, at_2n, strict=True):
        grew = after - before
        print(f"ls {phase} peak {before} -> {after}: {grew} bytes for {SESSIONS} more sessions")
        assert grew < SESSIONS * PER_SESSION, f"ls {phase}: the peak grew {grew} bytes"
