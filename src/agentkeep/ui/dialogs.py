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
from agentkeep.verdict import Fate, Plans

DIALOG_WIDE = 120  # the plan's dialog's width, where the screen has the room


def _framed(title: str, body: Text | str, *buttons: Button) -> ComposeResult:
    with Vertical(classes="dialog"):
        yield Static(title, classes="dialog-title")
        with VerticalScroll(classes="dialog-body"):
            yield Static(body)
        with Horizontal(classes="buttons"):
            yield from buttons


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
        yes = Button(f"{self.yes} (y)", variant="warning", id="yes")
        yield from _framed(self.title_text, self.body, yes, Button("Cancel (n)", id="no"))

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
        yield from _framed(self.title_text, self.body, Button("Close", id="close"))

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
            yield self._table([*removed, *kept, *failed], failed)
            with Horizontal(classes="buttons"):
                if removed:
                    verb = "trash" if trash else "remove"
                    yield Button(
                        f"Prune: {verb} {len(removed)} ({size(gone)}) (y)",
                        variant="warning",
                        id="yes",
                    )
                yield Button("Close (n)", id="no")

    def _table(self, entries: list[dict[str, Any]], failed: list[dict[str, Any]]) -> DataTable[Any]:
        """One row a session: its fate, and why in words, wrapped in what
        the dialog leaves of its width (the other columns are as wide as
        their widest cell)."""
        rows = []
        for entry in entries:
            key = (entry["agent"], entry["id"])
            s = self.sessions.get(key)
            verdict = self.plans.of(*key)
            activity = entry.get("last_activity") or (s or {}).get("last_activity")
            bytes_ = entry.get("bytes", s["bytes"] if s else None)
            style = "red" if entry in failed else "yellow" if verdict.fate == Fate.GOES else "cyan"
            rows.append(
                (
                    Text(verdict.fate.value, style),
                    entry["agent"],
                    self.plans.name(entry["id"]),
                    Text(size(bytes_) if bytes_ is not None else "-", justify="right"),
                    age(activity, self.plans.taken_at) if activity else "-",
                    verdict.cause,
                )
            )
        table: DataTable[Any] = DataTable(id="plan-table", cursor_type="row", zebra_stripes=True)
        headings = ("", "AGENT", "ID", "SIZE", "IDLE")
        widths = [max([len(h), *(len(str(r[n])) for r in rows)]) for n, h in enumerate(headings)]
        # The dialog's border and padding take 4 cells, each column 2, the scroll bar 2.
        inner = min(DIALOG_WIDE, self.app.size.width) - 4
        why = max(20, inner - sum(widths) - 2 * (len(widths) + 1) - 2)
        for heading, width in zip(headings, widths, strict=True):
            table.add_column(heading, width=width)
        table.add_column("WHY", width=why)
        for row in rows:
            table.add_row(*row, height=None)
        return table

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
    kept = len(report.get("kept", []))
    t.append(f"; {count(kept, 'old session')} {'stays' if kept == 1 else 'stay'}")
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
    ("d", "purge it into the trash (offers --cascade for its children)"),
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
