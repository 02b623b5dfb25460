"""One agent's sessions as listed from the disk (the disk is the truth)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from agentkeep import disk, fsio
from agentkeep.adapters.base import Adapter, Known, listed, listing_again_is_cheaper, sessions_named
from agentkeep.model import Session
from agentkeep.prune.plan import known_activity


class DiskView:
    """One agent's sessions as last listed from the disk, each as the plan
    reads it (planned(): what is left of a listing once its files' times are
    summed up), so that a prune of 50,000 sessions holds no artifact list of
    each; the check under the lease lists each again, whole. A new session
    (a fork made after the plan) is a new entry in a directory that names
    sessions: its mtime changes, and the view lists the sessions new there.
    agentkeep's own removals change those mtimes too, and are never taken
    for the whole change: a fork made as one ended shares its mtime."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        # What the adapter keeps from one listing to the next while the
        # prune runs (Known.memo), dropped with the view.
        self.known = Known()
        self.sessions: dict[str, Session] = {}
        self._children: dict[str, set[str]] = {}
        # Taken before anything is listed: a directory that changes while it
        # is (a fork made meanwhile) shows at the first refresh.
        self.dirs = [os.fspath(d) for d in adapter.watch_dirs()]
        _, self.signatures = disk.signed(self.dirs)
        # The names of each directory looked at already: those of the
        # sessions listed (see _put), and every name of a changed one.
        self._looked_at: dict[str, set[str]] = {d: set() for d in self.dirs}

    def add(self, s: Session) -> None:
        """`s` as listed from the disk (it replaces what the view had of it)."""
        self._put(s.id, s)

    def _set(self, sessions: Iterable[Session]) -> None:
        self.sessions, self._children = {}, {}
        for s in sessions:
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
        """The names of `s`'s artifacts in the directories watched, looked
        at: a name of a session the view holds never names a new one, and
        otherwise the first refresh of a directory of 10,000 found each of
        its names unseen and asked whose it was (at 10,000 sessions, a
        tenth of a prune's re-check)."""
        for a in s.artifacts:
            directory, name = os.path.split(a.path)
            looked = self._looked_at.get(directory)
            if looked is not None:
                looked.add(sys.intern(name))

    def refresh(self) -> None:
        """List the sessions named by entries new in the directories that
        changed (and in directories new to watch, such as a new project's)
        that the view does not hold. Only what is new: on a home in use some
        directory changes between most batches, and listing the whole agent
        again cost a full scan of it each time. Past a bound (see
        listing_again_is_cheaper), one scan of the agent costs less. A
        session the view holds already is listed again by the check under
        its lease, if it is planned at all."""
        if disk.dir_mtimes(self.dirs) == self.signatures:
            return
        # Taken before the listing: a change during it shows next time. A
        # directory signed None (disk.signed: one whose mtime was too recent
        # to vouch that nothing changed after it with the same mtime, a fork
        # made in the clock tick of another change) is looked at again.
        dirs = [os.fspath(d) for d in self.adapter.watch_dirs()]
        mtimes, signatures = disk.signed(dirs)
        moved = [d for d in dirs if d not in self.signatures or mtimes[d] != self.signatures[d]]
        unseen = [os.path.join(d, name) for d in moved for name in self._unseen(d)]
        named = sessions_named(self.adapter, unseen)
        new = sorted(sid for sid in named if sid not in self.sessions)
        if listing_again_is_cheaper(len(new), len(self.sessions)):
            self._set(self.adapter.sessions())
        else:
            for sid, s in self.listed_again(new).items():
                self._put(sid, s)
        self.dirs, self.signatures = dirs, signatures

    def listed_again(self, ids: list[str]) -> dict[str, Session | None]:
        """These sessions listed from the disk again, by id (None: nothing
        of it is left), whole: what the check under the lease reads."""
        return listed(self.adapter, ids, self.known)

    def _unseen(self, directory: str) -> set[str]:
        """The names in `directory` not looked at before (from now on they
        are): told apart as sets, for a directory of 10,000 changes at
        every batch where something else writes it, or removes from it."""
        looked = self._looked_at.setdefault(directory, set())
        # Interned: one string for the name in here and in every listing.
        unseen = {sys.intern(name) for name in set(fsio.entry_names(directory)) - looked}
        looked.update(unseen)
        return unseen

    def parent_of(self, session_id: str) -> str | None:
        s = self.sessions.get(session_id)
        return s.parent if s else None

    def children(self, session_id: str) -> list[str]:
        return sorted(self._children.get(session_id, ()))


def planned(s: Session, adapter: Adapter) -> Session:
    """`s` as the plan reads it: its times, size and unsafe reason as
    listed, and of its artifacts only those holders() reads (the adapter's
    `evidence_kinds`), as a listing of many sessions reads them from the
    index (evidence.indexed). Its last_activity() and known_activity() are
    those of `s`."""
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
