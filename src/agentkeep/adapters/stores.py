"""Stores named in the user's config (`[[stores]]`): one directory, one session.

Every directory exactly `depth` below a store's root is one session, its id
its '/'-separated path below the root, the whole directory its one artifact.
A store reaches only below its own root. No link is followed: a linked
directory above the session level is skipped, a linked session directory is
linked (kept `unsafe`, never removed).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import structlog

from agentkeep import disk
from agentkeep.adapters.base import Adapter, Known, each_session, session_of, valid_name
from agentkeep.adapters.dirs import (
    entries,
    parts_below,
    real_dirs,
    root_problem,
    unreadable,
    utf8_name,
)
from agentkeep.config import StoreConfig
from agentkeep.fsio import Entry
from agentkeep.model import Holder, HolderKind, Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable

log = structlog.get_logger("agentkeep.adapters.stores")

STORE_DIR = "store-dir"


class StoreAdapter(Adapter):
    """One configured store; `name` is the store's name, per instance."""

    root_kind = "store"

    def __init__(self, env: Env, store: StoreConfig) -> None:
        super().__init__(env)
        self.name = store.name  # type: ignore[misc]  # per store, not per class
        self.root = Path(store.root)
        self.depth = int(store.depth)

    def watch_dirs(self) -> list[Path]:
        """The root and every directory above the session level (what names
        sessions); never through a link."""
        if not os.path.isdir(self.root):
            return []
        found: list[Path] = []
        level = [self.root]
        for _ in range(self.depth):
            found += level
            level = [sub for d in level for sub in real_dirs(d)]
        return found

    def canonical_id(self, raw: str) -> str | None:
        """`a/b` for depth 2: exactly `depth` plain components."""
        parts = raw.split("/") if isinstance(raw, str) else []
        ok = len(parts) == self.depth and all(valid_name(p) and utf8_name(p) for p in parts)
        return raw if ok else None

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """Every directory `depth` below the root, or those of `names`."""
        if names is not None:
            yield from each_session(names, self._load)
            return
        problem = root_problem(self.env, self.root)
        level: list[tuple[str, ...]] = [()]
        for _ in range(self.depth - 1):
            level = [parts + (e.name,) for parts in level for e in self._subdirs(parts)]
        for parts in level:
            for entry in self._children(parts):
                if entry.dir and (s := self._session("/".join((*parts, entry.name)), problem)):
                    yield s

    def _load(self, sid: str) -> Session | None:
        # No link on the way down: a linked level above the session is not
        # this store's namespace.
        current = self.root
        for part in sid.split("/")[:-1]:
            current = current / part
            if disk.is_link(current) or not os.path.isdir(current):
                return None
        return self._session(sid, root_problem(self.env, self.root))

    def session_for_path(self, path: str) -> str | None:
        """The store dir `path` lies in."""
        parts = parts_below(path, self.root)
        if parts is None or len(parts) < self.depth:
            return None
        return self.canonical_id("/".join(parts[: self.depth]))

    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """Processes naming the id as a token (a depth-1 id), or naming the
        session's directory or a path inside it on their command line."""
        directory, why = self.root / session.id, "command line names the store dir"
        naming = [
            p for p in procs.procs.values() if any(_names_path(a, directory) for a in p.cmdline)
        ]
        return procs.naming(session.id) + [Holder(p.pid, HolderKind.PROCESS, why) for p in naming]

    def _children(self, parts: tuple[str, ...]) -> list[Entry]:
        return [e for e in entries(self.root.joinpath(*parts)) if valid_name(e.name)]

    def _subdirs(self, parts: tuple[str, ...]) -> list[Entry]:
        children = self._children(parts)
        for entry in children:
            if entry.link:
                log.info("skipped a linked directory in a store", store=self.name, path=entry.path)
        return [e for e in children if e.dir and not e.link]

    def _session(self, sid: str, problem: str | None) -> Session | None:
        """The store dir `sid`; one that cannot all be listed keeps it unsafe."""
        path = self.root / sid
        if not os.path.isdir(path):
            return None
        # A linked session directory is measured as the link alone (never
        # followed) and marked linked, so the session is kept unsafe (invariant 6).
        if through_link := disk.is_link(path):
            log.info(
                "store session is a link: kept, never removed", store=self.name, path=str(path)
            )
        linked = problem is not None or through_link
        artifact = disk.artifact(path, STORE_DIR, self.root, primary=True, linked=linked)
        if artifact is None:
            return None
        return session_of(self.name, sid, [artifact], unreadable=unreadable([artifact]))


def _names_path(arg: str, directory: Path) -> bool:
    """An argument (or the value of `--opt=value`) that is the directory or a
    path inside it."""
    candidates = [arg, arg.split("=", 1)[1]] if "=" in arg else [arg]
    return any(os.path.isabs(c) and parts_below(c, directory) is not None for c in candidates)
