"""One agent's sessions as listed from the disk (the disk is the truth)."""

from __future__ import annotations

import os
import sys

from agentkeep import disk, fsio
from agentkeep.adapters.base import Adapter, Known, listed, listing_again_is_cheaper, sessions_named
from agentkeep.model import Session
from agentkeep.prune.plan import known_activity


class DiskView:
    """One agent's sessions as last listed from the disk, each as the plan
    reads it (planned()); the check under the lease lists each again, whole.
    A fork made after the plan is a new entry in a directory that names
    sessions: refresh() lists the sessions new there."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.known = Known()
        self.sessions: dict[str, Session] = {}
        self._children: dict[str, set[str]] = {}
        # Taken before anything is listed: a directory that changes while it
        # is (a fork made meanwhile) shows at the first refresh.
        self.dirs = [os.fspath(d) for d in adapter.watch_dirs()]
        _, self.signatures = disk.signed(self.dirs)
        # The names of each directory looked at already.
        self._looked_at: dict[str, set[str]] = {d: set() for d in self.dirs}

    def add(self, s: Session) -> None:
        """`s` as listed from the disk (it replaces what the view had of it)."""
        self._put(s.id, s)

    def _put(self, session_id: str, s: Session | None) -> None:
        """`s` is what the disk now holds of `session_id` (None: nothing)."""
        old = self.sessions.pop(session_id, None)
        if old is not None and old.parent is not None:
            self._children.get(old.parent, set()).discard(session_id)
        if s is not None:
            self._looked_at_names_of(s)
            self.sessions[session_id] = planned(s, self.adapter)
            if s.parent is not None:
                self._children.setdefault(s.parent, set()).add(session_id)

    def _looked_at_names_of(self, s: Session) -> None:
        """The names of `s`'s artifacts in the watched directories, looked at:
        a name of a session the view holds never names a new one."""
        for a in s.artifacts:
            directory, name = os.path.split(a.path)
            looked = self._looked_at.get(directory)
            if looked is not None:
                looked.add(sys.intern(name))

    def refresh(self) -> None:
        """List the sessions named by entries new in the directories that
        changed (or are new to watch) that the view does not hold; past
        listing_again_is_cheaper, the whole agent again."""
        if disk.dir_mtimes(self.dirs) == self.signatures:
            return
        # Taken before the listing: a change during it shows next time (a
        # directory signed None, too recent to vouch for, is looked at again).
        dirs = [os.fspath(d) for d in self.adapter.watch_dirs()]
        mtimes, signatures = disk.signed(dirs)
        moved = [d for d in dirs if d not in self.signatures or mtimes[d] != self.signatures[d]]
        unseen = [os.path.join(d, name) for d in moved for name in self._unseen(d)]
        named = sessions_named(self.adapter, unseen)
        new = sorted(sid for sid in named if sid not in self.sessions)
        if listing_again_is_cheaper(len(new), len(self.sessions)):
            self.sessions, self._children = {}, {}
            for listed_now in self.adapter.sessions():
                self.add(listed_now)
        else:
            for sid, s in self.listed_again(new).items():
                self._put(sid, s)
        self.dirs, self.signatures = dirs, signatures

    def listed_again(self, ids: list[str]) -> dict[str, Session | None]:
        """These sessions listed from the disk again, whole, by id (None: gone)."""
        return listed(self.adapter, ids, self.known)

    def _unseen(self, directory: str) -> set[str]:
        """The names in `directory` not looked at before (from now on they are)."""
        looked = self._looked_at.setdefault(directory, set())
        # Interned: one string for the name in here and in every listing.
        unseen = {sys.intern(name) for name in set(fsio.entry_names(directory)) - looked}
        looked.update(unseen)
        return unseen

    def parent_of(self, session_id: str) -> str | None:
        """Its parent as listed."""
        s = self.sessions.get(session_id)
        return s.parent if s else None

    def children(self, session_id: str) -> list[str]:
        """Its children as listed."""
        return sorted(self._children.get(session_id, ()))


def planned(s: Session, adapter: Adapter) -> Session:
    """`s` as the plan reads it: its times, size and unsafe reason as listed,
    and only the artifacts holders() reads (the adapter's `evidence_kinds`)."""
    known = known_activity(s, None)
    return Session(
        s.agent,
        s.id,
        s.workspace,
        s.parent,
        [a for a in s.artifacts if a.kind in adapter.evidence_kinds],
        updated=known,
        undated=s.last_activity() is None,
        bytes=s.bytes,
        recorded_unsafe=s.unsafe,
        disk_bytes=sum(a.disk_bytes for a in s.artifacts),
    )
