"""The application: three panes, their keys, and when it reads again.

Reading (backend.snapshot: status, ls, du, the trash) and the plan (the
configured retention's dry run) run in thread workers, one load at a time;
a change asked for while one runs is read right after it. With a daemon,
its `subscribe` stream says when something changed, and the app reads again
0.3 s later (a burst of changes is one read); the plan is run again at most
every PLAN_EVERY seconds for changes, and at once after an action or on r.
Without a daemon nothing changes by itself: r reads again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from agentkeep.errors import Failed, Failure, Refused
from agentkeep.model import rfc3339
from agentkeep.render import age, count, size, when
from agentkeep.ui.backend import Backend, Plan, Snapshot
from agentkeep.ui.dialogs import DIALOG_WIDE, Confirm, Help, Notice, PlanView, summary
from agentkeep.ui.live import Subscription
from agentkeep.ui.overview import Overview
from agentkeep.ui.sessions import SessionsPane, detail_text
from agentkeep.ui.text import home_relative
from agentkeep.ui.trash import TrashPane
from agentkeep.verdict import Names, Plans

T = TypeVar("T")
Key = tuple[str, str]

PLAN_EVERY = 30.0
CHANGE_DELAY = 0.3
SHOW_DELAY = 0.1

CSS = (
    """
#title { height: 1; background: $panel; padding: 0 1; }
TabbedContent { height: 1fr; }
TabPane { padding: 0; }
Overview { padding: 0 1; }
.chart { height: auto; }
SessionsPane { height: 1fr; }
#filter { height: 1; border: none; padding: 0 1; background: $boost; }
#filter:focus { border: none; background: $accent 30%; }
#sessions-body { height: 1fr; layout: vertical; }
Screen.-wide #sessions-body { layout: horizontal; }
#table { height: 1fr; }
#detail-box { height: 9; border-top: solid $primary; padding: 0 1; }
Screen.-tall #detail-box { height: 14; }
Screen.-wide #detail-box { height: 1fr; width: 60; border-top: none; border-left: solid $primary; }
TrashPane { height: 1fr; }
#trash-total { height: auto; padding: 0 1; }
#trash-table { height: 1fr; }
Confirm, Notice, PlanView, Help { align: center middle; }
.dialog { width: 76; max-width: 100%; height: auto; max-height: 100%; border: thick $warning;
          background: $surface; padding: 0 1; }
