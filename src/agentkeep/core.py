"""The functions the CLI and the daemon both call.

Each takes a Context (one user's config, adapters, index and state dir) and
plain parameters, and returns the contract's JSON shapes. The daemon adds
only watching, scheduling and serving around these; the CLI only parsing and
rendering.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agentkeep import __version__, adapters, disk, leases, preview, trash, view, workers
from agentkeep.adapters.base import Adapter, listing_again_is_cheaper
from agentkeep.config import Config, ConfigError, parse_duration
from agentkeep.errors import BadParams, Failure, NotFound
from agentkeep.index import IDLE_TAIL, Index, IndexedSession, Rows, written_as_python
from agentkeep.jsontext import JSONText, folded_item, folded_list
from agentkeep.model import Artifact, Holder, HolderKind, Session, State, rfc3339
from agentkeep.paths import Env, UnsafeDirectory, private_state_dir
from agentkeep.processes import ProcessTable
from agentkeep.progress import Progress, Tally, estimate
from agentkeep.protocol import INVALID_PARAMS
from agentkeep.prune import (
    PruneOptions,
    Pruner,
    PruneRefused,
    PruneReport,
    lift_pause,
    read_pause,
    record_last_prune,
    state_disk_full,
)
from agentkeep.statefiles import Pins, StateFileError, read_json

log = structlog.get_logger("agentkeep.core")

SUGGESTED_RETENTION = "30d"
SUGGESTED_SECONDS = 30 * 86400.0


def _open_index(path: Path) -> Index:
    """The index; kept in memory when it cannot be written at `path` (a full
    disk): it is a cache of the disk, so everything still works from memory."""
    try:
        return Index(path, adapters.evidence_kinds())
    except (sqlite3.Error, OSError) as exc:
        log.warning("the index cannot be written; kept in memory", path=str(path), error=str(exc))
        return Index(path, adapters.evidence_kinds(), memory=True)


@dataclass
class Context:
    """Everything one user's view needs. A bad config is recorded, not
    raised: the daemon keeps serving and prunes nothing until it is fixed."""

    env: Env
    state_dir: Path
    config: Config
    config_error: str | None
    adapters: dict[str, Adapter]
    index: Index
    prune_lock: threading.Lock = field(default_factory=threading.Lock)
    # The last prune's summary when it could not be saved (a full disk):
    # status shows it from here.
    unsaved_prune: dict[str, Any] | None = None

    @classmethod
    def open(cls, env: Env) -> Context:
        """One user's view. Refused (exit 1) when the state dir, or a folder
        of it, is not the user's alone: someone else's pins.json or leases
        would decide what is removed (paths.private_state_dir)."""
        try:
            state_dir = private_state_dir(env)
        except UnsafeDirectory as exc:
            raise Failure(1, f"refusing the state dir: {exc}") from None
        except OSError as exc:
            why = exc.strerror or exc
            raise Failure(1, f"cannot create the state dir {env.state_dir}: {why}") from None
        config, error = view.load(env, state_dir)
        index = _open_index(state_dir / "index.sqlite")
        ctx = cls(env, state_dir, config, error, adapters.build(env, config), index)
        index.forget_agents(ctx.adapters)
        return ctx

    def reload(self) -> None:
        self.config, self.config_error = view.load(self.env, self.state_dir)
        self.adapters = adapters.build(self.env, self.config)
        self.index.forget_agents(self.adapters)
        if self.config_error:
            log.error("config invalid: pruning stops until it is fixed", error=self.config_error)

    def require_config(self) -> Config:
        if self.config_error:
            raise Failure(2, self.config_error)
        return self.config

    def fingerprint(self) -> dict[str, Any]:
        return view.fingerprint(self.env, self.state_dir, self.adapters)

    def adapter(self, agent: str) -> Adapter:
        try:
            return self.adapters[agent]
        except KeyError:
            known = ", ".join(sorted(self.adapters)) or "none"
            raise BadParams(f"unknown or disabled agent {agent!r} (enabled: {known})") from None

    def session_id(self, agent: str, raw: str) -> str:
        sid = self.adapter(agent).canonical_id(str(raw))
        if sid is None:
            raise NotFound(f"no such session: {agent} {raw!r} is not a valid {agent} session id")
        return sid


# -- indexing ------------------------------------------------------------------
def scan(ctx: Context, progress: Progress | None = None) -> dict[str, Any]:
    started = time.monotonic()
    counts = _scan(ctx, list(ctx.adapters), progress)
    return {
        "sessions": {agent: n for agent, (n, _, _) in counts.items()},
        "artifacts": sum(a for _, a, _ in counts.values()),
        "bytes": sum(b for _, _, b in counts.values()),
        "seconds": round(time.monotonic() - started, 3),
    }


def _scan(
    ctx: Context, agents: list[str], progress: Progress | None = None
) -> dict[str, tuple[int, int, int]]:
    """Scan `agents` into the index, in one transaction: (sessions,
    artifacts, bytes) per agent. A big home is measured in worker
    processes (see workers)."""
    # Taken before anything is listed: a directory that changes during the
    # scan then differs at the next reconcile, which lists it again.
    signatures = {agent: _dir_signatures(ctx.adapters[agent]) for agent in agents}
    hints = {agent: ctx.adapters[agent].expected_sessions() for agent in agents}
    estimates = {a: estimate(hint, ctx.index.count(a)) for a, hint in hints.items()}
    expected = sum(n or 0 for n in estimates.values())
    # Agents that list here before they hand out parts go last, so that
    # workers run the others' parts meanwhile (and the progress total, which
    # waits for every agent without an estimate, is known early).
    order = sorted(agents, key=lambda agent: hints[agent] is not None)
    # One agent that does not split its scan would be one part: nothing to spread.
    splits = len(agents) > 1 or any(hint is not None for hint in hints.values())
    spread = splits and workers.worth_spreading(expected)
    with _collector_paused(), ctx.index.replacing(agents) as replacement:
        tally = Tally(progress, "scanning", estimates)
        parts = (
            (agent, part)
            for agent in order
            for part in tally.parts(agent, ctx.adapters[agent].scan_parts())
        )
        for agent, rows in workers.run(parts, _restored(ctx), spread=spread):
            replacement.add(agent, _counted(tally, agent, rows))
        tally.finish()
    for agent, signature in signatures.items():
        ctx.index.set_dir_signatures(agent, signature)
    return replacement.counts


def _counted(tally: Tally, agent: str, rows: Iterable[Rows]) -> Iterator[Rows]:
    """One part's rows, counted as the index takes them."""
    for batch in rows:
        yield batch
        tally.add(agent, len(batch.sessions))
    tally.part_done(agent)


