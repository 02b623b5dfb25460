"""The UI's side of the core: each call blocks, so the app runs them in
thread workers. One call at a time (a lock): the in-process context is
opened once, by whichever call needs it first."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentkeep.errors import Failure
from agentkeep.paths import Env
from agentkeep.runner import Runner, status_doc

if TYPE_CHECKING:
    from agentkeep.core.context import Context


@dataclass(frozen=True)
class Snapshot:
    """What the overview, the table and the trash show, read together."""

    status: dict[str, Any]
    sessions: list[dict[str, Any]]
    by_agent: list[dict[str, Any]]
    by_workspace: list[dict[str, Any]]
    by_kind: list[dict[str, Any]]
    trash: list[dict[str, Any]]
    # With no retention: what a 30-day one would reclaim (core.reclaim_hint).
    hint: dict[str, Any] | None
    # Each enabled agent's retention in seconds, from the config (none: absent).
    retentions: dict[str, float]
    taken_at: float

    @property
    def daemon(self) -> bool:
        """A daemon answered."""
        return self.status.get("pid") is not None


@dataclass(frozen=True)
class Plan:
    """The configured retention's dry run: what a prune would do now. With
    no report, `error` says why there is none (no retention, a bad config)."""

    report: dict[str, Any] | None
    error: str | None
    taken_at: float


class Backend:
    """The core calls the UI makes, one at a time."""

    def __init__(self) -> None:
        self.runner = Runner()
        self._lock = threading.Lock()

    @property
    def env(self) -> Env:
        """The user's environment, as the runner resolved it."""
        return self.runner.env

    def fingerprint(self) -> dict[str, Any]:
        """What the daemon is asked to see the same of (its `subscribe`)."""
        with self._lock:
            return self.runner.fingerprint()

    def snapshot(self) -> Snapshot:
        """Everything the panes show, read together."""
        from agentkeep.core.reclaim import du, reclaim_hint
        from agentkeep.core.trashcan import trash_list

        r = self.runner

        def groups(by: str) -> list[dict[str, Any]]:
            return r.ask("du", {"by": by}, lambda c: du(c, by))["groups"]

        with self._lock:
            return Snapshot(
                status=status_doc(r)[0],
                sessions=json.loads(r.ask("ls", {"agent": None, "idle_over": None}, _ls, raw=True)),
                by_agent=groups("agent"),
                by_workspace=groups("workspace"),
                by_kind=groups("kind"),
                trash=trash_list(self.env.state_dir)["entries"],
                hint=reclaim_hint(r.ctx),
                retentions=_retentions(r.ctx),
                taken_at=time.time(),
            )

    def plan(self) -> Plan:
        """The configured retention's dry run (it decides everything a real
        prune would, under the same locks, and removes nothing)."""
        try:
            report = self.prune(dry_run=True)
        except Failure as exc:
            return Plan(None, exc.message, time.time())
        return Plan(report, None, time.time())

    def prune(self, *, dry_run: bool) -> dict[str, Any]:
        """The prune report of the configured retention."""
        from agentkeep.core.pruning import prune

        def local(c: Context) -> dict[str, Any]:
            report = prune(c, dry_run=dry_run)
            assert report is not None, "only a scheduled prune skips its turn"
            return report.to_json()

        params = {"dry_run": dry_run, "older_than": None, "agent": None}
        with self._lock:
            return self.runner.ask("prune", params, local)

    def show(self, agent: str, sid: str) -> dict[str, Any]:
        """The session's `show`, without the verdict: the UI holds the plan's."""
        from agentkeep.core.sessions import show

        with self._lock:
            return self.runner.ask(
                "show",
                {"agent": agent, "id": sid, "verdict": False},
                lambda c: show(c, agent, sid, verdict=False),
            )

    def purge(self, agent: str, sid: str, *, dry_run: bool, cascade: bool) -> dict[str, Any]:
        """The purge report; Failure (exit 4, with the report) when refused."""
        from agentkeep.core.pruning import purge

        params = {"agent": agent, "id": sid, "dry_run": dry_run, "cascade": cascade}
        with self._lock:
            return self.runner.ask(
                "purge",
                params,
                lambda c: purge(c, agent=agent, id=sid, dry_run=dry_run, cascade=cascade).to_json(),
            )

    def pin(self, agent: str, sid: str, pinned: bool) -> dict[str, Any]:
        """Pin (or unpin) the session."""
        from agentkeep.core.sessions import pin

        with self._lock:
            return self.runner.ask(
                "pin" if pinned else "unpin",
                {"agent": agent, "id": sid},
                lambda c: pin(c, agent, sid, pinned),
            )

    def restore(self, agent: str, sid: str) -> dict[str, Any]:
        """Always in-process, as the CLI's restore: the trash is this user's
        state dir (the daemon's watch sees the session come back)."""
        from agentkeep.core.trashcan import restore

        with self._lock:
            return restore(self.runner.ctx, agent, sid)


def _retentions(ctx: Context) -> dict[str, float]:
    found = {} if ctx.config_error else {a: ctx.config.retention_for(a) for a in ctx.adapters}
    return {agent: seconds for agent, seconds in found.items() if seconds is not None}


def _ls(ctx: Context) -> str:
    from agentkeep.core.sessions import ls_text

    return ls_text(ctx).text
