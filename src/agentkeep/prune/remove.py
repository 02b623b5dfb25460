"""Taking and removing one session: the steps the prune's act and the
journal's finish share, so a finished removal keeps a fresh one's rules."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from agentkeep import history, leases
from agentkeep.adapters.base import Adapter
from agentkeep.errors import RemovalError
from agentkeep.model import Described, Reason, Session
from agentkeep.prune.evidence import Watch
from agentkeep.prune.report import Failed, Kept, Removed
from agentkeep.removal import SessionRemoval
from agentkeep.rmtree import Parents
from agentkeep.trash.entries import TrashError

log = structlog.get_logger("agentkeep.prune")

# Test seam, None in production: called once a session's leases are taken,
# before it is listed again.
_after_lease: Callable[[str, str], None] | None = None


@dataclass(frozen=True)
class Removing:
    """What taking and removing a session needs to know of the user."""

    adapters: Mapping[str, Adapter]
    state_dir: Path
    watch: Watch
    restored: dict[tuple[str, str], float]
    record: history.Record

    def activity(self, s: Session) -> float | None:
        """Its last activity, its last restore counted."""
        return s.last_activity(self.restored.get(s.key))

    def take(self, s: Session, *, dry_run: bool) -> leases.Taken | Kept:
        """Every lease of `s` held exclusively (ours and the agent's own lock
        files), or why it stays: whoever holds one keeps it (invariant 2)."""
        try:
            taken = leases.take_session(
                self.state_dir,
                s.agent,
                s.id,
                self.adapters[s.agent].lock_files(s),
                dry_run=dry_run,
            )
        except leases.LeaseError as exc:
            return Kept(s.agent, s.id, exc.reason, f"lease error: {exc}")
        if isinstance(taken, str):
            return Kept(s.agent, s.id, Reason.HELD, taken)
        if _after_lease is not None:
            _after_lease(s.agent, s.id)
        return taken

    def remove(
        self,
        s: Session,
        *,
        dry_run: bool,
        trash_for: float,
        now: float,
        gone: Callable[[str], bool] = lambda sid: False,
        parents: Parents | None = None,
        why: str = "age",
    ) -> Removed | Failed:
        """Remove `s` (held and checked) through its adapter, into a trash
        entry when `trash_for`, and record `why` it went. `gone`: whether
        this run removed (or would have) another session of the agent."""
        about = None if dry_run else self._about(s, why, trash_for > 0)
        try:
            writer = None
            if trash_for > 0 and not dry_run:
                from agentkeep.trash.writing import open_entry  # a run that trashes: not a dry one

                writer = open_entry(
                    self.state_dir,
                    s.agent,
                    s.id,
                    parent=s.parent,
                    keep_for=trash_for,
                    now=now,
                    last_activity=self.activity(s),
                    about=about,
                )
            removal = SessionRemoval(
                s.agent,
                s.id,
                dry_run=dry_run,
                trash=writer,
                same_fs_as=self.state_dir,
                parents=parents,
                gone=gone,
            )
        except (TrashError, OSError) as exc:
            return Failed(s.agent, s.id, f"cannot open its trash entry: {exc}")
        try:
            self.adapters[s.agent].remove(s, removal)
        except (RemovalError, OSError) as exc:
            log.error("removal failed", agent=s.agent, id=s.id, error=str(exc))
            return Failed(s.agent, s.id, f"{type(exc).__name__}: {exc}")
        finally:
            _close_trash(removal)
        log.info(
            "would remove" if dry_run else "removed",
            agent=s.agent,
            id=s.id,
            bytes=s.bytes,
            paths=len(removal.removed),
        )
        trashed = removal.trash.entry.bytes if removal.trash is not None else 0
        if about is not None:
            self.record.add(about)
        return Removed(
            s.agent,
            s.id,
            s.bytes,
            self.activity(s),
            list(removal.removed),
            list(removal.residuals),
            trashed,
            why,
            _databases(s),
        )

    def _about(self, s: Session, why: str, restorable: bool) -> history.Gone:
        """Its line of the record of what went, read before it is removed."""
        try:
            described = self.adapters[s.agent].describe(s)
        except Exception as exc:  # a title is never worth a removal
            log.warning("cannot read what the session is", agent=s.agent, id=s.id, error=str(exc))
            described = Described()
        return history.Gone(
            time.time(),
            s.agent,
            s.id,
            why,
            restorable,
            workspace=s.workspace,
            title=described.title,
            bytes=s.bytes,
            first_activity=described.started,
            last_activity=self.activity(s),
        )


def _databases(s: Session) -> list[str]:
    """The databases `s` had rows in (its `<db>#<table>` artifacts)."""
    return sorted(
        {
            a.path.partition("#")[0]
            for a in s.artifacts
            if a.root is None and "#" in a.path and not a.linked
        }
    )


def _close_trash(removal: SessionRemoval) -> None:
    if removal.trash is None:
        return
    try:
        removal.trash.close()
    except OSError as exc:  # never hide the removal's own outcome
        log.error("trash entry could not be saved", path=str(removal.trash.path), error=str(exc))
