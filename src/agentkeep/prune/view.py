"""One agent's sessions as listed from the disk (the disk is the truth)."""

from __future__ import annotations

import os

from agentkeep import disk
from agentkeep.adapters.base import Adapter, listing_again_is_cheaper
from agentkeep.model import Session


class DiskView:
    """One agent's sessions as last listed from the disk. A new session (a
    fork made after the plan) is a new entry in a directory that names
    sessions: its mtime changes, and the view lists what is new there."""

    def __init__(self, adapter: Adapter, sessions: list[Session]) -> None:
        self.adapter = adapter
        self._set(sessions)
        self.dirs = [os.fspath(d) for d in adapter.watch_dirs()]
        self.signatures = disk.dir_mtimes(self.dirs)
        # Entries looked at already that are no session's (a shared file).
        self._looked_at: set[str] = set()

    def _set(self, sessions: list[Session]) -> None:
        self.sessions: dict[str, Session] = {}
        self._children: dict[str, set[str]] = {}
        self._paths: set[str] = set()
        for s in sessions:
            self._put(s.id, s)

    def _put(self, session_id: str, s: Session | None) -> None:
        """`s` is what the disk now holds of `session_id` (None: nothing)."""
        old = self.sessions.pop(session_id, None)
        if old is not None:
            if old.parent is not None:
                self._children.get(old.parent, set()).discard(session_id)
            self._paths.difference_update(a.path for a in old.artifacts)
        if s is not None:
            self.sessions[session_id] = s
            if s.parent is not None:
                self._children.setdefault(s.parent, set()).add(session_id)
            self._paths.update(a.path for a in s.artifacts)

    def refresh(self) -> None:
        """List the sessions named by entries new in the directories that
        changed (and in directories new to watch, such as a new project's).
        Only what is new: on a home in use some directory changes between
        most batches, and listing the whole agent again cost a full scan of
        it each time. Past a bound (see listing_again_is_cheaper), one scan
        of the agent costs less."""
        if disk.dir_mtimes(self.dirs) == self.signatures:
            return
        # Taken before the listing: a change during it shows next time.
        dirs = [os.fspath(d) for d in self.adapter.watch_dirs()]
        signatures = disk.dir_mtimes(dirs)
        moved = [d for d in dirs if d not in self.signatures or signatures[d] != self.signatures[d]]
        unknown = [
            p
            for d in moved
            for p in disk.entry_paths(d)
            if p not in self._paths and p not in self._looked_at
        ]
        self._looked_at.update(unknown)
        if listing_again_is_cheaper(len(unknown), len(self.sessions)):
            self._set(list(self.adapter.scan()))
        else:
            named = self.adapter.sessions_named(unknown)
            for sid, s in self.adapter.load_many(sorted(named)).items():
                self._put(sid, s)
        self.dirs, self.signatures = dirs, signatures

    def settle(self, removed: list[str]) -> None:
        """After our own removal changed the mtimes of the directories that
        held what it removed (only those are looked at again)."""
        parents = {os.path.dirname(p) for p in removed} & self.signatures.keys()
        self.signatures.update(disk.dir_mtimes(parents))

    def parent_of(self, session_id: str) -> str | None:
        s = self.sessions.get(session_id)
        return s.parent if s else None

    def children(self, session_id: str) -> list[str]:
        return sorted(self._children.get(session_id, ()))