.dialog-title { text-style: bold; margin-bottom: 1; }
.dialog-body { height: auto; max-height: 16; }
#plan-table { height: 1fr; margin-top: 1; }
.buttons { height: auto; align-horizontal: right; margin-top: 1; }
.buttons Button { margin-left: 1; }
/* Toasts under the title, not at the foot: there they covered the buttons of a dialog. */
ToastRack { dock: top; align: right top; margin-top: 1; margin-bottom: 0; }
"""
    + f".dialog.wide {{ width: {DIALOG_WIDE}; height: 100%; }}\n"
)


class Changed(Message):
    """The daemon says something changed."""


class Live(Message):
    def __init__(self, on: bool, why: str = "") -> None:
        super().__init__()
        self.on = on
        self.why = why


class AgentkeepApp(App[None]):
    TITLE = "agentkeep"
    CSS = CSS
    # Side by side only where the table keeps its 80 columns beside the detail.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]
    BINDINGS = [
        Binding("1", "pane('overview')", "Overview", show=False),
        Binding("2", "pane('sessions')", "Sessions", show=False),
        Binding("3", "pane('trash')", "Trash", show=False),
        Binding("r", "refresh", "Refresh"),
        Binding("P", "prune", "Prune…"),
        Binding("question_mark", "help", "Keys"),
        Binding("q", "quit", "Quit"),
    ]

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

    # -- layout -----------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static("agentkeep: reading…", id="title")
        with TabbedContent(initial="overview"):
            with TabPane("1 Overview", id="overview"):
                yield Overview(id="overview-pane")
            with TabPane("2 Sessions", id="sessions"):
                yield SessionsPane(self.home, id="sessions-pane")
            with TabPane("3 Trash", id="trash"):
                yield TrashPane(id="trash-pane")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.reload(plan=True)

    def on_unmount(self) -> None:
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
        self._sub = Subscription(
            self.backend.env,
            fingerprint,
            started=lambda: self.post_message(Live(True)),
            changed=lambda: self.post_message(Changed()),
            ended=lambda why: self.post_message(Live(False, why)),
        )
        self._sub.start()

    def on_live(self, message: Live) -> None:
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

    # -- acting -----------------------------------------------------------
    def _do(self, what: str, call: Callable[[], T], then: Callable[[T], None]) -> None:
        """Run a blocking core call on a worker; `then` gets its result on
        the event loop. A refusal or an error is shown in words."""
        self._acting += 1

        def work() -> None:
            try:
                result = call()
            except Failure as exc:
                self.call_from_thread(self._refused, what, exc)
            except OSError as exc:
                self.call_from_thread(self._refused, what, Failed(str(exc)))
            else:
                self.call_from_thread(then, result)
            finally:
                self.call_from_thread(self._acted)

        self.run_worker(work, thread=True, group="act", exit_on_error=False)

    def _acted(self) -> None:
        self._acting -= 1

    def _refused(self, what: str, exc: Failure) -> None:
        body = Text(exc.message)
        self.push_screen(
            Notice(f"{what}: {'refused' if isinstance(exc, Refused) else 'failed'}", body)
        )

    def _session(self, key: Key) -> dict[str, Any] | None:
        if self.snapshot is None:
            return None
        return next((s for s in self.snapshot.sessions if (s["agent"], s["id"]) == key), None)

    def on_sessions_pane_act(self, message: SessionsPane.Act) -> None:
        if message.action == "pin":
            self._do("pin", lambda: self.backend.show(*message.key), self._ask_pin)
        elif message.action == "purge":
            self._do("purge", lambda: self._purge_trial(message.key), self._ask_purge)

    def _ask_pin(self, doc: dict[str, Any]) -> None:
        key = (doc["agent"], doc["id"])
        name = f"{doc['agent']} {self.names(doc['id'])}"
        if doc.get("pinned"):
            title, yes = f"Unpin {name}?", "Unpin"
            body = "It can be pruned again once it is idle past the retention."
        else:
            title, yes = f"Pin {name}?", "Pin"
            body = (
                "A pinned session is never pruned or purged, whatever its age (p again unpins it)."
            )
        pinned = not doc.get("pinned")

        def answer(yes: bool | None) -> None:
            if yes:
                self._do("pin", lambda: self.backend.pin(*key, pinned), self._pinned)

        self.push_screen(Confirm(title, body, yes), answer)

    def _pinned(self, doc: dict[str, Any]) -> None:
        verb = "pinned" if doc["pinned"] else "unpinned"
        self.notify(f"{verb} {doc['agent']} {self.names(doc['id'])}")
        self.reload(plan=True)

    def _purge_trial(self, key: Key) -> tuple[dict[str, Any], bool, str]:
        """On a worker: the purge's dry run; when the session is refused only
        as the parent of sessions that stay, the dry run with --cascade.
        (report, cascade, why the plain purge was refused)."""
        try:
            return self.backend.purge(*key, dry_run=True, cascade=False), False, ""
        except Failure as exc:
            verdict = self._refusal(exc).of(*key)
            if verdict.reason != "ancestor":
                raise Refused(f"{key[0]} {self.names(key[1])} {verdict.words}") from None
        try:
            report = self.backend.purge(*key, dry_run=True, cascade=True)
        except Failure as exc:
            words = self._refusal(exc).of(*key).words
            raise Refused(
                f"{key[0]} {self.names(key[1])} {words}; --cascade cannot take it either"
            ) from None
        return report, True, verdict.words

    def _refusal(self, exc: Failure) -> Plans:
        """A refused purge's report, whose kept entry says why; any other
        failure is raised again."""
        if not isinstance(exc, Refused) or exc.report is None:
            raise exc
        sessions = self.snapshot.sessions if self.snapshot else []
        return Plans(exc.report, None, time.time(), sessions, self.names)

    def _ask_purge(self, trial: tuple[dict[str, Any], bool, str]) -> None:
        report, cascade, why = trial
        target = report["removed"][-1] if report["removed"] else None
        if target is None:
            self.push_screen(Notice("purge", "nothing to purge"))
            return
        key = (target["agent"], target["id"])
        name = f"{key[0]} {self.names(key[1])}"
        body = Text()
        if cascade:
            body.append(f"{name} alone is refused: {why}.\n", "yellow")
            body.append(
                f"--cascade takes its descendants first, then it: "
                f"{len(report['removed'])} sessions\n"
            )
            for r in report["removed"]:
                s = self._session((r["agent"], r["id"]))
                idle = f", idle {age(r['last_activity'])}" if r.get("last_activity") else ""
                ws = f", {home_relative(s['workspace'], self.home)}" if s and s["workspace"] else ""
                body.append(f"  {r['agent']} {self.names(r['id'])}  {size(r['bytes'])}{idle}{ws}\n")
        gone = sum(r["bytes"] for r in report["removed"])
        paths = sum(len(r["paths"]) for r in report["removed"])
        trash = report.get("trash")
        if trash:
            body.append(
                f"Moves {size(gone)} ({paths} paths) to the trash, where it can be restored"
                f" (3, then u) until it expires {when(trash['until'])}."
            )
        else:
            body.append(
                f"Removes {size(gone)} ({paths} paths) at once: the trash is off"
                ' (trash = "0"), so nothing brings it back.',
                "red",
            )
        title = f"Purge {name}" + (" and its descendants?" if cascade else "?")
        yes = "Purge with --cascade" if cascade else "Purge"

        def answer(ok: bool | None) -> None:
            if ok:
                self._do(
                    "purge",
                    lambda: self.backend.purge(*key, dry_run=False, cascade=cascade),
                    self._purged,
                )

        self.push_screen(Confirm(title, body, yes), answer)

    def _purged(self, report: dict[str, Any]) -> None:
        gone = sum(r["bytes"] for r in report["removed"])
        where = "to the trash" if report.get("trash") else "for good"
        self.notify(f"purged {len(report['removed'])} sessions ({size(gone)}) {where}")
        if report["failed"]:
            self.push_screen(Notice("purge: failed", summary(report, time.time())))
        self.reload(plan=True)

    def on_trash_pane_restore(self, message: TrashPane.Restore) -> None:
        e = message.entry
        name = f"{e['agent']} {self.names(e['id'])}"
        body = Text(
            f"Puts {name} ({size(e['bytes'])}) back where it was, with any of its"
            " ancestors still in the trash, database rows included. Nothing is"
            " overwritten: if anything is in the way, nothing moves."
        )
        if e["partial"]:
            body.append("\nPart of it was removed at once and cannot come back.", "yellow")

        def answer(ok: bool | None) -> None:
            if ok:
                self._do(
                    "restore", lambda: self.backend.restore(e["agent"], e["id"]), self._restored
                )

        self.push_screen(Confirm(f"Restore {name}?", body, "Restore"), answer)

    def _restored(self, doc: dict[str, Any]) -> None:
        names = ", ".join(f"{e['agent']} {self.names(e['id'])}" for e in doc["restored"])
        self.notify(f"restored {names} ({size(doc['bytes'])})")
        self.reload(plan=True)

    # -- actions ----------------------------------------------------------
    def action_pane(self, name: str) -> None:
        self.query_one(TabbedContent).active = name
        focus = {"overview": "#overview-pane", "sessions": "#table", "trash": "#trash-table"}
        self.query_one(focus[name]).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        pane = event.pane.id
        if pane == "sessions":
            self.query_one("#table", DataTable).focus()
        elif pane == "trash":
            self.query_one("#trash-table", DataTable).focus()

    def action_refresh(self) -> None:
        self.reload(plan=True)

    def action_help(self) -> None:
        self.push_screen(Help())

    def action_prune(self) -> None:
        self._do("dry run", self.backend.plan, self._show_plan)

    def _show_plan(self, plan: Plan) -> None:
        self._got_plan(plan)
        plan = self.plan or plan
        if plan.report is None:
            self.push_screen(Notice("Nothing to prune", plan.error or "no plan"))
            return
        sessions = {
            (s["agent"], s["id"]): s for s in (self.snapshot.sessions if self.snapshot else [])
        }
        plans = Plans(plan.report, None, plan.taken_at, list(sessions.values()), self.names)

        def answer(ok: bool | None) -> None:
            if ok:
                self._do("prune", lambda: self.backend.prune(dry_run=False), self._pruned)

        self.push_screen(PlanView(plans, sessions), answer)

    def _pruned(self, report: dict[str, Any]) -> None:
        self.push_screen(Notice("Pruned", summary(report, time.time())))
        self.reload(plan=True)


def _names(snap: Snapshot, report: dict[str, Any] | None) -> Names:
    """Every id the app may say: the sessions, the trash, the plan's."""
    ids = [s["id"] for s in snap.sessions] + [e["id"] for e in snap.trash]
    for part in ("removed", "kept", "failed"):
        ids += [e["id"] for e in (report or {}).get(part, [])]
    return Names(ids)


class _ToApp(logging.Handler):
    """Warnings and errors logged while the app runs, as notifications: a
    line written to the terminal would tear the screen."""

    def __init__(self, app: App[None]) -> None:
        super().__init__(logging.WARNING)
        self.app = app

    def emit(self, record: logging.LogRecord) -> None:
        event = record.msg if isinstance(record.msg, dict) else {"event": record.getMessage()}
        words = str(event.get("event", ""))
        fields = [f"{k}={v}" for k, v in event.items() if k not in _NOT_SAID]
        message = f"{words} ({', '.join(fields)})" if fields else words
        severity: SeverityLevel = "error" if record.levelno >= logging.ERROR else "warning"
        try:
            self.app.call_from_thread(self.app.notify, message, severity=severity, timeout=10)
        except RuntimeError:  # on the app's own thread, or the app has stopped
            self.app.notify(message, severity=severity, timeout=10)


_NOT_SAID = frozenset({"event", "level", "logger", "timestamp", "_record", "_from_structlog"})


def run() -> int:
    app = AgentkeepApp()
    root = logging.getLogger()
    handlers, root.handlers = root.handlers, [_ToApp(app)]
    try:
        app.run()
    finally:
        root.handlers = handlers
    return 0
