"""What the app reads, and when (the app's state beneath app.py's panes).

Reading (status, ls, du, the trash) and the plan (the configured retention's
dry run) run in thread workers, one load at a time; a change asked for
meanwhile is read right after. With a daemon, its `subscribe` stream says
when something changed: the app reads CHANGE_DELAY later (a burst is one
read), the plan at most every PLAN_EVERY seconds, and at once after an
action or on r. Without a daemon nothing changes by itself: r reads again."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import App
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from agentkeep.errors import Failure
from agentkeep.model import rfc3339
from agentkeep.render import count, size, when
from agentkeep.ui.backend import Backend, Plan, Snapshot
from agentkeep.ui.live import Changed, Live, Subscription
from agentkeep.ui.overview import Overview
from agentkeep.ui.sessions import Key, SessionsPane, detail_text
from agentkeep.ui.trash import TrashPane
from agentkeep.verdict import Names, Plans

PLAN_EVERY = 30.0
CHANGE_DELAY = 0.3
SHOW_DELAY = 0.1


class ReadingApp(App[None]):
    """The snapshot, the plan and the selected session's detail, read on
    workers and shown in the panes (which AgentkeepApp lays out)."""

    def __init__(self, backend: Backend | None = None, *, live: bool = True) -> None:
        super().__init__()
        self.backend = backend or Backend()
        self.home = str(self.backend.env.home)
        self.live_wanted = live
        self.snapshot: Snapshot | None = None
        self.plan: Plan | None = None
        self.plans: Plans | None = None
        self.live = "no daemon"
        self.error: str | None = None
        self.loads = 0  # loads finished (tests wait on it)
        self.faults: list[str] = []  # work that raised what no call catches
        self._loading = False
        self._again = False
        self._want_plan = False
        self._acting = 0
        self._sub: Subscription | None = None
        self._change_timer: Timer | None = None
        self._plan_timer: Timer | None = None
        self._show_timer: Timer | None = None
        self._showing: Key | None = None  # the session a `show` worker reads
        self._docs: dict[Key, dict[str, Any]] = {}

    def on_mount(self) -> None:
        """The first read."""
        self.reload(plan=True)

    def on_unmount(self) -> None:
        """The stream ends with the app."""
        if self._sub is not None:
            self._sub.stop()

    @property
    def busy(self) -> bool:
        """Reading or acting (tests wait until it is not)."""
        timers = (self._change_timer, self._show_timer)
        working = self._loading or self._acting > 0 or self._showing is not None
        return working or any(t is not None for t in timers)

    # -- reading ----------------------------------------------------------
    def reload(self, plan: bool = False) -> None:
        """Read again (and make the plan again with `plan`), once the load running ends."""
        self._want_plan |= plan
        if self._loading:
            self._again = True
            return
        self._loading = True
        want, self._want_plan = self._want_plan or self.plan is None, False
        self.run_worker(lambda: self._load(want), thread=True, group="load", exit_on_error=False)

    def _load(self, plan: bool) -> None:
        """On a worker thread: read, then hand each result to the event loop."""
        try:
            snap = self.backend.snapshot()
            self.call_from_thread(self._got_snapshot, snap)
            if snap.daemon and self._sub is None and self.live_wanted:
                fingerprint = self.backend.fingerprint()
                self.call_from_thread(self._subscribe, fingerprint)
            if plan:
                self.call_from_thread(self._got_plan, self.backend.plan())
        except (Failure, OSError) as exc:
            self.call_from_thread(self._read_failed, getattr(exc, "message", None) or str(exc))
        finally:
            self.call_from_thread(self._loaded)

    def _loaded(self) -> None:
        self._loading = False
        self.loads += 1
        if self._again:
            self._again = False
            self.reload()

    def _read_failed(self, message: str) -> None:
        self.error = message
        self.notify(message, title="cannot read", severity="error", timeout=10)
        self._title()

    def _got_snapshot(self, snap: Snapshot) -> None:
        self.snapshot, self.error = snap, None
        self._docs.clear()
        if not snap.daemon and self._sub is not None:
            self._sub.stop()
            self._sub = None
            self.live = "no daemon"
        self._replan()

    def _got_plan(self, plan: Plan) -> None:
        if plan.report is None and self.snapshot is not None:
            config = self.snapshot.status.get("config") or {}
            if config.get("ok", True) and not self.snapshot.retentions:
                plan = Plan(
                    None, "no retention is configured, so nothing is ever pruned", plan.taken_at
                )
        self.plan = plan
        self._replan()

    def _replan(self) -> None:
        snap = self.snapshot
        if snap is None:
            return
        plan = self.plan or Plan(None, "the plan is being made", snap.taken_at)
        names = _names(snap, plan.report)
        self.plans = Plans(plan.report, plan.error, plan.taken_at, snap.sessions, names)
        self._title()
        self.query_one(Overview).show(snap, self.plan, self.live, self.home, names)
        self.query_one(SessionsPane).show(snap.sessions, self.plans, snap.taken_at)
        self.query_one(TrashPane).show(snap.trash, snap.taken_at, names)

    @property
    def names(self) -> Names:
        """How ids are said: by a prefix only where it tells them apart."""
        return self.plans.name if self.plans is not None else Names(())

    def _title(self) -> None:
        snap = self.snapshot
        t = Text()
        t.append("agentkeep", "bold")
        if snap is not None:
            total = sum(s["bytes"] for s in snap.sessions)
            t.append(f"  {count(len(snap.sessions), 'session')}, {size(total)}")
            if self.plan is not None and self.plan.report is not None:
                gone = sum(r["bytes"] for r in self.plan.report["removed"])
                t.append(f" · reclaimable now {size(gone)}")
            t.append(" · " + (self.live if snap.daemon else "no daemon"))
        if self.error:
            t.append(f"  {self.error}", "red")
        self.query_one("#title", Static).update(t)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Each call catches what the core raises, so a worker that raised
        is a fault of the app's own: said, never swallowed."""
        if event.state == WorkerState.ERROR:
            fault = f"{event.worker.group}: {event.worker.error!r}"
            self.faults.append(fault)
            self.notify(fault, title="internal error", severity="error", timeout=10)

    # -- live -------------------------------------------------------------
    def _subscribe(self, fingerprint: dict[str, Any]) -> None:
        if self._sub is not None:
            return
        self._sub = Subscription(self.backend.env, fingerprint, self.post_message)

    def on_live(self, message: Live) -> None:
        """The stream started or ended: said in the title and the overview."""
        if message.on:
            self.live = "live"
        else:
            self._sub = None
            self.live = f"not live ({message.why}): r reads again"
        self._title()
        if self.snapshot is not None:
            self.query_one(Overview).show(
                self.snapshot, self.plan, self.live, self.home, self.names
            )

    def on_changed(self, message: Changed) -> None:
        """Read again soon: a burst of changes is one read."""
        if self._change_timer is None:
            self._change_timer = self.set_timer(CHANGE_DELAY, self._change_due)

    def _change_due(self) -> None:
        self._change_timer = None
        age = time.time() - self.plan.taken_at if self.plan is not None else PLAN_EVERY
        self.reload(plan=age >= PLAN_EVERY)
        if age < PLAN_EVERY and self._plan_timer is None:
            self._plan_timer = self.set_timer(PLAN_EVERY - age, self._plan_due)

    def _plan_due(self) -> None:
        self._plan_timer = None
        self.reload(plan=True)

    # -- the selected session ---------------------------------------------
    def on_sessions_pane_selected(self, message: SessionsPane.Selected) -> None:
        """The detail of the highlighted session, once it stays highlighted a moment."""
        if self._show_timer is not None:
            self._show_timer.stop()
        self._show_timer = self.set_timer(SHOW_DELAY, lambda: self._show(message.key))

    def _show(self, key: Key | None) -> None:
        self._show_timer = None
        pane = self.query_one(SessionsPane)
        if key is None:
            pane.detail(Text("no session" + (" matches the filter" if self.snapshot else "")))
            return
        if key in self._docs:
            self._detail(key, self._docs[key])
            return
        # One `show` at a time, never cancelled: a thread worker cannot be
        # stopped, so a cancelled one would run on unseen, holding the
        # backend. The one asked for meanwhile is fetched when it ends.
        if self._showing is None:
            self._showing = key
            self.run_worker(
                lambda: self._fetch(key), thread=True, group="show", exit_on_error=False
            )

    def _fetch(self, key: Key) -> None:
        try:
            doc: dict[str, Any] | str = self.backend.show(*key)
        except (Failure, OSError) as exc:
            doc = getattr(exc, "message", None) or str(exc)
        self.call_from_thread(self._fetched, key, doc)

    def _fetched(self, key: Key, doc: dict[str, Any] | str) -> None:
        self._showing = None
        pane = self.query_one(SessionsPane)
        selected = pane.selected
        if isinstance(doc, str):
            if selected == key:
                pane.detail(Text(f"{key[0]} {key[1]}: {doc}", "yellow"))
        else:
            self._docs[key] = doc
            if selected == key:
                self._detail(key, doc)
        if selected is not None and selected != key and self._show_timer is None:
            self._show(selected)

    def _detail(self, key: Key, doc: dict[str, Any]) -> None:
        assert self.plans is not None and self.snapshot is not None
        verdict = self.plans.of(*key)
        if self.plan is None:
            plan_age = "the plan is being made"
        else:
            plan_age = f"dry run {when(rfc3339(self.plan.taken_at))}"
        text = detail_text(doc, verdict, plan_age, self.home, self.snapshot.taken_at)
        self.query_one(SessionsPane).detail(text)


def _names(snap: Snapshot, report: dict[str, Any] | None) -> Names:
    """Every id the app may say: the sessions, the trash, the plan's."""
    ids = [s["id"] for s in snap.sessions] + [e["id"] for e in snap.trash]
    for part in ("removed", "kept", "failed"):
        ids += [e["id"] for e in (report or {}).get(part, [])]
    return Names(ids)
