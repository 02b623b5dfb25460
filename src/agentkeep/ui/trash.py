"""The trash: what pruned and purged sessions wait in, and when each expires."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from agentkeep.render import count, size, when
from agentkeep.verdict import Names


class TrashPane(Vertical):
    """The trash's sessions, soonest to expire first, and their total."""

    BINDINGS = [Binding("u,enter", "restore", "Restore")]

    class Restore(Message):
        """Restore asked for on this entry."""

        def __init__(self, entry: dict[str, Any]) -> None:
            super().__init__()
            self.entry = entry

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.entries: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        """The total and the table."""
        yield Static("", id="trash-total")
        table: DataTable[Any] = DataTable(id="trash-table", cursor_type="row", zebra_stripes=True)
        for key in ("agent", "id", "size", "trashed", "expires", "restores"):
            table.add_column(key.upper(), key=key)
        yield table

    def show(self, entries: list[dict[str, Any]], now: float, names: Names) -> None:
        """Show these entries, the cursor kept where it was."""
        self.entries = sorted(entries, key=lambda e: e["expires_at"])
        table = self.query_one("#trash-table", DataTable)
        row = table.cursor_row
        table.clear()
        for e in self.entries:
            table.add_row(
                e["agent"],
                names(e["id"]),
                Text(size(e["bytes"]), justify="right"),
                when(e["trashed_at"], now),
                when(e["expires_at"], now),
                "partly" if e["partial"] else "all",
            )
        if self.entries:
            table.move_cursor(row=min(max(row, 0), len(self.entries) - 1), animate=False)
        total = sum(e["bytes"] for e in entries)
        words = (
            f"{count(len(entries), 'session')} in the trash, {size(total)}: u puts one back"
            if entries
            else "the trash is empty"
        )
        if any(e["partial"] for e in entries):
            words += "  (partly: some of it was removed at once and cannot come back)"
        self.query_one("#trash-total", Static).update(words)

    def action_restore(self) -> None:
        """Restore the highlighted entry (asked first)."""
        table = self.query_one("#trash-table", DataTable)
        if self.entries and 0 <= table.cursor_row < len(self.entries):
            self.post_message(self.Restore(self.entries[table.cursor_row]))
