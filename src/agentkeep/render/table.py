"""Text for a person: where it goes (Out), and tables of fixed-width columns,
one line a row. Fitted to the width (a terminal's, or COLUMNS), the columns
that can give way are cut with an ellipsis, ids last of all: `show`, `purge`
and `restore` take a whole id, so a standard one is never cut at 80 columns.
In a pipe or with `--wide` nothing is cut. Rows go through one format a
table, not a table library: `ls` of tens of thousands stays as fast as its JSON.
"""

from __future__ import annotations

import os
import re
import textwrap
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TextIO

_GAP = "  "
_SIZE_SPACE = re.compile(r"(\d) (B|kB|MB|GB|TB)\b")
BOLD, RED, YELLOW, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[0m"


def terminal_columns(stream: TextIO) -> int:
    """The width of the terminal `stream` is on (80 when it cannot be told)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


# -- the output ----------------------------------------------------------------
@dataclass(frozen=True)
class Out:
    """Where text goes and how: tables fit `width` (None: nothing is cut, in
    a pipe or with --wide) and prose wraps at `wrap` (None: in a pipe);
    colour only on a terminal."""

    stream: TextIO
    width: int | None
    color: bool
    ellipsis: str
    wrap: int | None = None

    @classmethod
    def of(cls, stream: TextIO, *, wide: bool = False) -> Out:
        """The width a person sees: COLUMNS when set (a pipe too), else the
        terminal's; none off a terminal. `wide`: tables are not fitted."""
        terminal = stream.isatty()
        width = None
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            width = int(columns)
        elif terminal:
            width = terminal_columns(stream)
        color = terminal and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        utf8 = (getattr(stream, "encoding", None) or "").lower().replace("-", "") == "utf8"
        return cls(stream, None if wide else width, color, "…" if utf8 else "...", width)

    def line(self, text: str = "") -> None:
        """One line, as it is."""
        self.stream.write(text + "\n")

    def lines(self, lines: Iterable[str]) -> None:
        """Lines, as they are, in one write."""
        self.stream.write("".join(f"{line}\n" for line in lines))

    def say(self, text: str, indent: str = "") -> None:
        """Prose: wrapped at the width between words (a long path or id
        stays whole on its own line), one line when nothing is cut."""
        if self.wrap is None:
            self.line(indent + text)
            return
        # A size stays on one line: "7.1 kB", never "7.1" and "kB".
        kept = _SIZE_SPACE.sub("\\1\0\\2", text)
        wrapped = textwrap.wrap(
            kept,
            self.wrap,
            initial_indent=indent,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        self.lines(line.replace("\0", " ") for line in wrapped or [""])

    def style(self, text: str, code: str) -> str:
        """`text` in the colour `code`, where colour is on."""
        return f"{code}{text}{_RESET}" if self.color else text


# -- tables --------------------------------------------------------------------
NEVER, END, START = "never", "end", "start"
_LAST = 2  # the `yields` of ids: cut only when nothing else is left to give


@dataclass(frozen=True)
class Col:
    """A column: NEVER cut, or cut keeping a value's END (…/proj) or START
    (1c8d…); too wide a table cuts them in the order of `yields` (1 first),
    each down to `least`."""

    title: str
    right: bool = False
    cut: str = NEVER
    yields: int = 1
    least: int = 0


def printable(text: str) -> str:
    """One line whatever a name holds: control characters and lone
    surrogates (a file name that is not UTF-8) written as escapes."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def _cells(text: str) -> int:
    """How many terminal cells `text` takes (wide East Asian characters two,
    combining marks none)."""
    if text.isascii():
        return len(text)
    return sum(
        0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        for ch in text
    )


def _cut(text: str, width: int, how: str, ellipsis: str) -> str:
    """`text` in at most `width` cells, with an ellipsis where it was cut."""
    if _cells(text) <= width:
        return text
    room = width - len(ellipsis)
    if room <= 0:
        return ellipsis[:width]
    if how == END:
        tail = _fit(text[::-1], room)[::-1]
        # At a component when one fits: …/proj rather than …roj.
        slash = tail.find("/")
        return ellipsis + (tail[slash:] if 0 < slash < len(tail) - 1 else tail)
    return _fit(text, room) + ellipsis


def _fit(text: str, width: int) -> str:
    """The longest start of `text` that takes at most `width` cells."""
    if text.isascii():
        return text[:width]
    used = 0
    for i, ch in enumerate(text):
        used += _cells(ch)
        if used > width:
            return text[:i]
    return text


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * (width - _cells(text))
    return fill + text if right else text + fill


def _fit_widths(cols: Sequence[Col], widths: list[int], room: int) -> str:
    """Narrow the columns that give way, widest first, in the order of their
    `yields`, until the table takes `room` cells (or none can give more);
    before the last resort (ids) gives way, the gap between columns narrows
    to one space. The gap to use."""
    gap = _GAP
    for level in sorted({c.yields for c in cols if c.cut != NEVER}):
        if level >= _LAST and _over(widths, gap, room) > 0:
            gap = " "
        group = [i for i, c in enumerate(cols) if c.cut != NEVER and c.yields == level]
        floor = {i: max(cols[i].least, len(cols[i].title)) for i in group}
        over = _over(widths, gap, room)
        while over > 0:
            can = [i for i in group if widths[i] > floor[i]]
            if not can:
                break
            widest = max(can, key=lambda i: widths[i])
            widths[widest] -= 1
            over -= 1
    return gap


def _over(widths: list[int], gap: str, room: int) -> int:
    return sum(widths) + len(gap) * (len(widths) - 1) - room


def table(out: Out, cols: Sequence[Col], rows: Sequence[Sequence[str]]) -> None:
    """Print `rows` under `cols`, one line each, fitted to out.width."""
    columns = [list(column) for column in zip(*rows, strict=True)] or [[] for _ in cols]
    # Cells whose length is their width (nearly all: ASCII) go through one
    # format for the whole table: what keeps 14,000 rows as fast as the JSON.
    # Checked a column at a time, on the column joined: one call, not one a cell.
    plain = []
    for i, column in enumerate(columns):
        joined = "".join(column)
        if not joined.isprintable():
            columns[i] = column = [printable(cell) for cell in column]
        plain.append(joined.isascii() or all(len(cell) == _cells(cell) for cell in column))
    widths = [
        max(len(c.title), max(map(len if simple else _cells, column), default=0))
        for c, column, simple in zip(cols, columns, plain, strict=True)
    ]
    gap = _GAP if out.width is None else _fit_widths(cols, widths, out.width)
    for i, (col, width) in enumerate(zip(cols, widths, strict=True)):
        if col.cut != NEVER:
            columns[i] = [
                cell if len(cell) <= width else _cut(cell, width, col.cut, out.ellipsis)
                for cell in columns[i]
            ]
            plain[i] = plain[i] and len(out.ellipsis) == _cells(out.ellipsis)
    header = gap.join(_pad(c.title, w, c.right) for c, w in zip(cols, widths, strict=True))
    out.line(out.style(header.rstrip(), BOLD))
    if all(plain):
        fmt = gap.join(
            f"{{:{'>' if c.right else '<'}{w}}}" for c, w in zip(cols, widths, strict=True)
        )
        out.lines(fmt.format(*row).rstrip() for row in zip(*columns, strict=True))
        return
    out.lines(
        gap.join(
            _pad(cell, w, c.right) for cell, c, w in zip(row, cols, widths, strict=True)
        ).rstrip()
        for row in zip(*columns, strict=True)
    )


# The columns every listing of sessions starts with.
AGENT = Col("AGENT")
ID = Col("ID", cut=START, yields=_LAST, least=9)
