"""opencode: the 1.x JSON storage, the rows of `opencode.db` and the
`tool-output/` files that name a session (FIELD-NOTES "opencode").

A session is any id with a session file or a `session` / `session_v2` row
(the records opencode lists by), or only what those leave behind when a
removal stops half way, so that it can be finished. Children are sessions
of their own (`parentID` / `parent_id`): this adapter removes one session,
and the pruner removes children first. The modules: storage (the JSON
folders), listing (opencode.db and one look at the data dir), removal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from agentkeep.adapters import heads, rows, sqlite
from agentkeep.adapters.base import Adapter, Known, Remover, load
from agentkeep.adapters.dirs import parts_below, real_dirs, root_problem
from agentkeep.adapters.opencode import listing, removal, storage
from agentkeep.adapters.opencode.storage import DB, KIND_SESSION, TOOL_OUTPUT, canonical_id
from agentkeep.model import Described, Holder, HolderKind, Session
from agentkeep.processes import ProcessTable

__all__ = ["ADAPTER", "OpencodeAdapter"]


class OpencodeAdapter(Adapter):
    """opencode's sessions."""

    name = "opencode"
    # Session ids are `ses_` and 26 base62 characters (1.x to 1.18).
    id_in_name = re.compile(r"ses_[0-9A-Za-z]+")

    # -- where ----------------------------------------------------------
    def databases(self) -> list[Path]:
        """opencode.db."""
        return [self.root / DB]

    def watch_dirs(self) -> list[Path]:
        """The data dir, the session and message folders, each project's."""
        store = self.root / "storage"
        dirs = [self.root, store / "session", store / "message"]
        dirs.extend(real_dirs(store / "session"))
        return dirs

    def listed_dirs(self) -> list[Path]:
        """The watched dirs, the storage folders and the tool outputs."""
        store = self.root / "storage"
        folders = [store, *(store / f for f in storage.FOLDERS)]
        return [*self.watch_dirs(), *folders, self.root / TOOL_OUTPUT]

    # -- what -----------------------------------------------------------
    def canonical_id(self, raw: str) -> str | None:
        """storage.canonical_id."""
        return canonical_id(raw)

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """One pass over the storage and the database for all of them."""
        linked = root_problem(self.env, self.root) is not None
        yield from listing.sessions(self.root, names, linked)

    def session_for_path(self, path: str) -> str | None:
        """A session file's, message dir's, todo's or diff's id."""
        parts = parts_below(path, self.root)
        if parts is None or len(parts) < 3 or parts[0] != "storage":
            return None
        kind, rest = parts[1], parts[2:]
        if kind == "message":
            return canonical_id(rest[0])
        json_file = len(rest) == (2 if kind == "session" else 1) and rest[-1].endswith(".json")
        if kind in ("session", "todo", "session_diff") and json_file:
            return canonical_id(rest[-1].removesuffix(".json"))
        return None

    # -- in use ---------------------------------------------------------
    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """A command line naming the id, or any opencode process with the
        database open, except the per-user service (`opencode serve
        --service`), which holds it for every session whether used or not."""
        found = procs.naming(session.id)
        for suffix in ("", "-wal"):
            for pid, _mode in procs.holding_open(f"{self.root / DB}{suffix}"):
                proc = procs.alive(pid)
                if proc is None or not {"serve", "--service"} <= set(proc.cmdline):
                    found.append(Holder(pid, HolderKind.PROCESS, f"has {DB} open"))
        return list(dict.fromkeys(found))

    # -- removal --------------------------------------------------------
    def describe(self, session: Session) -> Described:
        """Its `title` and creation time: from its `session` row, or from
        its session JSON (the older storage)."""
        for artifact in (a for a in session.artifacts if not a.linked):
            table = rows.table_of(artifact)
            if rows.is_row(artifact) and table in listing.LISTING_TABLES:
                row = heads.row_of(self.root / DB, table, session.id, ("title", "time_created"))
                if row:
                    created = sqlite.column_time(row.get("time_created"))
                    return Described(heads.cut(row.get("title")), created)
            if artifact.kind == KIND_SESSION:
                info = heads.read_json_head(artifact.path)
                if isinstance(info, dict):
                    times = info.get("time")
                    created = times.get("created") if isinstance(times, dict) else None
                    return Described(heads.cut(info.get("title")), sqlite.column_time(created))
        return Described()

    def remove(self, session: Session, remover: Remover) -> None:
        """removal.remove."""
        sid = session.id
        removal.remove(session, remover, self.env, self.root, lambda: load(self, sid))


ADAPTER = OpencodeAdapter
