"""Text for a person: tables of fixed-width columns, human sizes and ages, and
the progress bar.

Every table row is one line. On a terminal (or with COLUMNS) a table fits
the width: the columns that can give way are cut with an ellipsis,
workspaces and paths keeping their end (`…/proj`), details their start,
and ids last of all and only when nothing else is left to cut (a full id
is what `show`, `purge` and `restore` take, so a standard id is never cut
at 80 columns). Sent to a pipe, or with `--wide`, nothing is cut. Colour
only on a terminal without NO_COLOR; `--json` output never comes through
here. Rows are formatted here rather than by a table library: `ls` prints
tens of thousands of them, and a fixed-width format per table is what keeps
that as fast as printing the JSON.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
import threading
import time
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO

from agentkeep.model import parse_rfc3339
from agentkeep.progress import Progress

_GAP = "  "
_SIZE_SPACE = re.compile(r"(\d) (B|kB|MB|GB|TB)\b")
_BOLD, _RED, _YELLOW, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[0m"


def size(n: int | None) -> str:
    """Decimal units, as disks are sold: 3.2 GB."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60))


def _elapsed(rfc: str, now: float | None) -> tuple[int, str] | None:
    """How long ago `rfc` was, in the largest whole unit; None under a minute."""
    seconds = max(0.0, (now if now is not None else time.time()) - parse_rfc3339(rfc))
    for unit, length in _UNITS:
        if seconds >= length:
            return int(seconds // length), unit
    return None


def idle(rfc: str | None, now: float | None = None) -> str:
    """How long ago, short for a table: 41d, 3h, 12m, now; "undated" when
    the time cannot be read."""
    if rfc is None:
        return "undated"
    ago = _elapsed(rfc, now)
    return f"{ago[0]}{ago[1][0]}" if ago else "now"


def age(rfc: str | None, now: float | None = None) -> str:
    """How long ago, in words for a sentence: 41 days, 3 hours, just now."""
    if rfc is None:
        return "undated"
    ago = _elapsed(rfc, now)
    if ago is None:
        return "just now"
    n, unit = ago
    return f"{n} {unit}{'s' if n != 1 else ''}"


def when(rfc: str | None, now: float | None = None) -> str:
    """A moment relative to now: "3 h ago", "in 6 days", "now"."""
    if rfc is None:
        return "never"
    delta = parse_rfc3339(rfc) - (now if now is not None else time.time())
    seconds = abs(delta)
    for unit, length in (("days", 2 * 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            # Days to the nearest (a week from now reads "in 7 days"), the
            # smaller units whole.
            n = round(seconds / 86400) if unit == "days" else int(seconds // length)
            text = f"{n} {unit}"
            return f"in {text}" if delta > 0 else f"{text} ago"
    return "now"


def duration(seconds: float) -> str:
    """An uptime: 45 s, 12 min, 3 h 20 min, 6 days 2 h."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} days {s % 86400 // 3600} h"


def _columns(stream: TextIO) -> int:
    """The width of the terminal `stream` is on (80 when it cannot be told)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


def count(n: int, noun: str) -> str:
    """ "3 sessions", "1 session"."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


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
            width = _columns(stream)
        color = terminal and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        utf8 = (getattr(stream, "encoding", None) or "").lower().replace("-", "") == "utf8"
        return cls(stream, None if wide else width, color, "…" if utf8 else "...", width)

    def line(self, text: str = "") -> None:
        self.stream.write(text + "\n")

    def lines(self, lines: Iterable[str]) -> None:
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
        return f"{code}{text}{_RESET}" if self.color else text


# -- tables --------------------------------------------------------------------
# How a column gives way when a table is too wide: NEVER is never cut; END
# keeps a value's end (…/proj), START its start (parent of 1c8d…). Columns
# give way in the order of `yields` (1 first), each down to `least`.
NEVER, END, START = "never", "end", "start"


_LAST = 2  # the `yields` of ids: cut only when nothing else is left to give


@dataclass(frozen=True)
class Col:
    title: str
    right: bool = False
    cut: str = NEVER
    yields: int = 1
    least: int = 0


def _printable(text: str) -> str:
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
            columns[i] = column = [_printable(cell) for cell in column]
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
    out.line(out.style(header.rstrip(), _BOLD))
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


# -- the commands ----------------------------------------------------------------
_AGENT = Col("AGENT")
_ID = Col("ID", cut=START, yields=_LAST, least=9)


def sessions(out: Out, rows: list[dict[str, Any]], hint: dict[str, Any] | None) -> None:
    now = time.time()
    cols = (
        _AGENT,
        _ID,
        Col("IDLE", right=True),
        Col("SIZE", right=True),
        Col("STATE"),
        Col("WORKSPACE", cut=END),
    )
    table(
        out,
        cols,
        [
            (
                r["agent"],
                r["id"],
                idle(r["last_activity"], now),
                size(r["bytes"]),
                r["state"],
                r["workspace"] or "-",
            )
            for r in rows
        ],
    )
    total = sum(r["bytes"] for r in rows)
    out.line(f"{count(len(rows), 'session')}, {size(total)}")
    _hint(out, hint)


def _hint(out: Out, hint: dict[str, Any] | None) -> None:
    if not hint:
        return
    sessions = count(hint["sessions"], "session")
    out.say(
        f"No retention is set, so nothing is ever pruned. A {hint['retention']} retention would "
        f"reclaim {size(hint['bytes'])} from {sessions}; to turn it on, add this line to "
        f"{hint['config_path']}:"
    )
    out.line(f"  {hint['config_line']}")


def show(out: Out, doc: dict[str, Any]) -> None:
    out.line(out.style(f"{doc['agent']} {doc['id']}", _BOLD))
    state = doc["state"]
    if doc.get("pinned") and state != "pinned":
        state += ", pinned"  # live or held wins the state; the pin still counts
    for label, value in (
        ("state", state),
        ("workspace", doc["workspace"] or "-"),
        ("last activity", when(doc["last_activity"]) if doc["last_activity"] else "undated"),
        ("size", size(doc["bytes"])),
        ("parent", doc["parent"] or "-"),
        ("children", ", ".join(doc["children"]) or "-"),
    ):
        out.say(f"{label:<14} {_printable(value)}", indent="  ")
    if doc.get("unsafe"):
        out.say(f"{out.style('unsafe:', _YELLOW)} {_printable(doc['unsafe'])}", indent="  ")
    verdict = doc.get("verdict")
    if verdict:
        out.say(f"{'verdict':<14} {_printable(verdict['words'])}", indent="  ")
        if verdict.get("do"):
            out.say(f"{'':<14} {_printable(verdict['do'])}", indent="  ")
    for h in doc["holders"]:
        pid = h["pid"] if h["pid"] is not None else "-"
        out.say(f"held by {h['kind']} {pid} {_printable(h.get('detail', ''))}".rstrip(), "  ")
    cols = [Col("KIND"), Col("SIZE", right=True), Col("PATH", cut=END)]
    rows = [[a["kind"], size(a["bytes"]), a["path"]] for a in doc["artifacts"]]
    if any(a.get("linked") for a in doc["artifacts"]):
        cols.append(Col("NOTE"))
        for row, a in zip(rows, doc["artifacts"], strict=True):
            row.append("behind a link: never removed" if a.get("linked") else "")
    table(out, cols, rows)


def du(
    out: Out,
    doc: dict[str, Any],
    hint: dict[str, Any] | None,
    held: dict[str, int] | None = None,
) -> None:
    """Disk use as `du` counts it (allocated blocks), largest first; `held`:
    what the trash holds (disk use too, until it expires)."""
    groups = sorted(doc["groups"], key=lambda g: (-g["disk_bytes"], g["key"]))
    cols = (
        Col(doc["by"].upper(), cut=END),
        Col("DISK", right=True),
        Col("SESSIONS", right=True),
        Col("RECLAIMABLE", right=True),
    )
    table(
        out,
        cols,
        [
            (g["key"], size(g["disk_bytes"]), str(g["sessions"]), size(g["reclaimable_disk_bytes"]))
            for g in groups
        ],
    )
    disk = sum(g["disk_bytes"] for g in groups)
    apparent = sum(g["bytes"] for g in groups)
    reclaim = sum(g["reclaimable_disk_bytes"] for g in groups)
    out.say(
        f"total {size(disk)} on disk ({size(apparent)} of data), reclaimable now {size(reclaim)}"
    )
    if held and held["sessions"]:
        out.say(
            f"the trash holds {size(held['bytes'])} more ({count(held['sessions'], 'session')}):"
            " freed when it expires, or now by `agentkeep trash --empty`"
        )
    _hint(out, hint)


def scan(out: Out, doc: dict[str, Any]) -> None:
    cols = (_AGENT, Col("SESSIONS", right=True))
    table(out, cols, [(agent, str(n)) for agent, n in doc["sessions"].items()])
    out.line(f"{doc['artifacts']} artifacts, {size(doc['bytes'])}, in {doc['seconds']:.2f} s")


def report(out: Out, doc: dict[str, Any]) -> None:
    trash = doc.get("trash")
    if trash:
        verb = "would move to the trash" if doc["dry_run"] else "moved to the trash"
    else:
        verb = "would remove" if doc["dry_run"] else "removed"
    if doc.get("paused"):
        out.say(f"{out.style('paused:', _YELLOW)} {doc['paused']}")
    now = time.time()
    if doc["removed"]:
        if doc["dry_run"]:
            title = "WOULD TRASH" if trash else "WOULD REMOVE"
        else:
            title = "TRASHED" if trash else "REMOVED"
        cols = (Col(title), _ID, Col("SIZE", right=True), Col("IDLE", right=True))
        rows = [
            (r["agent"], r["id"], size(r["bytes"]), idle(r["last_activity"], now))
            for r in doc["removed"]
        ]
        table(out, cols, rows)
    # Sessions over max_removals are one line, not thousands of rows.
    capped = [k for k in doc["kept"] if k["reason"] == "capped"]
    listed = [k for k in doc["kept"] if k["reason"] != "capped"]
    if listed:
        cols = (Col("KEPT"), _ID, Col("REASON"), Col("DETAIL", cut=START, least=12))
        table(out, cols, [(k["agent"], k["id"], k["reason"], _detail(k)) for k in listed])
    if capped:
        why = sorted({k.get("detail") or "over max_removals" for k in capped})
        waits = "waits" if len(capped) == 1 else "wait"
        out.say(
            f"{count(len(capped), 'more old session')} {waits} for the next run"
            f" (capped: {'; '.join(why)})"
        )
    for f in doc["failed"]:
        out.say(f"{out.style('failed', _RED)} {f['agent']} {f['id']}: {_printable(f['reason'])}")
    for r in doc["residual"]:
        out.say(f"residual {r['agent']} {r['id']}: {_printable(r['path'])}")
    reclaimed = sum(r["bytes"] for r in doc["removed"])
    out.say(
        f"{len(doc['removed'])} {verb} ({size(reclaimed)}), {len(doc['kept'])} kept, "
        f"{len(doc['failed'])} failed"
    )
    if trash and doc["removed"]:
        freed = trash["freed_bytes"]
        out.say(
            f"They wait in the trash until it expires {when(trash['until'])}:"
            f" {'that frees' if doc['dry_run'] else 'this freed'} {size(freed)} now,"
            f" and {size(trash['bytes'])} then"
            " (`agentkeep trash --empty` frees it at once; `agentkeep restore` brings one back)."
        )


def _detail(kept: dict[str, Any]) -> str:
    """A kept session's detail, unless it only says its reason again."""
    detail = kept.get("detail") or ""
    return "" if detail == kept["reason"] else detail


def status(out: Out, doc: dict[str, Any]) -> None:
    if doc.get("pid") is None:
        out.line("agentkeep daemon: not running")
    else:
        out.line(f"agentkeep daemon: pid {doc['pid']}, up {duration(doc.get('uptime_s') or 0)}")

    def field(label: str, value: str, code: str = "") -> None:
        out.say(f"{out.style(f'{label:<17}', code) if code else f'{label:<17}'} {value}", "  ")

    field("sessions indexed", str(doc.get("sessions") or 0))
    watch = doc.get("watch") or {}
    if watch.get("mode"):
        roots = len(watch.get("roots") or [])
        field("watch", f"{watch['mode']} ({count(roots, 'root')})")
    config = doc.get("config") or {}
    if config.get("ok", True):
        field("retention", config.get("retention") or "none (nothing is pruned)")
    else:
        field("config error", str(config.get("error")), _RED)
    last = doc.get("last_prune")
    field("last prune", when(last.get("time")) if last else "never")
    for error in (last or {}).get("errors") or []:
        field("failed", str(error), _RED)
    if last and last.get("preview"):
        would = count(last.get("would_remove") or 0, "session")
        field(
            "preview",
            f"{last['preview']}: it would remove {would} ({size(last.get('would_free'))});"
            " see them with `agentkeep prune --dry-run`",
            _YELLOW,
        )
    if doc.get("pid") is not None:
        field("next prune", when(doc["next_prune"]) if doc.get("next_prune") else "none scheduled")
    if doc.get("paused"):
        field("paused", f"{doc['paused']} (run `agentkeep prune` once to resume)", _YELLOW)
    _hint(out, doc.get("reclaim_hint"))


def emptied(out: Out, doc: dict[str, Any]) -> None:
    out.say(
        f"emptied {count(len(doc['emptied']), 'session')} from the trash:"
        f" {size(doc['bytes'])} freed"
    )
    for e in doc["held"]:
        out.say(f"kept {e['agent']} {e['id']}: its lease is held (in use); try again later")


def trash_entries(out: Out, entries: list[dict[str, Any]]) -> None:
    now = time.time()
    cols = (
        _AGENT,
        _ID,
        Col("SIZE", right=True),
        Col("PACKED", right=True),  # its size compressed ("-": not yet)
        Col("TRASHED", right=True),
        Col("EXPIRES", right=True),
    )
    rows = [
        (
            e["agent"],
            e["id"],
            size(e["bytes"]) + ("*" if e["partial"] else ""),
            "-" if e["compressed_bytes"] is None else size(e["compressed_bytes"]),
            when(e["trashed_at"], now),
            when(e["expires_at"], now),
        )
        for e in entries
    ]
    table(out, cols, rows)
    total = size(sum(e["bytes"] for e in entries))
    line = f"{count(len(entries), 'session')} in the trash, {total}"
    waiting = sum(1 for e in entries if e["compressed_bytes"] is None)
    if waiting < len(entries):
        kept = size(sum(e["compressed_bytes"] or e["bytes"] for e in entries))
        line += f", kept compressed in {kept}"
        line += f" ({count(waiting, 'session')} not compressed yet)" if waiting else ""
    out.line(line)
    if any(e["partial"] for e in entries):
        out.say(
            "* partly: some of it was removed at once (it lay on another file system,"
            " or an agent's own command removed it), and cannot come back."
        )


def history(out: Out, lines: list[dict[str, Any]]) -> None:
    """The record of what went, newest last: how long ago, why, whether it
    can be restored now (BACK) and what a person knows it by (sizes and
    workspaces are in --json; a whole id leaves a title little room)."""
    now = time.time()
    cols = (
        Col("AGO", right=True),
        _AGENT,
        _ID,
        Col("WHY"),
        Col("BACK"),
        Col("TITLE", cut=START),
    )
    rows = [
        (
            idle(g["time"], now),
            g["agent"],
            g["id"],
            g["why"],
            "yes" if g["restorable"] else "-",
            g["title"] or "-",
        )
        for g in lines
    ]
    table(out, cols, rows)
    back = sum(1 for g in lines if g["restorable"])
    out.line(f"{count(len(lines), 'line')}; {back} can be restored (agentkeep restore AGENT ID)")


# -- progress ------------------------------------------------------------------
class Bar:
    """A progress line on stderr for long work, drawn only when stderr is a
    terminal, after `delay` seconds, and erased when the work is done.

    `update(what, done, total)` is the core's progress.Progress. What it
    draws never moves backwards: for each `what`, the first total it is told
    stands (a spinner until there is one), the count never goes down, and a
    count past the total shows the count alone under a full bar."""

    FRAMES = 0.1  # seconds between two drawings

    def __init__(
        self,
        what: str,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        delay: float = 0.5,
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._first = what  # said until the work says what it does
        self.enabled = enabled and self._stream.isatty()
        self._delay = delay
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._what, self._done = "", 0
        self._total: int | None = None
        self._started = time.monotonic()
        self._drawn = 0  # cells of the line last drawn
        utf8 = (getattr(self._stream, "encoding", None) or "").lower().replace("-", "") == "utf8"
        self._fill, self._empty = ("━", "─") if utf8 else ("#", "-")
        self._spin = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏" if utf8 else "|/-\\"

    @property
    def progress(self) -> Progress | None:
        """What the core is told its progress by: None when nothing is drawn,
        so that work nobody watches does not count for a bar (a prune spreads
        only then, see prune.spread)."""
        return self.update if self.enabled else None

    def update(self, what: str, done: int, total: int | None) -> None:
        with self._lock:
            if what != self._what:
                self._what, self._done, self._total = what, 0, None
            self._done = max(self._done, done)
            if self._total is None:
                self._total = total

    def __enter__(self) -> Bar:
        self._started = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="agentkeep-bar", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._drawn:
            self._write("\r" + " " * self._drawn + "\r")
            self._drawn = 0

    def _run(self) -> None:
        if self._stop.wait(self._delay):
            return
        while True:
            # One cell short of the width: a line that fills the last
            # column makes some terminals wrap before the \r comes back.
            line = self.frame(_columns(self._stream) - 1)
            self._write("\r" + line + " " * max(0, self._drawn - len(line)))
            self._drawn = len(line)
            if self._stop.wait(self.FRAMES):
                return

    def frame(self, width: int) -> str:
        """The line as it stands, in at most `width` cells."""
        with self._lock:
            what, done, total = self._what or self._first, self._done, self._total
        seconds = int(time.monotonic() - self._started)
        clock = f"{seconds // 60}:{seconds % 60:02d}"
        if total is None or done > total:
            count = f"{done:,} sessions" if done else ""
            if total is None:
                tick = int((time.monotonic() - self._started) / self.FRAMES)
                mark = self._spin[tick % len(self._spin)]
            else:
                mark = self._fill * 20
            parts = [what, mark, count, clock]
        else:
            count = f"{done:,}/{total:,}"
            room = width - len(what) - len(count) - len(clock) - 3
            length = max(0, min(40, room))
            filled = length if total == 0 else length * done // total
            parts = [what, self._fill * filled + self._empty * (length - filled), count, clock]
        return " ".join(p for p in parts if p)[:width]

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # a terminal gone (closed, hung up): nothing to draw on
            self._stop.set()