class _CollectorPause:
    """Python's cycle collector off while any scan runs. A scan makes
    hundreds of thousands of tuples (the listing, the rows coming back),
    none of them in a cycle; the collector walked them again and again as
    they were made: a tenth of the scan's own CPU. Counted, because daemon
    threads may scan at once; the collector comes back (if it was on) with
    the last of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scans = 0
        self._was_on = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._scans == 0:
                self._was_on = gc.isenabled()
                gc.disable()
            self._scans += 1
        try:
            yield
        finally:
            with self._lock:
                self._scans -= 1
                if self._scans == 0 and self._was_on:
                    gc.enable()


_collector_paused = _CollectorPause()


def _restored(ctx: Context) -> dict[tuple[str, str], float]:
    """When sessions were last restored. An unreadable record only costs the
    index its restore times (prune itself refuses to run without them)."""
    try:
        return trash.restored_at(ctx.state_dir)
    except trash.TrashError as exc:
        log.error("restore times unreadable", error=str(exc))
        return {}


def _dir_signatures(adapter: Adapter) -> dict[str, int | None]:
    return disk.dir_mtimes(adapter.watch_dirs())


def refresh(ctx: Context, agent: str, session_id: str) -> None:
    """List one session again from the disk into the index (watch events)."""
    relist(ctx, agent, [session_id])


# Sessions listed again per pass (and per index transaction) by reconcile.
RELIST_BATCH = 256


def relist(ctx: Context, agent: str, session_ids: list[str]) -> None:
    """List sessions again from the disk into the index, a batch at a time:
    one listing pass and one transaction per batch, not per session."""
    adapter = ctx.adapters.get(agent)
    if adapter is None or not session_ids:
        return
    restored = _restored(ctx)
    for start in range(0, len(session_ids), RELIST_BATCH):
        listed = adapter.load_many(session_ids[start : start + RELIST_BATCH])
        gone = [(agent, sid) for sid, s in listed.items() if s is None]
        present = [s for s in listed.values() if s is not None]
        ctx.index.put(present, restored, gone=gone)


def reconcile(ctx: Context, progress: Progress | None = None) -> int:
    """Bring the index up to date cheaply: re-list only sessions whose
    indexed artifacts changed on disk, and those named by entries new in
    directories whose mtime changed. Returns how many sessions were
    re-listed (or scanned). `progress` is told of the scans (the first one
    above all, a full scan of every agent)."""
    olds = {name: ctx.index.dir_signatures(name) for name in ctx.adapters}
    # Never indexed: one full scan of all of them, nothing to re-list after it.
    fresh = [name for name, old in olds.items() if not old]
    done = sum(n for n, _, _ in _scan(ctx, fresh, progress).values()) if fresh else 0
    for name, adapter in ctx.adapters.items():
        if name in fresh:
            continue
        old, new = olds[name], _dir_signatures(adapter)
        moved = {d for d in new if old.get(d) != new[d]}
        done += _reconcile_agent(ctx, name, adapter, moved, progress)
        ctx.index.set_dir_signatures(name, new)
    return done


def _reconcile_agent(
    ctx: Context, agent: str, adapter: Adapter, moved: set[str], progress: Progress | None
) -> int:
    """What changed of one agent's sessions, listed again; past a quarter of
    what the agent has indexed, one scan of the agent costs less (and needs
    no path mapped to its session)."""
    gone, newer, known = _changed_artifacts(ctx, agent, moved)
    unknown = [p for d in sorted(moved) for p in disk.entry_paths(d) if p not in known]
    if listing_again_is_cheaper(len(gone) + len(newer) + len(unknown), ctx.index.count(agent)):
        return _scan(ctx, [agent], progress)[agent][0]
    # A newer file may name another session now (a registry file rewritten
    # by a /clear); a new entry names a new session or a new artifact.
    sids = set(gone) | {sid for _, sid in newer}
    sids |= adapter.sessions_named(path for path, _ in newer)
    sids |= adapter.sessions_named(unknown)
    relist(ctx, agent, sorted(sids))
    return len(sids)


def _changed_artifacts(
    ctx: Context, agent: str, moved: set[str]
) -> tuple[set[str], list[tuple[str, str]], set[str]]:
    """One lstat per indexed artifact (streamed from the index, nothing
    read): the sessions with an artifact gone, (path, session) of the
    artifacts newer on disk (undated ones too), and the indexed paths that
    lie directly in the `moved` directories. Entries there that the index
    does not hold are what is new; relisting every session named in a
    shared directory (file-history/) whenever one came or went would relist
    them all."""
    gone: set[str] = set()
    newer: list[tuple[str, str]] = []
    known: set[str] = set()
    for sid, path, mtime in ctx.index.artifact_times(agent):
        if moved and os.path.dirname(path) in moved:
            known.add(path)
        try:
            st = os.lstat(path)
        except OSError:
            gone.add(sid)
            continue
        if mtime is None or st.st_mtime > mtime:
            newer.append((path, sid))
    return gone, newer, known


# -- reading -------------------------------------------------------------------
@dataclass
class Evidence:
    """Who holds which sessions right now."""

    procs: ProcessTable
    pins: set[tuple[str, str]]
    # The lease files that exist, by agent: only those can be held, so the
    # others need no probe (listing many sessions stays cheap).
    lease_files: dict[str, set[str]]


def _evidence(ctx: Context) -> Evidence:
    files: dict[str, set[str]] = {}
    for agent in ctx.adapters:
        try:
            files[agent] = set(os.listdir(ctx.state_dir / "leases" / agent))
        except OSError:
            files[agent] = set()
    return Evidence(ProcessTable.snapshot(ctx.env.uid), _pins(ctx), files)


def _pins(ctx: Context) -> set[tuple[str, str]]:
    """Every pin. A damaged pins.json stops whatever needs the pins (a prune
    above all: a lost pin would let its session go) until a person fixes it."""
    try:
        return Pins(ctx.state_dir).all()
    except StateFileError as exc:
        raise Failure(1, f"{exc}; until then nothing is pruned") from None


def _as_session(ctx: Context, s: IndexedSession, arts: list[Artifact] | None = None) -> Session:
    """An indexed session with its artifacts (adapters read their evidence of
    use, such as Claude's registry files, from them)."""
    if arts is None:
        arts = ctx.index.artifacts(s.agent, s.id)
    return Session(s.agent, s.id, s.workspace, s.parent, arts, bytes=s.bytes)


def _evidence_artifacts(
    ctx: Context, agent: str | None = None
) -> dict[tuple[str, str], list[Artifact]]:
    """The artifacts the adapters read their evidence of use from, for many
    sessions at once (not every artifact: that is most of the index)."""
    kinds = set().union(*(a.evidence_kinds for a in ctx.adapters.values()))
    return ctx.index.all_artifacts(agent, kinds)


def _holders(ctx: Context, s: Session, ev: Evidence) -> list[Holder]:
    adapter = ctx.adapters[s.agent]
    holders = list(adapter.holders(s, ev.procs))
    paths = list(adapter.lock_files(s))
    if f"{leases.encode_id(s.id)}.lock" in ev.lease_files.get(s.agent, ()):
        paths.append(leases.lease_path(ctx.state_dir, s.agent, s.id))
    for path in paths:
        if leases.is_held(path):
            holders.append(Holder(None, HolderKind.LEASE, str(path)))
    return holders


def _state(holders: list[Holder], pinned: bool) -> State:
    if any(h.kind != HolderKind.LEASE for h in holders):
        return State.LIVE
    if holders:
        return State.HELD
    return State.PINNED if pinned else State.IDLE


def _leased(ev: Evidence, agent: str, ids: list[str]) -> list[str]:
    """Those of `ids` that have a lease file. A lease file's name is its id
    percent-encoded, so the few names are decoded rather than every id
    encoded; a name that does not encode back is no id's, except a long id's
    cut and completed with a digest, which sends every id through encode_id()."""
    stems = {n[: -len(".lock")] for n in ev.lease_files.get(agent, ()) if n.endswith(".lock")}
    if any("%%" in stem for stem in stems):
        return [sid for sid in ids if leases.encode_id(sid) in stems]
    decoded = {sid for sid in map(urllib.parse.unquote, stems) if _encodes_to(sid, stems)}
    return [sid for sid in ids if sid in decoded] if decoded else []


def _encodes_to(sid: str, stems: set[str]) -> bool:
    try:
        return leases.encode_id(sid) in stems
    except (ValueError, UnicodeError):  # an empty id, an unencodable one
        return False


def _suspects(ctx: Context, ev: Evidence, agent: str, ids: list[str], found: set[str]) -> list[str]:
    """Those of the agent's `ids` that may be other than idle, given `found`
    (the ids with a lease file, a pin or evidence artifacts); every other
    one is idle for certain. An adapter's holders() reads a session through
    its id (a whole token of a command line), its `evidence_kinds` artifacts,
    and what does not depend on the session (a process with the agent's
    database open, one naming a path under a store's root), which a probe
    with an empty id and no artifacts finds. When that probe, or a process
    that cannot be read, could hold any session, or the adapter has lock
    files of its own, every session is a suspect."""
    adapter = ctx.adapters.get(agent)
    if (
        adapter is None
        or ev.procs.doubtful()
        or type(adapter).lock_files is not Adapter.lock_files
        or adapter.holders(Session(agent, ""), ev.procs)
    ):
        return ids
    found = found | set(ev.procs.named(ids))
    return [sid for sid in ids if sid in found] if found else []


def _state_of(ctx: Context, adapter: Adapter, s: Session, ev: Evidence, leased: bool) -> State:
    """_state(_holders(...)) for many sessions: the leases are not probed
    once a process is known to hold the session (it is live either way)."""
    holders = adapter.holders(s, ev.procs)
    if any(h.kind != HolderKind.LEASE for h in holders):
        return State.LIVE
    paths = adapter.lock_files(s)
    if leased:
        paths = [*paths, leases.lease_path(ctx.state_dir, s.agent, s.id)]
    if holders or any(leases.is_held(p) for p in paths):
        return State.HELD
    return State.PINNED if s.key in ev.pins else State.IDLE


def _states(ctx: Context, ev: Evidence, ids: dict[str, list[str]]) -> dict[tuple[str, str], State]:
    """The state of each of the sessions in `ids` (by agent) that is not
    idle. Only the suspects are looked at one by one: listing tens of
    thousands of sessions costs one look for each one that something names."""
    arts = _evidence_artifacts(ctx, next(iter(ids)) if len(ids) == 1 else None)
    out: dict[tuple[str, str], State] = {}
    for agent, agent_ids in ids.items():
        leased = set(_leased(ev, agent, agent_ids))
        found = leased | {i for a, i in ev.pins if a == agent} | {i for a, i in arts if a == agent}
        suspects = _suspects(ctx, ev, agent, agent_ids, found)
        for r in ctx.index.sessions_of(agent, suspects) if suspects else ():
            key = (agent, r.id)
            session = _as_session(ctx, r, arts.get(key, []))
            state = _state_of(ctx, ctx.adapters[agent], session, ev, r.id in leased)
            if state is not State.IDLE:
                out[key] = state
    return out


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


def _parse_age(text: Any, key: str) -> float:
    try:
        return parse_duration(text, key)
    except ConfigError as exc:
        raise BadParams(str(exc)) from None


def ls_text(ctx: Context, agent: str | None = None, idle_over: str | None = None) -> JSONText:
    """`ls` as the CLI prints it, folded (jsontext): SQLite writes each
    session's object, and only the few that are not idle are looked at."""
    if agent is not None:
        ctx.adapter(agent)
    cutoff = None
    if idle_over is not None:
        cutoff = time.time() - _parse_age(idle_over, "--idle-over")
    rows = ctx.index.listing(agent, cutoff)
    ids: dict[str, list[str]] = {}
    for a, sid, _ in rows:
        ids.setdefault(a, []).append(sid)
    states = _states(ctx, _evidence(ctx), ids) if rows else {}
    whole = folded_list([text for _, _, text in rows])
    if not states and written_as_python(whole):
        return JSONText(whole)
    odd = [(a, sid) for a, sid, text in rows if not written_as_python(text)]
    mine = _written_here(ctx, odd, states) if odd else {}
    cut = len(IDLE_TAIL)
    parts = []
    for a, sid, text in rows:
        state = states.get((a, sid))
        if (a, sid) in mine:
            parts.append(mine[(a, sid)])
        else:
            parts.append(text if state is None else f'{text[:-cut]}"state": "{state.value}"\t  }}')
    return JSONText(folded_list(parts))


def _written_here(
    ctx: Context, keys: list[tuple[str, str]], states: dict[tuple[str, str], State]
) -> dict[tuple[str, str], str]:
    """The folded objects of the sessions SQLite cannot write as Python's
    json does (index.written_as_python)."""
    by_agent: dict[str, list[str]] = {}
    for agent, sid in keys:
        by_agent.setdefault(agent, []).append(sid)
    out = {}
    for agent, agent_ids in by_agent.items():
        for r in ctx.index.sessions_of(agent, agent_ids):
            key = (r.agent, r.id)
            out[key] = folded_item(session_json(r, states.get(key, State.IDLE)))
    return out


def _find(ctx: Context, agent: str, raw_id: str) -> IndexedSession:
    sid = ctx.session_id(agent, raw_id)
    found = ctx.index.get(agent, sid)
    if found is None:
        refresh(ctx, agent, sid)  # the index may be behind the disk
        found = ctx.index.get(agent, sid)
    if found is None:
        raise NotFound(f"no such session: {agent} {sid}")
    return found


def show(ctx: Context, agent: str, id: str) -> dict[str, Any]:
    found = _find(ctx, agent, id)
    ev = _evidence(ctx)
    session = _as_session(ctx, found)
    holders = _holders(ctx, session, ev)
    doc = session_json(found, _state(holders, (agent, found.id) in ev.pins))
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
    doc["pinned"] = (agent, found.id) in ev.pins
    return doc


# A du group: `bytes` the apparent size (st_size, as the contract has it),
# `disk_bytes` what it takes on disk (allocated blocks, as `du` counts), and
# of each what a prune would reclaim now.
_DU_FIELDS = ("bytes", "disk_bytes", "sessions", "reclaimable_bytes", "reclaimable_disk_bytes")


def du(ctx: Context, by: str = "agent") -> dict[str, Any]:
    if by not in ("agent", "workspace"):
        raise BadParams(f"--by must be agent or workspace, not {by!r}")
    reclaim = reclaimable(ctx)
    groups: dict[str, dict[str, Any]] = {}
    for s in ctx.index.sessions():
        key = s.agent if by == "agent" else (s.workspace or "(unknown)")
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"key": key} | dict.fromkeys(_DU_FIELDS, 0)
        g["bytes"] += s.bytes
        g["disk_bytes"] += s.disk_bytes
        g["sessions"] += 1
        if (s.agent, s.id) in reclaim:
            g["reclaimable_bytes"] += s.bytes
            g["reclaimable_disk_bytes"] += s.disk_bytes
    ordered = sorted(groups.values(), key=lambda g: (-g["bytes"], g["key"]))
    return {"by": by, "groups": ordered}


