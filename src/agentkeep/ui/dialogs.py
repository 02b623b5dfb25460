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


class _Dialog(ModalScreen[bool]):
    """A title, a body that scrolls, and buttons; the one named `yes` says yes."""

    FOCUS = "no"  # the button focused first

    def __init__(self, title: str, body: Text | str) -> None:
        super().__init__()
        self.title_text, self.body = title, body

    def _buttons(self) -> list[Button]:
        return [Button("Cancel (n)", id="no")]

    def compose(self) -> ComposeResult:
        """The dialog's frame."""
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(self.body)
            with Horizontal(classes="buttons"):
                yield from self._buttons()

    def on_mount(self) -> None:
        """The safe button has the focus."""
        self.query_one(f"#{self.FOCUS}").focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """A button answers."""
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        """A key answers."""
        self.dismiss(yes)


class Confirm(_Dialog):
    """A question with its consequences; y or the named button says yes."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, title: str, body: Text | str, yes: str) -> None:
        super().__init__(title, body)
        self.yes = yes

    def _buttons(self) -> list[Button]:
        return [Button(f"{self.yes} (y)", variant="warning", id="yes"), *super()._buttons()]


class Notice(_Dialog):
    """A result or a refusal, in words."""

    BINDINGS = [Binding("escape,enter,q", "answer(False)", "Close")]
    FOCUS = "close"

    def _buttons(self) -> list[Button]:
        return [Button("Close", id="close")]


class PlanView(_Dialog):
    """The configured retention's dry run as a list: what goes, what stays
    and why. Its button runs that prune (which decides again under the
    locks, as every prune does)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Prune now"),
        Binding("n,escape,q", "answer(False)", "Close"),
    ]
    FOCUS = "plan-table"

    def __init__(self, plans: Plans, sessions: dict[tuple[str, str], dict[str, Any]]) -> None:
        title = "A prune with the configured retention (dry run)"
        super().__init__(title, summary(plans.report or {}, plans.taken_at))
        self.plans, self.sessions = plans, sessions

    def compose(self) -> ComposeResult:
        """The summary, the table, and the prune's button when it would remove any."""
        report = self.plans.report or {}
        removed, failed = report.get("removed", []), report.get("failed", [])
        with Vertical(classes="dialog wide"):
            yield Static(self.title_text, classes="dialog-title")
            yield Static(self.body)
            yield self._table([*removed, *report.get("kept", []), *failed], failed)
            with Horizontal(classes="buttons"):
                if removed:
                    verb = "trash" if report.get("trash") else "remove"
                    gone = size(sum(r["bytes"] for r in removed))
                    yield Button(
                        f"Prune: {verb} {len(removed)} ({gone}) (y)", variant="warning", id="yes"
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

    def action_answer(self, yes: bool) -> None:
        """Yes only where the prune would remove any."""
        self.dismiss(yes and bool((self.plans.report or {}).get("removed")))


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
    """The keys, and what each does."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        """The keys' list."""
        t = Text()
        for keys, what in KEYS:
            t.append(f"{keys:>8}  ", "bold").append(what + "\n")
        t.append("\nThe mouse works too: click a tab, a row, a heading to sort, a button.", "dim")
        with Vertical(classes="dialog"):
            yield Static("Keys", classes="dialog-title")
            yield Static(t)

    def action_close(self) -> None:
        """Close it."""
        self.dismiss(None)
