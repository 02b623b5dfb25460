"""The sessions: a table to sort and filter, and a detail pane with every
artifact, its holders, parent and children, and the plan's verdict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Input, Static

from agentkeep.render import age, idle, size
from agentkeep.ui.text import fit_end, home_relative
from agentkeep.verdict import Fate, Names, Plans, Verdict

Key = tuple[str, str]

# How each column that sorts, sorts.
SORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "size": lambda s: s["bytes"],
    "idle": lambda s: s["last_activity"] or "9999",  # undated sorts as the newest
    "agent": lambda s: (s["agent"], s["id"]),
    "workspace": lambda s: (s["workspace"] or "", s["agent"], s["id"]),
    "state": lambda s: (s["state"], s["agent"], s["id"]),
}
FIXED = {"idle": 7, "size": 8, "state": 6, "plan": 14}
ORDER = ("id", "agent", "workspace", "idle", "size", "state", "plan")
# Whole ids only where the workspace keeps this much beside them.
WORKSPACE_BESIDE_WHOLE = 24
FATE_STYLE = {
    Fate.GOES: "yellow",
    Fate.KEPT: "cyan",
    Fate.WAITS: "magenta",
    Fate.FAILS: "red",
    Fate.STAYS: "",
    Fate.UNKNOWN: "dim",
}


@dataclass
class _Sorting:
    """The column the table sorts by; largest, oldest first by default:
    what a person looking for disk wants on top."""

    column: str = "size"
    descending: bool = True


def _column_widths(sessions: list[dict[str, Any]], names: Names, width: int) -> dict[str, int]:
    """Each column's width in a table `width` cells wide. Ids are whole
    where the workspace keeps WORKSPACE_BESIDE_WHOLE cells beside them,
    else as wide as the longest of the prefixes that tell each apart
    (Names); agents whole; the workspace the rest."""
    agent = max((len(s["agent"]) for s in sessions), default=0)
    widths = {**FIXED, "agent": max(6, agent)}
    # Each column has one cell of padding on either side, and the scroll
    # bar takes two.
    rest = width - sum(widths.values()) - 2 * len(ORDER) - 2
    whole = max((len(s["id"]) for s in sessions), default=2)
    cut = max((names.needed(s["id"]) for s in sessions), default=2)
    widths["id"] = whole if rest - whole >= WORKSPACE_BESIDE_WHOLE else cut
    widths["workspace"] = max(8, rest - widths["id"])
    return widths


def _matches(s: dict[str, Any], verdict: Verdict, words: list[str], home: str) -> bool:
    """Every word is found in the session's agent, id, workspace, state or
    verdict (case ignored)."""
    hay = " ".join(
        [s["agent"], s["id"], home_relative(s["workspace"], home), s["state"], verdict.words]
    ).lower()
    return all(w in hay for w in words)


class SessionsPane(Vertical):
    """The sessions' table, its filter, and the detail of the highlighted one."""

    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("p", "pin", "Pin"),
        Binding("d,delete", "purge", "Purge"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    class Selected(Message):
        """The highlighted session changed (None: the table is empty)."""

        def __init__(self, key: Key | None) -> None:
            super().__init__()
            self.key = key

    class Act(Message):
        """An action asked for on a session: "pin" or "purge"."""

        def __init__(self, action: str, key: Key) -> None:
            super().__init__()
            self.action = action
            self.key = key

    def __init__(self, home: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.home = home
        self.sorting = _Sorting()
        self.sessions: list[dict[str, Any]] = []
        self.plans: Plans | None = None
        self.now = 0.0
        self._shown: list[Key] = []
        self._widths: dict[str, int] = {}
        self._width = 0

    def compose(self) -> ComposeResult:
        """The filter, the table and the detail."""
        yield Input(placeholder="/ filter: words in agent, id, workspace, state, plan", id="filter")
        with Vertical(id="sessions-body"):
            yield DataTable(id="table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="detail-box"):
                yield Static("", id="detail")

    @property
    def table(self) -> DataTable[Any]:
        """The sessions' table."""
        return self.query_one("#table", DataTable)

    @property
    def selected(self) -> Key | None:
        """The highlighted session (None: the table is empty)."""
        table = self.table
        if not self._shown or table.cursor_row < 0 or table.cursor_row >= len(self._shown):
            return None
        return self._shown[table.cursor_row]

    def show(self, sessions: list[dict[str, Any]], plans: Plans, now: float) -> None:
        """Show these sessions, with the plan's verdicts."""
        self.sessions, self.plans, self.now = sessions, plans, now
        self._fill()

    def _columns(self) -> None:
        table = self.table
        width = self._width = max(40, table.size.width or self.size.width or 80)
        widths = _column_widths(self.sessions, self.plans.name if self.plans else Names(()), width)
        if widths == self._widths and table.columns:
            return
        self._widths = widths
        table.clear(columns=True)
        for key in ORDER:
            table.add_column(key.upper(), width=widths[key], key=key)

    def _fill(self) -> None:
        if self.plans is None:
            return
        keep = self.selected
        self._columns()
        table = self.table
        table.clear()
        words = self.query_one("#filter", Input).value.lower().split()
        rows = sorted(
            self.sessions, key=SORTS[self.sorting.column], reverse=self.sorting.descending
        )
        id_width = self._widths["id"]
        workspace_width = self._widths["workspace"]
        self._shown = []
        for s in rows:
            verdict = self.plans.of(s["agent"], s["id"])
            if words and not _matches(s, verdict, words, self.home):
                continue
            self._shown.append((s["agent"], s["id"]))
            sid = s["id"]
            table.add_row(
                sid if len(sid) <= id_width else self.plans.name(sid),
                s["agent"],
                fit_end(home_relative(s["workspace"], self.home), workspace_width),
                Text(idle(s["last_activity"], self.now, years=True), justify="right"),
                Text(size(s["bytes"]), justify="right"),
                s["state"],
                Text(verdict.label, FATE_STYLE[verdict.fate]),
            )
        arrow = "▼" if self.sorting.descending else "▲"
        for key, column in table.columns.items():
            column.label = Text(
                str(key.value).upper() + (arrow if key.value == self.sorting.column else "")
            )
        if keep in self._shown:
            table.move_cursor(row=self._shown.index(keep), animate=False)
        self.post_message(self.Selected(self.selected))

    def on_resize(self) -> None:
        """The columns fit the new width."""
        if self.plans is not None and self.table.size.width != self._width:
            self._fill()

    def on_input_changed(self, event: Input.Changed) -> None:
        """The filter filters as it is typed."""
        self._fill()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the filter goes to the table."""
        self.table.focus()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The highlighted session's detail follows."""
        self.post_message(self.Selected(self.selected))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a heading sorts by it, again reverses."""
        column = str(event.column_key.value)
        if column == self.sorting.column:
            self.action_reverse()
        elif column in SORTS:
            self.sorting = _Sorting(column)
            self._fill()

    def action_filter(self) -> None:
        """To the filter."""
        self.query_one("#filter", Input).focus()

    def action_clear_filter(self) -> None:
        """Clear the filter, back to the table."""
        self.query_one("#filter", Input).value = ""
        self.table.focus()

    def action_sort(self) -> None:
        """Sort by the next column."""
        names = list(SORTS)
        self.sorting = _Sorting(names[(names.index(self.sorting.column) + 1) % len(names)])
        self._fill()

    def action_reverse(self) -> None:
        """Reverse the order."""
        self.sorting.descending = not self.sorting.descending
        self._fill()

    def action_pin(self) -> None:
        """Pin or unpin the highlighted session."""
        if self.selected is not None:
            self.post_message(self.Act("pin", self.selected))

    def action_purge(self) -> None:
        """Purge the highlighted session."""
        if self.selected is not None:
            self.post_message(self.Act("purge", self.selected))

    def detail(self, text: Text) -> None:
        """Show `text` in the detail."""
        self.query_one("#detail", Static).update(text)


def detail_text(
    doc: dict[str, Any], verdict: Verdict, plan_age: str, home: str, now: float
) -> Text:
    """Everything `show` says of a session, and the plan's verdict in words."""
    t = Text()
    t.append(f"{doc['agent']} {doc['id']}\n", "bold")
    t.append("workspace ", "bold").append(home_relative(doc.get("workspace"), home) + "\n")
    activity = doc.get("last_activity")
    ago = age(activity, now) if activity else "undated"
    t.append("idle ", "bold").append(f"{ago}  ")
    t.append("size ", "bold").append(f"{size(doc['bytes'])} in {len(doc['artifacts'])} artifacts  ")
    t.append("state ", "bold").append(f"{doc['state']}\n")
    t.append("plan ", "bold").append(verdict.words, FATE_STYLE[verdict.fate])
    t.append(f"  ({plan_age})\n", "dim")
    t.append("parent ", "bold").append(doc.get("parent") or "none")
    children = doc.get("children") or []
    t.append("  children ", "bold").append(", ".join(children) if children else "none")
    holders = doc.get("holders") or []
    t.append("\nholders ", "bold")
    if not holders:
        t.append("none")
    for n, h in enumerate(holders):
        who = f"pid {h['pid']}" if h.get("pid") is not None else ""
        detail = " ".join(x for x in (who, h.get("detail") or "") if x)
        t.append(("; " if n else "") + f"{h['kind']} {detail}".rstrip())
    t.append("\n")
    t.append("artifacts\n", "bold")
    for a in sorted(doc["artifacts"], key=lambda a: -a["bytes"]):
        t.append(f"{size(a['bytes']):>9}  {a['kind']}")
        if a.get("linked"):
            t.append("  (behind a link: never removed)", "yellow")
        t.append(f"\n           {home_relative(a['path'], home)}\n", "dim")
    t.rstrip()
    return t