def reclaimable(
    ctx: Context,
    retention: float | None = None,
    known: Mapping[tuple[str, str], str] | None = None,
    rows: list[IndexedSession] | None = None,
) -> set[tuple[str, str]]:
    """Sessions a prune would remove now (ignoring max_removals): idle past
    the cutoff, not held, pinned, undated or unsafe, and no ancestor of one
    that stays. `retention` overrides the config's (for "what would 30 days
    reclaim"). `known`: the states of sessions just looked at (an `ls`
    listing's), not looked at again; `rows`: the index's sessions, when
    they were read already."""
    now = time.time()
    cutoffs = _cutoffs(ctx, retention, None, now)
    if not cutoffs:
        return set()
    pins = _pins(ctx)
    rows = ctx.index.sessions() if rows is None else rows
    by_key = {(r.agent, r.id): r for r in rows}
    old: dict[str, list[str]] = {}
    for r in rows:
        cutoff = cutoffs.get(r.agent)
        if cutoff is None or r.last_activity is None or r.last_activity >= cutoff:
            continue
        if not r.unsafe and (r.agent, r.id) not in pins:
            old.setdefault(r.agent, []).append(r.id)
    # Not pinned, so any state but idle is a holder.
    known = known or {}
    held = {
        (a, sid) for a, ids in old.items() for sid in ids if known.get((a, sid), "idle") != "idle"
    }
    unseen = {a: [sid for sid in ids if (a, sid) not in known] for a, ids in old.items()}
    unseen = {a: ids for a, ids in unseen.items() if ids}
    if unseen:
        held |= set(_states(ctx, _evidence(ctx), unseen))
    go = {(agent, sid) for agent, ids in old.items() for sid in ids if (agent, sid) not in held}
    stay = set(by_key) - go
    for agent, sid in stay:
        seen = {sid}
        parent = by_key[(agent, sid)].parent
        while parent and parent not in seen and (agent, parent) in by_key:
            seen.add(parent)
            go.discard((agent, parent))
            parent = by_key[(agent, parent)].parent
    return go


