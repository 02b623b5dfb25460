"""Sessions as the index holds them, with their state (prune.evidence, the
rule the plan reads): `ls`, `show`, `pin`."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from agentkeep.core.context import Context, parse_age
from agentkeep.core.indexing import refresh
from agentkeep.core.reclaim import plan_words
from agentkeep.errors import NotFound
from agentkeep.index import IDLE_TAIL, IndexedSession, written_as_python
from agentkeep.jsontext import JSONText, folded_item, folded_list
from agentkeep.model import Session, State, rfc3339
from agentkeep.prune import evidence
from agentkeep.statefiles import Pins

Key = tuple[str, str]


def session_json(s: IndexedSession, state: State) -> dict[str, Any]:
    """The contract's session object (`unreadable` only when it has some)."""
    doc: dict[str, Any] = {
        "agent": s.agent,
        "id": s.id,
        "workspace": s.workspace,
        "parent": s.parent,
        "last_activity": rfc3339(s.last_activity),
        "bytes": s.bytes,
        "artifacts": s.artifacts,
    }
    if s.unreadable:
        doc["unreadable"] = list(s.unreadable)
    doc["state"] = state.value
    return doc


def states(ctx: Context, ids: Mapping[str, Iterable[str]]) -> dict[Key, State]:
    """The state of each session of `ids` (by agent) that is not idle."""
    if not ids:
        return {}
    seen = evidence.survey(ctx.watch(), ctx.index, ids)
    keys = set(seen.holding) | set(seen.leased) | seen.pins
    out = {key: evidence.state(seen, Session(*key)) for key in keys}
    return {key: state for key, state in out.items() if state is not State.IDLE}


def ls_text(ctx: Context, agent: str | None = None, idle_over: str | None = None) -> JSONText:
    """`ls` as the CLI prints it, folded (jsontext): SQLite writes each
    session's object, read as it is sent within one read of the index begun
    here (the states and the texts agree)."""
    if agent is not None:
        ctx.adapter(agent)
    cutoff = None
    if idle_over is not None:
        cutoff = time.time() - parse_age(idle_over, "--idle-over")
    ctx.index.begin_reading()
    try:
        found = states(ctx, ctx.index.listing_ids(agent, cutoff))
    except BaseException:
        ctx.index.end_reading()
        raise
    return JSONText(_ls_parts(ctx, ctx.index.listing_rows(agent, cutoff), found))


# Sessions read from the index, and sent, at a time.
_LS_BATCH = 1000


def _ls_parts(
    ctx: Context, rows: Iterator[tuple[str, str, str]], found: dict[Key, State]
) -> Iterator[str]:
    """The rows' texts with their states, folded; ends ls_text()'s read."""
    try:
        yield from folded_list(_with_states(ctx, batch, found) for batch in _batches(rows))
    finally:
        ctx.index.end_reading()


def _batches(rows: Iterator[tuple[str, str, str]]) -> Iterator[list[tuple[str, str, str]]]:
    while batch := list(itertools.islice(rows, _LS_BATCH)):
        yield batch


def _with_states(
    ctx: Context, batch: list[tuple[str, str, str]], found: dict[Key, State]
) -> list[str]:
    """Each row's folded text, its state written in where it is not idle."""
    odd = [(a, sid) for a, sid, text in batch if not written_as_python(text)]
    mine = _written_here(ctx, odd, found) if odd else {}
    cut = len(IDLE_TAIL)
    parts = []
    for a, sid, text in batch:
        state = found.get((a, sid))
        if (a, sid) in mine:
            parts.append(mine[(a, sid)])
        elif state is None:
            parts.append(text)
        else:
            parts.append(f'{text[:-cut]}"state": "{state.value}"\t  }}')
    return parts


def _written_here(ctx: Context, keys: list[Key], found: dict[Key, State]) -> dict[Key, str]:
    """The folded objects of the sessions SQLite cannot write as Python's
    json does."""
    by_agent: dict[str, list[str]] = {}
    for agent, sid in keys:
        by_agent.setdefault(agent, []).append(sid)
    out = {}
    for agent, agent_ids in by_agent.items():
        for r in ctx.index.sessions_of(agent, agent_ids):
            key = (r.agent, r.id)
            out[key] = folded_item(session_json(r, found.get(key, State.IDLE)))
    return out


def find(ctx: Context, agent: str, raw_id: str) -> IndexedSession:
    """The indexed session a person named, listed again if the index lacks it."""
    sid = ctx.session_id(agent, raw_id)
    found = ctx.index.get(agent, sid)
    if found is None:
        refresh(ctx, agent, sid)
        found = ctx.index.get(agent, sid)
    if found is None:
        raise NotFound(f"no such session: {agent} {sid}")
    return found


def show(ctx: Context, agent: str, id: str, *, verdict: bool = True) -> dict[str, Any]:
    """One session, with its artifacts, holders and children; `verdict`: and
    what the prune's plan says of it, with what to do."""
    found = find(ctx, agent, id)
    watch = ctx.watch()
    session = evidence.indexed(found, ctx.index.artifacts(agent, found.id))
    state, holders = evidence.shown(watch, session)
    doc = session_json(found, state)
    doc["artifacts"] = [
        {"path": a.path, "kind": a.kind, "bytes": a.bytes}
        | (
            {"linked": True, "note": "behind a link or on an unsafe root: never removed"}
            if a.linked
            else {}
        )
        for a in session.artifacts
    ]
    doc["holders"] = [
        {"pid": h.pid, "kind": h.kind.value} | ({"detail": h.detail} if h.detail else {})
        for h in holders
    ]
    doc["children"] = ctx.index.children(agent, found.id)
    doc["unsafe"] = found.unsafe
    doc["pinned"] = session.key in watch.pins
    if verdict and ctx.config_error is None:
        words = plan_words(ctx, doc)
        doc["verdict"] = {
            "fate": words.fate.value,
            "reason": words.reason,
            "words": words.words,
            "do": _WHAT_TO_DO.get(words.reason or words.fate.value, "").format(
                agent=agent, id=found.id
            ),
        }
    return doc


# What a person can do about each verdict (README, "Why was my session kept?").
_WHAT_TO_DO = {
    "goes": "to keep it: agentkeep pin {agent} {id}",
    "live": "it goes once no process has it open",
    "held": "it goes once its lease is released (agentkeep show lists the holder)",
    "pinned": "to let it go: agentkeep unpin {agent} {id}",
    "ancestor": "it goes after the sessions made from it (its children) go",
    "recent": "one of the keep_last most recent of its workspace: lower keep_last to let it go",
    "undated": "a time of it cannot be read: look at its artifacts' permissions",
    "unsafe": "it lies behind a link or in an unreadable place: agentkeep never removes it",
    "capped": "max_removals stopped the last prune first: the next one takes it",
}


def pin(ctx: Context, agent: str, id: str, pinned: bool = True) -> dict[str, Any]:
    """Pin (or unpin) a session."""
    found = find(ctx, agent, id)
    ctx.pins()  # a damaged file is reported, never overwritten
    Pins(ctx.state_dir).set(agent, found.id, pinned)
    return {"agent": agent, "id": found.id, "pinned": pinned}
