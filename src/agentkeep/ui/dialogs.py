"""Confirmations, messages, the plan's list and the keys: each says what will
happen before anything does."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Static

from agentkeep.render import age, count, size, when
from agentkeep.verdict import Plans, short


class Confirm(ModalScreen[bool]):
    """A question with its consequences; y or the named button says yes."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, title: str, body: Text | str, yes: str) -> None:
        super().__init__()
        self.title_text, self.body, self.yes = title, body, yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(self.body)
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes} (y)", variant="warning", id="yes")
                yield Button("Cancel (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class Notice(ModalScreen[None]):
    """A result or a refusal, in words."""

    BINDINGS = [Binding("escape,enter,q", "close", "Close")]

    def __init__(self, title: str, body: Text | str) -> None:
        super().__init__()
        self.title_text, self.body = title, body

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(self.body)
            with Horizontal(classes="buttons"):
                yield Button("Close", id="close")

    def on_mount(self) -> None:
        self.query_one("#close", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)


class PlanView(ModalScreen[bool]):
    """The configured retention's dry run as a list: what goes, what stays
    and why. Its button runs that prune (which decides again under the
    locks, as every prune does)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Prune now"),
        Binding("n,escape,q", "answer(False)", "Close"),
    ]

    def __init__(self, plans: Plans, sessions: dict[tuple[str, str], dict[str, Any]]) -> None:
        super().__init__()
        self.plans = plans
        self.sessions = sessions

    def compose(self) -> ComposeResult:
        report = self.plans.report or {}
        removed, kept, failed = (
            report.get("removed", []),
            report.get("kept", []),
            report.get("failed", []),
        )
        gone = sum(r["bytes"] for r in removed)
        trash = report.get("trash")
        with Vertical(classes="dialog wide"):
            yield Static("A prune with the configured retention (dry run)", classes="dialog-title")
            yield Static(summary(report, self.plans.taken_at))
            table: DataTable[Any] = DataTable(
                id="plan-table", cursor_type="row", zebra_stripes=True
            )
            table.add_column("", key="fate")
            table.add_column("AGENT", key="agent")
            table.add_column("ID", key="id")
            table.add_column("SIZE", key="size")
            table.add_column("IDLE", key="idle")
            table.add_column("WHY", key="why")
            for r in removed:
                table.add_row(
                    Text("goes", "yellow"),
                    r["agent"],
                    short(r["id"]),
                    Text(size(r["bytes"]), justify="right"),
                    age(r["last_activity"], self.plans.taken_at),
                    "",
                )
            for entry in (*kept, *failed):
                s = self.sessions.get((entry["agent"], entry["id"]))
                verdict = self.plans.of(entry["agent"], entry["id"])
                table.add_row(
                    Text(verdict.fate.value, "red" if entry in failed else "cyan"),
                    entry["agent"],
                    short(entry["id"]),
                    Text(size(s["bytes"]) if s else "-", justify="right"),
                    age(s["last_activity"], self.plans.taken_at) if s else "-",
                    verdict.words.split(": ", 1)[-1],
                )
            yield table
            with Horizontal(classes="buttons"):
                if removed:
                    verb = "trash" if trash else "remove"
                    yield Button(
                        f"Prune: {verb} {len(removed)} ({size(gone)}) (y)",
                        variant="warning",
                        id="yes",
                    )
                yield Button("Close (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#plan-table", DataTable).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        report = self.plans.report or {}
        self.dismiss(yes and bool(report.get("removed")))


def summary(report: dict[str, Any], now: float) -> Text:
    """What a prune's report says, in one paragraph (dry run or done)."""
    removed = report.get("removed", [])
    gone = sum(r["bytes"] for r in removed)
    trash = report.get("trash")
    dry = report.get("dry_run")
    sessions = count(len(removed), "session")
    t = Text()
    if report.get("paused"):
        t.append(f"paused: {report['paused']}\n", "yellow")
    if trash:
        verb = "would move" if dry else "moved"
        until = when(trash["until"], now).removeprefix("in ")
        t.append(f"{verb} {sessions} ({size(gone)}) to the trash, where they wait {until}")
        t.append(" and can be restored" if dry else " (3 lists them, u restores one)")
    else:
        verb = "would remove" if dry else "removed"
        t.append(f"{verb} {sessions} ({size(gone)}) at once: the trash is off")
    t.append(f"; {count(len(report.get('kept', [])), 'old session')} stay")
    if report.get("failed"):
        t.append(f"; {len(report['failed'])} failed", "red")
    if dry and removed:
        t.append(". Pruning decides again under each session's lease: what changed since stays.")
    return t


KEYS = (
    ("1 2 3", "overview, sessions, trash"),
    ("tab", "move the focus (tabs, table, filter, buttons)"),
    ("r", "read again (with a daemon running, changes show by themselves)"),
    ("P", "the configured retention's dry run as a list, then prune"),
    ("/", "filter the sessions: every word must match"),
    ("escape", "clear the filter, close a dialog"),
    ("s  S", "sort by the next column / reverse (or click a heading)"),
    ("p", "pin or unpin the session (a pinned session is never pruned)"),
    ("d", "purge the session into the trash (offers --cascade for its children)"),
    ("u", "in the trash: restore the session"),
    ("y  n", "in a dialog: yes / no"),
    ("?", "these keys"),
    ("q", "quit"),
)


class Help(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        t = Text()
        for keys, what in KEYS:
            t.append(f"{keys:>8}  ", "bold").append(what + "\n")
        t.append("\nThe mouse works too: click a tab, a row, a heading to sort, a button.", "dim")
        with Vertical(classes="dialog"):
            yield Static("Keys", classes="dialog-title")
            yield Static(t)

    def action_close(self) -> None:
        self.dismiss(None)