def reclaim_hint(
    ctx: Context, known: Mapping[tuple[str, str], str] | None = None
) -> dict[str, Any] | None:
    """With no retention configured: what a 30-day retention would reclaim
    (nothing to say while the config is bad: its error says what to fix).
    `known`: as reclaimable() takes it."""
    if ctx.config.has_retention() or ctx.config_error:
        return None
    rows = ctx.index.sessions()
    keys = reclaimable(ctx, SUGGESTED_SECONDS, known, rows)
    total = sum(s.bytes for s in rows if (s.agent, s.id) in keys)
    return {
        "retention": SUGGESTED_RETENTION,
        "sessions": len(keys),
        "bytes": total,
        "config_line": f'retention = "{SUGGESTED_RETENTION}"',
        "config_path": str(ctx.env.config_path),
    }


# -- pruning -------------------------------------------------------------------
def _cutoffs(
    ctx: Context, override: float | None, agent: str | None, now: float
) -> dict[str, float]:
    """Each agent's cutoff: exactly now minus its retention (no rounding)."""
    agents = [agent] if agent else list(ctx.adapters)
    out: dict[str, float] = {}
    for name in agents:
        retention = override if override is not None else ctx.config.retention_for(name)
        if retention is not None:
            out[name] = now - retention
    return out


