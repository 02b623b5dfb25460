"""Codex CLI: rollouts, the `threads` rows Codex lists sessions by, and the
rest of what names a session under `$CODEX_HOME` (FIELD-NOTES "Codex CLI").
A session is any id a rollout, a row or a TUI reference names. The modules:
rollouts, listing (one look at the root and its databases), removal.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from agentkeep.adapters import heads, rows
from agentkeep.adapters.base import Adapter, Known, Remover, each_session
from agentkeep.adapters.codex import listing, removal
from agentkeep.adapters.codex.rollouts import (
    KINDS,
    UUID,
    id_from_name,
    open_rollouts,
    rollout_head,
)
from agentkeep.adapters.dirs import parts_below, real_dirs, root_problem
from agentkeep.model import Artifact, Described, Holder, HolderKind, Session
from agentkeep.processes import ProcessTable

__all__ = ["ADAPTER", "CodexAdapter"]

# What a person knows a thread by, first found first: the name given it,
# its title, its first message (columns of 0.169's `threads`).
_TITLES = ("name", "title", "first_user_message")


class CodexAdapter(Adapter):
    """Codex CLI's sessions."""

    name = "codex"
    evidence_kinds = frozenset(KINDS)
    id_in_name = UUID

    # -- where ----------------------------------------------------------
    def watch_dirs(self) -> list[Path]:
        """The root, the rollout dirs and every date dir."""
        root = self.root
        dirs = [root, root / "sessions", root / "archived_sessions"]
        for year in real_dirs(root / "sessions"):
            dirs.append(year)
            for month in real_dirs(year):
                dirs.append(month)
                dirs.extend(real_dirs(month))
        return dirs

    def listed_dirs(self) -> list[Path]:
        """The watched dirs and the TUI references."""
        return [*self.watch_dirs(), self.root / listing.TUI_REFS]

    def databases(self) -> list[Path]:
        """Every `<name>_<n>.sqlite` in the root."""
        return listing.databases(self.root)

    # -- what -----------------------------------------------------------
    def canonical_id(self, raw: str) -> str | None:
        """A UUID, lowercased."""
        lowered = raw.lower() if isinstance(raw, str) else ""
        return lowered if UUID.fullmatch(lowered) else None

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """One pass over the date dirs and databases for all of them."""
        linked = root_problem(self.env, self.root) is not None
        found = listing.list_root(self.root, names, linked)
        scanned = (sid for sid in found.found if names is not None or found.in_a_scan(sid))
        yield from each_session(scanned, lambda sid: listing.session(sid, found))

    def session_for_path(self, path: str) -> str | None:
        """A rollout's id, or a TUI reference's."""
        parts = parts_below(path, self.root) or []
        if len(parts) >= 2 and parts[0] in ("sessions", "archived_sessions"):
            return id_from_name(parts[-1])
        if len(parts) == 2 and parts[0] == listing.TUI_REFS:
            return parts[1] if UUID.fullmatch(parts[1]) else None
        return None

    # -- in use ---------------------------------------------------------
    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """A command line naming the id, or a process with a rollout open."""
        found = procs.naming(session.id) + [
            Holder(pid, HolderKind.PROCESS, f"has {os.path.basename(path)} open")
            for path, pid in open_rollouts(session.artifacts, procs)
        ]
        return list(dict.fromkeys(found))

    def may_hold(self, evidence: Sequence[Artifact], procs: ProcessTable) -> bool:
        """A rollout is evidence only while a process has it open."""
        return next(open_rollouts(evidence, procs), None) is not None

    # -- removal --------------------------------------------------------
    def describe(self, session: Session) -> Described:
        """Its thread's name or title (the `threads` row), else its first
        prompt (the rollout's first `user_message`), and its session_meta's time."""
        title: str | None = None
        for artifact in session.artifacts:
            if rows.is_row(artifact) and rows.table_of(artifact) == listing.THREADS:
                row = heads.row_of(rows.db_of(artifact), listing.THREADS, session.id, _TITLES)
                title = heads.first_title(*(row.get(c) for c in _TITLES))
                break
        rollouts = [a for a in session.artifacts if a.kind in KINDS and not a.linked]
        if not rollouts:
            return Described(title)
        prompt, started = rollout_head(Path(rollouts[0].path))
        return Described(title or prompt, started)

    def remove(self, session: Session, remover: Remover) -> None:
        """removal.remove."""
        removal.remove(session, remover, self.env, self.root, self.sessions)


ADAPTER = CodexAdapter
