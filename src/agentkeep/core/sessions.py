"""Sessions as the index holds them, with their state: `ls`, `show`, `pin`.

A state comes from prune.evidence, the one rule of use the prune's plan
also reads: `ls` surveys only the sessions something names, `show` looks at
its session fully (every holder, every held lease)."""

from __future__ import annotations

import time
from typing import Any

from agentkeep.core.context import Context, parse_age
from agentkeep.core.indexing import refresh
from agentkeep.errors import NotFound
from agentkeep.index import IDLE_TAIL, IndexedSession, written_as_python
from agentkeep.jsontext import JSONText, folded_item, folded_list
from agentkeep.model import Session, State, rfc3339
from agentkeep.prune import evidence
from agentkeep.statefiles import Pins

Key = tuple[str, str]


def session_json(s: IndexedSession, state: State) -> dict[str, Any]:
    return {
        "agent": s.agent,
        "id": s.id,
        "workspace": s.workspace,
        "parent": s.parent,
        "last_activity": rfc3339(s.last_activity),
        "bytes": s.bytes,
        "artifacts": s.artifacts,
        "state": state.value,
    }


def states(ctx: Context, ids: dict[str, list[str]]) -> dict[Key, State]:
    """The state of each of the sessions in `ids` (by agent) that is not idle."""
    if not ids:
        return {}
    seen = evidence.survey(ctx.watch(), ctx.index, ids)
    keys = set(seen.holding) | set(seen.leased)
    if seen.pins:
        listed = {agent: set(agent_ids) for agent, agent_ids in ids.items()}
        keys |= {(a, sid) for a, sid in seen.pins if sid in listed.get(a, ())}
    out = {key: evidence.state(seen, Session(*key)) for key in keys}
    return {key: state for key, state in out.items() if state is not State.IDLE}


def ls_text(ctx: Context, agent: str | None = None, idle_over: str | None = None) -> JSONText:
    """`ls` as the CLI prints it, folded (jsontext): SQLite writes each
    session's object, and only the few that are not idle are looked at."""
    if agent is not None:
        ctx.adapter(agent)
    cutoff = None
    if idle_over is not None:
        cutoff = time.time() - parse_age(idle_over, "--idle-over")
    rows = ctx.index.listing(agent, cutoff)
    ids: dict[str, list[str]] = {}
    for a, sid, _ in rows:
        ids.setdefault(a, []).append(sid)
    found = states(ctx, ids)
    whole = folded_list([text for _, _, text in rows])
    if not found and written_as_python(whole):
        return JSONText(whole)
    odd = [(a, sid) for a, sid, text in rows if not written_as_python(text)]
    mine = _written_here(ctx, odd, found) if odd else {}
    cut = len(IDLE_TAIL)
    parts = []
    for a, sid, text in rows:
        state = found.get((a, sid))
        if (a, sid) in mine:
            parts.append(mine[(a, sid)])
        else:
            parts.append(text if state is None else f'{text[:-cut]}"state": "{state.value}"\t  }}')
    return JSONText(folded_list(parts))


def _written_here(ctx: Context, keys: list[Key], found: dict[Key, State]) -> dict[Key, str]:
    """The folded objects of the sessions SQLite cannot write as Python's
    json does (index.written_as_python)."""
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
    """The indexed session a person named; listed again when the index does
    not have it yet (it may be behind the disk)."""
    sid = ctx.session_id(agent, raw_id)
    found = ctx.index.get(agent, sid)
    if found is None:
        refresh(ctx, agent, sid)
        found = ctx.index.get(agent, sid)
    if found is None:
        raise NotFound(f"no such session: {agent} {sid}")
    return found


def show(ctx: Context, agent: str, id: str) -> dict[str, Any]:
    found = find(ctx, agent, id)
    watch = ctx.watch()
    session = evidence.indexed(found, ctx.index.artifacts(agent, found.id))
    holders = watch.holders(session)
    doc = session_json(found, evidence.state(watch.evidence(), session))
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
    return doc


def pin(ctx: Context, agent: str, id: str, pinned: bool = True) -> dict[str, Any]:
    found = find(ctx, agent, id)
    ctx.pins()  # a damaged file is reported, never overwritten
    Pins(ctx.state_dir).set(agent, found.id, pinned)
    return {"agent": agent, "id": found.id, "pinned": pinned}