def _pruner(ctx: Context) -> Pruner:
    return Pruner(ctx.adapters, ctx.state_dir, index=ctx.index, pins=_pins(ctx))


def prune(
    ctx: Context,
    *,
    dry_run: bool = False,
    older_than: str | None = None,
    agent: str | None = None,
    scheduled: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any] | None:
    """Remove sessions idle past the cutoff. A scheduled prune re-reads the
    config, skips its turn when another prune runs, and honours the pause;
    any other prune that is not a dry run waits its turn and lifts the pause."""
    if scheduled:
        ctx.reload()
        if ctx.config_error or not ctx.config.has_retention():
            return None
    config = ctx.require_config()
    if agent is not None:
        ctx.adapter(agent)
    now = time.time()
    override = _parse_age(older_than, "--older-than") if older_than is not None else None
    cutoffs = _cutoffs(ctx, override, agent, now)
    if not cutoffs:
        raise BadParams(
            "prune needs a cutoff: pass --older-than AGE or set a retention in "
            f'{ctx.env.config_path} (for example: retention = "{SUGGESTED_RETENTION}")'
        )
    wanted = preview.retentions(config, ctx.adapters)
    waits = preview.due(ctx.state_dir, wanted, now, config.prune_interval) if scheduled else None
    opts = PruneOptions(
        cutoffs=cutoffs,
        now=now,
        dry_run=dry_run or waits is not None,
        max_removals=config.max_removals,
        trash_for=config.trash,
        scheduled=scheduled,
        progress=progress,
    )
    report = _run_locked(ctx, opts, wait=not scheduled, preview=waits)
    if report is None:
        return None
    if not report.paused and not opts.dry_run and (scheduled or agent is None):
        _save(preview.confirmed, ctx.state_dir, wanted)
    elif waits is not None and not report.paused:
        log.warning("a new retention: previewed, nothing removed", why=waits)
        _save(preview.previewed, ctx.state_dir, wanted, now)
    return report.to_json()


