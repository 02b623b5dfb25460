"""A few Claude sessions listed again into the index (an event's refresh)
look at what the index knew of them and at the directories that changed
since, not at every directory all sessions share: the same artifacts as a
full listing, at the cost of what changed (adapters.base.Known)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentkeep import fsio
from agentkeep.adapters.base import Adapter
from agentkeep.core.context import Context
from agentkeep.core.indexing import relist, scan
from agentkeep.paths import Env
from build_claude import RECORDING, TODOS, make_session
from fakehome import FakeHome
from trees import settle


@contextmanager
def listed_dirs() -> Iterator[list[str]]:
    """The directories Claude's finder lists whole while in the block (a
    patch of its own: undone alone, not the fake home's environment)."""
    seen: list[str] = []
    real = fsio.listed

    def counting(path: str | os.PathLike[str]) -> Iterator[tuple[str, bool, bool]]:
        seen.append(os.fspath(path))
        return real(path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fsio, "listed", counting)
        yield seen


def indexed_paths(ctx: Context, sid: str) -> set[str]:
    return {a.path for a in ctx.index.artifacts("claude", sid)}


def shared_dirs(ctx: Context) -> set[str]:
    """The directories sessions share, but the roots (whose listings, of a
    key directory per project, are listed each time: they are small) and
    sessions/, the registry of the live sessions (one record per running
    claude, which may rewrite it in place: read at each event's look, as
    the daemon always did)."""
    adapter = ctx.adapters["claude"]
    roots = {os.fspath(r.path) for r in adapter.roots()}
    registry = os.fspath(config_dir(adapter) / "sessions")
    return {os.fspath(d) for d in adapter.watch_dirs()} - roots - {registry}


def config_dir(adapter: Adapter) -> Path:
    return next(r.path for r in adapter.roots() if r.kind == "config")


def test_an_event_lists_only_what_changed_and_finds_what_is_new(fake_home: FakeHome) -> None:
    sessions = [make_session(fake_home, cwd=f"/home/user/p{n % 3}") for n in range(6)]
    s = sessions[0]
    ctx = Context.open(Env.from_environ(fake_home.environ))
    settle(ctx.adapters["claude"].watch_dirs())
    scan(ctx)
    before = indexed_paths(ctx, s.id)
    shared = shared_dirs(ctx)
    assert len(shared) > 10, "SETUP INVALID: too few shared directories to tell"

    # Nothing changed: no shared directory is listed, and the index holds
    # what it held.
    relist(ctx, "claude", [s.id])
    with open(s.transcript, "a") as f:
        f.write(json.dumps({"type": "user", "sessionId": s.id}) + "\n")
    with listed_dirs() as seen:
        relist(ctx, "claude", [s.id])
    assert not set(seen) & shared, sorted(set(seen) & shared)
    assert indexed_paths(ctx, s.id) == before

    # A recording and a todo list new beside its others: the two directories
    # they changed are listed, nothing else shared, and both are found.
    key_dir = s.transcript.parent
    recording = key_dir / f"{s.id}-1700000000000.cast"
    recording.write_text("{}\n")
    todo = Path(s.layout.config) / "todos" / f"{s.id}-agent-{sessions[1].id}.json"
    todo.write_text("[]")
    with listed_dirs() as seen:
        relist(ctx, "claude", [s.id])
    assert set(seen) & shared == {str(key_dir), str(todo.parent)}, seen
    kinds = {a.path: a.kind for a in ctx.index.artifacts("claude", s.id)}
    assert kinds[str(recording)] == RECORDING and kinds[str(todo)] == TODOS

    # What a full listing finds, for every session.
    full = {sid: indexed_paths(ctx, sid) for sid in (x.id for x in sessions)}
    scan(ctx)
    assert {sid: indexed_paths(ctx, sid) for sid in full} == full


def test_sessions_gone_and_forgotten_are_not_listed_again(fake_home: FakeHome) -> None:
    """After a prune (which forgot the sessions it removed), an event's
    refresh of what it removed lists no directory; a vanished session the
    index still knows is listed again, and forgotten."""
    sessions = [make_session(fake_home, cwd=f"/home/user/p{n % 3}") for n in range(12)]
    ctx = Context.open(Env.from_environ(fake_home.environ))
    try:
        scan(ctx)
        pruned, deleted, kept = sessions[:10], sessions[10], sessions[11]
        for s in [*pruned, deleted]:
            for a in ctx.index.artifacts("claude", s.id):
                disk_path = Path(a.path)
                if disk_path.is_dir():
                    shutil.rmtree(disk_path)
                else:
                    disk_path.unlink(missing_ok=True)
        ctx.index.delete(("claude", s.id) for s in pruned)
        gone = {s.id for s in [*pruned, deleted]}
        with listed_dirs() as seen:
            relist(ctx, "claude", sorted(s.id for s in pruned), vanished=gone)
        assert seen == [], "the removed and forgotten sessions were listed again"

        relist(ctx, "claude", [deleted.id, kept.id], vanished={deleted.id})
        assert {s.id for s in ctx.index.sessions("claude")} == {kept.id}
    finally:
        ctx.index.close()
