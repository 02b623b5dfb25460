"""GitHub Copilot CLI (FIELD-NOTES.md "GitHub Copilot CLI"): per session,
`<home>/session-state/<id>/` (its `events.jsonl` is what Copilot lists and
resumes by: primary), the operation lock
`session-state/.session-operation-locks/<id>.lock`, its rows in the shared
`session-store.db` (rows alone are a session too: Copilot's own delete
leaves them), and tool outputs in the tmp dirs that its events name or a
process of its `inuse.<pid>` locks wrote.

`<home>` is $COPILOT_HOME, else ~/.copilot; older installs kept the same
under `$XDG_STATE_HOME/.copilot`, which 1.0.102 moves home, leaving links.
Both are read; what is reached both ways is read once, through the path
that is no link, and nothing is ever removed through a link.

In use: `inuse.<pid>.lock` of a live pid, or a command line naming the id.
Lineage: the child's own fork event names its parent. Shared files (logs,
sidebar and open-sessions state, config) are residual where they name it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from agentkeep import agents, disk
from agentkeep.adapters import rows, sqlite
from agentkeep.adapters.base import Adapter, Known, Remover, Root, each_session, remove_files
from agentkeep.adapters.copilot import listing
from agentkeep.adapters.copilot.events import ID, canonical_id, described
from agentkeep.adapters.copilot.listing import KIND_INUSE_HOLD, KIND_INUSE_LOCK, OPLOCKS, Place
from agentkeep.adapters.dirs import parts_below, root_problem
from agentkeep.model import Described, Holder, HolderKind, Session
from agentkeep.processes import ProcessTable

__all__ = ["ADAPTER", "CopilotAdapter"]

STATE = "session-state"


class CopilotAdapter(Adapter):
    """Copilot CLI's sessions."""

    name = "copilot"
    evidence_kinds = frozenset({KIND_INUSE_LOCK, KIND_INUSE_HOLD})
    id_in_name = ID
    canonical_id = staticmethod(canonical_id)

    @cached_property
    def legacy(self) -> Path:
        """The older installs' home, under $XDG_STATE_HOME."""
        return agents.roots(self.name, self.env)[1]

    def roots(self) -> list[Root]:
        """Its home and the legacy one."""
        return [
            Root.check(self.root, "home", self.env.uid),
            Root.check(self.legacy, "legacy", self.env.uid),
        ]

    def watch_dirs(self) -> list[Path]:
        """Each `session-state` and its operation locks."""
        dirs = [d for p in self._places() for d in (p.state, p.state / OPLOCKS)]
        return [d for d in dirs if d.name != OPLOCKS or d.is_dir()]

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """One look at what sessions share, then each id's dirs."""
        places = self._places()
        found = listing.look(self.env, self._stores(), [self.root, self.legacy], names)
        ids = set(names) if names is not None else listing.ids(places, found)
        yield from each_session(ids, lambda sid: listing.session(self.name, sid, places, found))

    def session_for_path(self, path: str) -> str | None:
        """The session dir or operation lock `path` is in or is."""
        for place in self._places():
            parts = parts_below(path, place.state)
            if not parts:
                continue
            if parts[0] == OPLOCKS:
                if len(parts) == 2 and parts[1].endswith(".lock"):
                    return canonical_id(parts[1].removesuffix(".lock"))
                return None
            return canonical_id(parts[0])
        return None

    def databases(self) -> list[Path]:
        """Each real session-store.db."""
        return [path for path, _ in self._stores()]

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
        session, and each process's flocked `.hold`. Only those that exist
        (the pruner would make a missing one, in Copilot's directory)."""
        sid = canonical_id(session.id)
        if sid is None:
            return []
        locks = [p.state / OPLOCKS / f"{sid}.lock" for p in self._places() if not p.linked]
        holds = [a.path for a in session.artifacts if a.kind == KIND_INUSE_HOLD and not a.linked]
        return [lock for lock in locks if os.path.lexists(lock)] + [Path(h) for h in holds]

    def describe(self, session: Session) -> Described:
        """Its name else its first prompt, and its start (events.described)."""
        return described(
            {os.path.basename(a.path): a.path for a in session.artifacts if not a.linked}
        )

    def remove(self, session: Session, remover: Remover) -> None:
        """The files, events.jsonl first (invariant 5), then the rows (only
        while no Copilot has the database open; else reported, for later)."""
        # Checked before any change: a database that cannot be read may hold
        # the session's rows, and looking again could not see them either.
        sqlite.ensure_readable(db for db, _ in self._stores())
        remove_files([a for a in session.artifacts if not rows.is_row(a)], remover)
        for artifact in session.artifacts:
            if rows.is_row(artifact) and artifact.linked:
                remover.residual(artifact.path)
        if ours := rows.ours(session.artifacts):
            listing.remove_rows(session.id, ours, self.env.uid, remover)
        for path in session.residual:
            remover.residual(path)

    def _places(self) -> list[Place]:
        """Each real `session-state` dir once, through the path that is no
        link when there is one; one only reached through a link is linked."""
        found = []
        for root in (self.root, self.legacy):
            state = root / STATE
            if state.is_dir():
                linked = root_problem(self.env, root) is not None or disk.is_link(state)
                found.append(Place(root, state, linked))
        return listing.once(found, lambda p: (p.state, p.linked))

    def _stores(self) -> list[tuple[Path, bool]]:
        """Each real session-store.db once, and whether it lies behind a link."""
        found = []
        for root in (self.root, self.legacy):
            db = root / listing.STORE
            if sqlite.is_database_file(db):
                found.append((db, root_problem(self.env, root) is not None or disk.is_link(db)))
        return listing.once(found, lambda s: s)


ADAPTER = CopilotAdapter