def _save(write: Callable[..., None], *args: Any) -> None:
    """A state write whose failure (a full disk) costs a record, not the run."""
    try:
        write(*args)
    except OSError as exc:
        log.error("state not saved", error=exc.strerror or str(exc))


def _run_locked(
    ctx: Context, opts: PruneOptions, *, wait: bool, preview: str | None = None
) -> PruneReport | None:
    lock = leases.PrunerLock(ctx.state_dir)
    try:
        if not lock.acquire(wait=wait):
            log.info("a prune is already running; this turn is skipped")
            return None
    except leases.LeaseError as exc:
        raise Failure(1, f"cannot take the prune lock: {exc}; nothing was removed") from None
    try:
        try:
            # A prune lists every session as a scan does, and holds them:
            # the cycle collector would walk them at every removal.
            with _collector_paused():
                report = _pruner(ctx).run(opts)
        except PruneRefused as exc:
            raise Failure(exc.exit_code, str(exc), INVALID_PARAMS) from None
        except trash.TrashError as exc:
            raise Failure(1, f"prune refused: {exc}") from None
        summary = None
        if report.paused:
            summary = report.summary(opts.now, opts.scheduled) | _last_ts(ctx)
        elif preview is not None:
            # What a new retention would remove, for status to show.
            summary = report.summary(opts.now, opts.scheduled) | {"preview": preview}
        elif not opts.dry_run:
            summary = report.summary(opts.now, opts.scheduled)
        # The report is what the run did: a record that cannot be written
        # (a full disk) is one error line, never the report's loss.
        try:
            if summary is not None and not opts.dry_run and not opts.scheduled:
                lift_pause(ctx.state_dir, opts.now)
            if summary is not None:
                record_last_prune(ctx.state_dir, summary)
                ctx.unsaved_prune = None
        except OSError as exc:
            log.error("the prune's record was not saved", error=exc.strerror or str(exc))
            ctx.unsaved_prune = summary
        return report
    finally:
        lock.release()


