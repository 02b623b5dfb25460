"""GitHub Copilot CLI: a directory per session under `<home>/session-state/`,
its rows in the shared `<home>/session-store.db`, and its big tool outputs
in the tmp dirs (FIELD-NOTES "GitHub Copilot CLI").

`<home>` is $COPILOT_HOME, else ~/.copilot; older installs kept
`session-state` and `session-store.db` in `$XDG_STATE_HOME/.copilot`, and
1.0.102 moves them home and leaves links at the old paths. Both are read; a
directory or database reached both ways is read once, through the path that
is no link, and nothing is ever removed through a link.

Per session `<id>` (a UUID, in the case the caller gave `--session-id`):
- `session-state/<id>/`: `events.jsonl` is what Copilot lists and resumes a
  session by (without it the session is neither listed nor resumable, with
  only it both are): the primary record, removed first. `workspace.yaml`,
  `checkpoints/`, `files/`, `session.db` and the rest go with the directory.
- `session-state/.session-operation-locks/<id>.lock`: Copilot flocks it for
  each operation on the session and waits 30 s for it, so the pruner holds
  it too (lock_files), with every `inuse.<pid>.hold` of the session.
- its rows in every table of `session-store.db` with a `session_id` column
  (`search_index`, FTS5, among them) and `sessions` by `id`. Copilot's own
  `/session delete` leaves them all: rows alone are a session too, so that
  they are found and removed.
- `<ms>-copilot-tool-output-<pid>-<uuid>.txt` directly in a tmp dir: named
  in `events.jsonl`, or written by the process of one of the session's
  `inuse.<pid>` locks (Copilot deletes them when it exits; after a crash the
  events naming them are often never written, and the stale lock is the link
  left). The tmp dirs are not roots: nothing there names a session by its
  name, so they are neither watched nor walked.

In use: `inuse.<pid>.lock` and `.hold` in the session dir of a live pid (a
stale pair of a dead one stays until Copilot resumes the session), or a
command line naming the id (`--resume=<id>`, `--session-id <id>`).

Lineage: `/fork` copies the parent's events into the child, and writes into
each a `session.info` event of `infoType: "fork"`: the child's own says
`Forked from "<name>" (<parent>) as "<name>" (<child>).` Copies of a fork
event name another child, never this session last: only the one ending with
the session's own id makes the link.

Shared, never removed, and residual where they name a removed session:
`logs/*.log` (Copilot keeps 50 process logs of the last 7 days at most),
`sidebar-sessions-state/`, `open-sessions-state.json`,
`command-history-state.json` and `config.json`. Copilot's own package
(`~/.cache/copilot/pkg`, `<home>/pkg`) is never read.

Each concern has its module: events (a session's own files), store (its
rows), listing (one look at what sessions share, and the Session each id
makes). This class wires them.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from agentkeep import agents, disk
from agentkeep.adapters import rows, sqlite
from agentkeep.adapters.base import Adapter, Known, Remover, Root, each_session, remove_files
from agentkeep.adapters.copilot import listing, store
from agentkeep.adapters.copilot.events import ID, canonical_id, described
from agentkeep.adapters.copilot.listing import KIND_INUSE_HOLD, KIND_INUSE_LOCK, OPLOCKS, Place
from agentkeep.adapters.dirs import parts_below, root_problem
from agentkeep.errors import RemovalError
from agentkeep.model import Described, Holder, HolderKind, Session
from agentkeep.processes import ProcessTable

__all__ = ["ADAPTER", "CopilotAdapter"]

STATE = "session-state"


class CopilotAdapter(Adapter):
    name = "copilot"
    evidence_kinds = frozenset({KIND_INUSE_LOCK, KIND_INUSE_HOLD})
    id_in_name = ID

    @cached_property
    def home(self) -> Path:
        return agents.roots(self.name, self.env)[0]

    @cached_property
    def legacy(self) -> Path:
        return agents.roots(self.name, self.env)[1]

    def roots(self) -> list[Root]:
        return [
            Root.check(self.home, "home", self.env.uid),
            Root.check(self.legacy, "legacy", self.env.uid),
        ]

    def watch_dirs(self) -> list[Path]:
        dirs = []
        for place in self._places():
            dirs.append(place.state)
            if (place.state / OPLOCKS).is_dir():
                dirs.append(place.state / OPLOCKS)
        return dirs

    def canonical_id(self, raw: str) -> str | None:
        return canonical_id(raw)

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        places = self._places()
        found = listing.look(self.env, self._stores(), [self.home, self.legacy], names)
        ids = set(names) if names is not None else listing.ids(places, found)
        yield from each_session(ids, lambda sid: listing.session(self.name, sid, places, found))

    def session_for_path(self, path: str) -> str | None:
        for place in self._places():
            parts = parts_below(path, place.state)
            if not parts:
                continue
            if parts[0] == OPLOCKS:
                if len(parts) == 2 and parts[1].endswith(".lock"):
                    return self.canonical_id(parts[1].removesuffix(".lock"))
                return None
            return self.canonical_id(parts[0])
        return None

    def databases(self) -> list[Path]:
        return [path for path, _ in self._stores()]

    # -- in use ---------------------------------------------------------
    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """A command line naming the id, or an `inuse.<pid>` lock of a pid
        that is alive (a reused pid keeps the session: never guess toward
        deleting)."""
        found = list(procs.naming(session.id))
        for pid in sorted(listing.inuse_pids(session.artifacts)):
            if procs.alive(pid) is not None:
                found.append(Holder(pid, HolderKind.REGISTRY, f"inuse.{pid}.lock"))
        return found

    def lock_files(self, session: Session) -> list[Path]:
        """The operation lock Copilot flocks for every operation on the
        session, and the `.hold` each process using it keeps flocked: held,
        the session is in use. Only those that exist are named (the pruner
        would make a missing one, in Copilot's directory)."""
        sid = self.canonical_id(session.id)
        if sid is None:
            return []
        found = [
            place.state / OPLOCKS / f"{sid}.lock"
            for place in self._places()
            if not place.linked and os.path.lexists(place.state / OPLOCKS / f"{sid}.lock")
        ]
        found += [
            Path(a.path) for a in session.artifacts if a.kind == KIND_INUSE_HOLD and not a.linked
        ]
        return found

    def describe(self, session: Session) -> Described:
        """Its name else its first prompt, and its start (events.described)."""
        return described(
            {os.path.basename(a.path): a.path for a in session.artifacts if not a.linked}
        )

    # -- removal --------------------------------------------------------
    def remove(self, session: Session, remover: Remover) -> None:
        """The files first, events.jsonl ahead of them (invariant 5), then
        the rows (store.remove_rows: only while no Copilot has the database
        open; else they stay, reported, for a later run)."""
        # Checked before any change: a database that cannot be read may hold
        # the session's rows, and looking again could not see them either.
        for db, _ in self._stores():
            try:
                with sqlite.reading(db):
                    pass
            except sqlite3.Error as exc:
                raise RemovalError(f"cannot read {db}: {exc}") from exc
        remove_files([a for a in session.artifacts if not rows.is_row(a)], remover)
        for artifact in session.artifacts:
            if rows.is_row(artifact) and artifact.linked:
                remover.residual(artifact.path)
        if ours := rows.ours(session.artifacts):
            store.remove_rows(session.id, ours, self.env.uid, remover)
        for path in session.residual:
            remover.residual(path)

    # -- where ----------------------------------------------------------
    def _places(self) -> list[Place]:
        """Each real `session-state` dir once: through the path that is no
        link when there is one (the link 1.0.102 leaves at the legacy path
        names the same dir). One only reached through a link is read, its
        sessions never removed."""
        found = []
        for root in (self.home, self.legacy):
            state = root / STATE
            if state.is_dir():
                linked = root_problem(self.env, root) is not None or disk.is_link(state)
                found.append(Place(root, state, linked))
        return listing.once(found, lambda p: (p.state, p.linked))

    def _stores(self) -> list[tuple[Path, bool]]:
        """Each real session-store.db once, and whether it lies behind a link."""
        found = []
        for root in (self.home, self.legacy):
            db = root / store.STORE
            if sqlite.is_database_file(db):
                found.append((db, root_problem(self.env, root) is not None or disk.is_link(db)))
        return listing.once(found, lambda s: s)


ADAPTER = CopilotAdapter
