"""The progress bar drawn on stderr while long work runs."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from agentkeep.progress import Progress
from agentkeep.render.table import terminal_columns

# Test seam: when True, every update draws its frame at once, in the thread
# that reports it, and no drawing thread runs, so that a test sees frames of
# work however fast it goes. False in production.
_frame_each_update = False


class Bar:
    """A progress line on stderr for long work, drawn only when stderr is a
    terminal, after `delay` seconds, and erased when the work is done.

    `update(what, done, total)` is the core's progress.Progress. What it
    draws never moves backwards: for each `what`, the first total it is told
    stands (a spinner until there is one), the count never goes down, and a
    count past the total shows the count alone under a full bar."""

    FRAMES = 0.1  # seconds between two drawings

    def __init__(
        self, what: str, stream: TextIO | None = None, *, enabled: bool = True, delay: float = 0.5
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._first = what  # said until the work says what it does
        self.enabled = enabled and self._stream.isatty()
        self._delay = delay
        self._lock = threading.Lock()
        self._drawing = threading.Lock()  # _frame_each_update: one frame at a time
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
        so that work nobody watches does not count for a bar."""
        return self.update if self.enabled else None

    def update(self, what: str, done: int, total: int | None) -> None:
        """`done` of `total` (None: not known yet) of the work `what`."""
        with self._lock:
            if what != self._what:
                self._what, self._done, self._total = what, 0, None
            self._done = max(self._done, done)
            if self._total is None:
                self._total = total
        if _frame_each_update and self.enabled:
            with self._drawing:
                self._draw()

    def __enter__(self) -> Bar:
        self._started = time.monotonic()
        if self.enabled and not _frame_each_update:
            self._thread = threading.Thread(target=self._run, name="agentkeep-bar", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
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
            self._draw()
            if self._stop.wait(self.FRAMES):
                return

    def _draw(self) -> None:
        # One cell short of the width: a line that fills the last column
        # makes some terminals wrap before the \r comes back.
        line = self.frame(terminal_columns(self._stream) - 1)
        self._write("\r" + line + " " * max(0, self._drawn - len(line)))
        self._drawn = len(line)

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