def _last_ts(ctx: Context) -> dict[str, Any]:
    """A paused run does not move the recorded time of the last real prune."""
    last = read_json(ctx.state_dir / "last_prune.json", {}) or {}
    return {k: last[k] for k in ("ts", "time") if k in last}


def purge(
    ctx: Context, *, agent: str, id: str, dry_run: bool = False, cascade: bool = False
) -> dict[str, Any]:
    """Remove one named session now, whatever its age, and nothing else:
    refused (exit 4) when live, held, pinned or the ancestor of a session that
    stays; --cascade takes the descendants first under the same rules."""
    ctx.require_config()
    sid = ctx.session_id(agent, id)
    adapter = ctx.adapter(agent)
    if adapter.load(sid) is None:
        raise NotFound(f"no such session: {agent} {sid}")
    targets = [(agent, sid)]
    if cascade:
        targets += [(agent, c) for c in _descendants(adapter, sid)]
    opts = PruneOptions(
        cutoffs={agent: time.time()},
        now=time.time(),
        dry_run=dry_run,
        trash_for=ctx.config.trash,
        purge=targets,
    )
    report = _run_locked(ctx, opts, wait=True)
    assert report is not None
    doc = report.to_json()
    if any(k.agent == agent and k.id == sid for k in report.kept):
        raise Failure(4, f"refused: {agent} {sid} stays ({_why(report, agent, sid)})", report=doc)
    return doc


