"""The application: three panes, their keys, and what the keys that change
something do (pin, purge, restore, prune), each asked first in a dialog that
says what will happen. What it reads, and when, is ReadingApp's (reading.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.widgets import Footer, Static, TabbedContent, TabPane

from agentkeep.errors import Failed, Failure, Refused
from agentkeep.render import age, size, when
from agentkeep.ui.backend import Plan
from agentkeep.ui.dialogs import DIALOG_WIDE, Confirm, Help, Notice, PlanView, summary
from agentkeep.ui.overview import Overview
from agentkeep.ui.reading import Key, ReadingApp
from agentkeep.ui.sessions import SessionsPane
from agentkeep.ui.text import home_relative
from agentkeep.ui.trash import TrashPane
from agentkeep.verdict import Plans

T = TypeVar("T")

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


class AgentkeepApp(ReadingApp):
    """agentkeep's terminal UI."""

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

    # -- layout -----------------------------------------------------------
    def compose(self) -> ComposeResult:
        """The title, the three panes and the keys."""
        yield Static("agentkeep: reading…", id="title")
        with TabbedContent(initial="overview"):
            with TabPane("1 Overview", id="overview"):
                yield Overview(id="overview-pane")
            with TabPane("2 Sessions", id="sessions"):
                yield SessionsPane(self.home, id="sessions-pane")
            with TabPane("3 Trash", id="trash"):
                yield TrashPane(id="trash-pane")
        yield Footer(show_command_palette=False)

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

    def _ask(
        self,
        question: ModalScreen[bool],
        what: str,
        call: Callable[[], T],
        then: Callable[[T], None],
    ) -> None:
        """Ask `question`; on yes, _do the call."""
        self.push_screen(question, lambda yes: self._do(what, call, then) if yes else None)

    def _acted(self) -> None:
        self._acting -= 1

    def _refused(self, what: str, exc: Failure) -> None:
        verb = "refused" if isinstance(exc, Refused) else "failed"
        self.push_screen(Notice(f"{what}: {verb}", Text(exc.message)))

    def _sessions(self) -> dict[Key, dict[str, Any]]:
        return {(s["agent"], s["id"]): s for s in (self.snapshot.sessions if self.snapshot else [])}

    def on_sessions_pane_act(self, message: SessionsPane.Act) -> None:
        """Pin or purge: what it would do is read first, then asked."""
        if message.action == "pin":
            self._do("pin", lambda: self.backend.show(*message.key), self._ask_pin)
        elif message.action == "purge":
            self._do("purge", lambda: self._purge_trial(message.key), self._ask_purge)

    def _ask_pin(self, doc: dict[str, Any]) -> None:
        pinned = not doc.get("pinned")
        verb = "Pin" if pinned else "Unpin"
        body = (
            "A pinned session is never pruned or purged, whatever its age (p again unpins it)."
            if pinned
            else "It can be pruned again once it is idle past the retention."
        )
        title = f"{verb} {doc['agent']} {self.names(doc['id'])}?"
        pin = partial(self.backend.pin, doc["agent"], doc["id"], pinned)
        self._ask(Confirm(title, body, verb), "pin", pin, self._pinned)

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
            sessions = self._sessions()
            for r in report["removed"]:
                s = sessions.get((r["agent"], r["id"]))
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
        purge = partial(self.backend.purge, *key, dry_run=False, cascade=cascade)
        self._ask(Confirm(title, body, yes), "purge", purge, self._purged)

    def _purged(self, report: dict[str, Any]) -> None:
        gone = sum(r["bytes"] for r in report["removed"])
        where = "to the trash" if report.get("trash") else "for good"
        self.notify(f"purged {len(report['removed'])} sessions ({size(gone)}) {where}")
        if report["failed"]:
            self.push_screen(Notice("purge: failed", summary(report, time.time())))
        self.reload(plan=True)

    def on_trash_pane_restore(self, message: TrashPane.Restore) -> None:
        """Asks, then restores."""
        e = message.entry
        name = f"{e['agent']} {self.names(e['id'])}"
        body = Text(
            f"Puts {name} ({size(e['bytes'])}) back where it was, with any of its"
            " ancestors still in the trash, database rows included. Nothing is"
            " overwritten: if anything is in the way, nothing moves."
        )
        if e["partial"]:
            body.append("\nPart of it was removed at once and cannot come back.", "yellow")
        restore = partial(self.backend.restore, e["agent"], e["id"])
        self._ask(Confirm(f"Restore {name}?", body, "Restore"), "restore", restore, self._restored)

    def _restored(self, doc: dict[str, Any]) -> None:
        names = ", ".join(f"{e['agent']} {self.names(e['id'])}" for e in doc["restored"])
        self.notify(f"restored {names} ({size(doc['bytes'])})")
        self.reload(plan=True)

    # -- actions ----------------------------------------------------------
    def action_pane(self, name: str) -> None:
        """To the pane `name`."""
        self.query_one(TabbedContent).active = name
        self.query_one(_FOCUS[name]).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """A pane's table has the focus when it shows."""
        if event.pane.id in ("sessions", "trash"):  # the overview keeps the focus it has
            self.query_one(_FOCUS[event.pane.id]).focus()

    def action_refresh(self) -> None:
        """Read again, and make the plan again."""
        self.reload(plan=True)

    def action_help(self) -> None:
        """The keys."""
        self.push_screen(Help())

    def action_prune(self) -> None:
        """The dry run as a list, then the prune when asked."""
        self._do("dry run", self.backend.plan, self._show_plan)

    def _show_plan(self, plan: Plan) -> None:
        self._got_plan(plan)
        plan = self.plan or plan
        if plan.report is None:
            self.push_screen(Notice("Nothing to prune", plan.error or "no plan"))
            return
        sessions = self._sessions()
        plans = Plans(plan.report, None, plan.taken_at, list(sessions.values()), self.names)
        prune = partial(self.backend.prune, dry_run=False)
        self._ask(PlanView(plans, sessions), "prune", prune, self._pruned)

    def _pruned(self, report: dict[str, Any]) -> None:
        self.push_screen(Notice("Pruned", summary(report, time.time())))
        self.reload(plan=True)


# What a pane's key focuses: the pane, or its table.
_FOCUS = {"overview": "#overview-pane", "sessions": "#table", "trash": "#trash-table"}


class _ToApp(logging.Handler):
    """Warnings and errors logged while the app runs, as notifications: a
    line written to the terminal would tear the screen."""

    def __init__(self, app: App[None]) -> None:
        super().__init__(logging.WARNING)
        self.app = app

    def emit(self, record: logging.LogRecord) -> None:
        """The record as a notification."""
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
    """Run the UI until it is quit, the log shown in it meanwhile."""
    app = AgentkeepApp()
    root = logging.getLogger()
    handlers, root.handlers = root.handlers, [_ToApp(app)]
    try:
        app.run()
    finally:
        root.handlers = handlers
    return 0