def _why(report: PruneReport, agent: str, sid: str) -> str:
    for k in report.kept:
        if k.agent == agent and k.id == sid:
            return f"{k.reason.value}: {k.detail}" if k.detail else k.reason.value
    return "kept"


def _descendants(adapter: Adapter, sid: str) -> list[str]:
    sessions = list(adapter.scan())
    children: dict[str, list[str]] = {}
    for s in sessions:
        if s.parent:
            children.setdefault(s.parent, []).append(s.id)
    out: list[str] = []
    stack, seen = [sid], {sid}
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                out.append(child)
                stack.append(child)
    return out


def pin(ctx: Context, agent: str, id: str, pinned: bool = True) -> dict[str, Any]:
    found = _find(ctx, agent, id)
    _pins(ctx)  # a damaged file is reported, never overwritten
    Pins(ctx.state_dir).set(agent, found.id, pinned)
    return {"agent": agent, "id": found.id, "pinned": pinned}


def expire_trash(ctx: Context) -> None:
    trash.expire(ctx.state_dir, now=time.time())


# -- the trash (always in-process: it is this user's state dir) -----------------
def _entry_json(e: trash.TrashEntry) -> dict[str, Any]:
    return {
        "agent": e.agent,
        "id": e.id,
        "parent": e.parent,
        "bytes": e.bytes,
        "partial": e.partial,
        "trashed_at": rfc3339(e.trashed_at),
        "expires_at": rfc3339(e.expires_at),
        "last_activity": rfc3339(e.last_activity),
    }


def trash_list(state_dir: Path) -> dict[str, Any]:
    return {"entries": [_entry_json(e) for e in trash.list_entries(state_dir)]}


def trash_empty(state_dir: Path, older_than: str | None = None) -> dict[str, Any]:
    """Free the trash now (all of it, or what was trashed longer ago than
    `older_than`), each entry under its session's lease as expiry takes it."""
    before = None if older_than is None else time.time() - _parse_age(older_than, "--older-than")
    done = trash.empty(state_dir, trashed_before=before)
    return {
        "emptied": [_entry_json(e) for e in done.removed],
        "held": [_entry_json(e) for e in done.held],
        "bytes": sum(e.bytes for e in done.removed),
    }


def trash_total(state_dir: Path) -> dict[str, int]:
    entries = trash.list_entries(state_dir)
    return {"bytes": sum(e.bytes for e in entries), "sessions": len(entries)}


def restore(ctx: Context, agent: str, id: str) -> dict[str, Any]:
    """Put a session back from the trash (with its trashed ancestors), then
    list it again into the index."""
    sid = ctx.session_id(agent, id)
    try:
        result = trash.restore(ctx.state_dir, agent, sid, now=time.time())
    except trash.NoSuchEntry as exc:
        raise NotFound(str(exc)) from None
    except (trash.TrashError, OSError) as exc:
        raise Failure(1, str(exc)) from None
    for entry in result.entries:
        refresh(ctx, entry.agent, entry.id)
    return {
        "restored": [{"agent": e.agent, "id": e.id, "bytes": e.bytes} for e in result.entries],
        "bytes": result.bytes,
        "paths": result.paths,
    }


# -- status --------------------------------------------------------------------
def status_fields(ctx: Context) -> dict[str, Any]:
    last = ctx.unsaved_prune or read_json(ctx.state_dir / "last_prune.json", None)
    if isinstance(last, dict):
        last = {k: v for k, v in last.items() if k != "ts"}
    return {
        "version": __version__,
        "sessions": ctx.index.count(),
        "config": {
            "ok": ctx.config_error is None,
            "error": ctx.config_error,
            "retention": ctx.config.retention_text if not ctx.config_error else None,
        },
        "last_prune": last,
        "paused": read_pause(ctx.state_dir) or state_disk_full(ctx.state_dir),
    }
