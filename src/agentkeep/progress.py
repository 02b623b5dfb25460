"""Long work telling how far it got: what it does, how many done, out of how many.

The core's scan and prune call a `Progress` as they go (the CLI draws it,
the daemon passes none). A total is told once it is known (None until
then), from counts made before the work, so it may be off (render.Bar).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

# (what is being done, how many done, out of how many: None while unknown).
Progress = Callable[[str, int, int | None], None]

T = TypeVar("T")

# Between two reports of the same count, at least this long (seconds): a
# listing reports per session, and a terminal redraws a few times a second.
_EVERY = 0.05


def estimate(hint: int | None, indexed: int) -> int | None:
    """How many sessions of one agent a scan will find: the agent's own cheap
    count (`hint`), else the index's; None when the index holds none."""
    return hint if hint is not None else indexed or None


class Tally:
    """Sessions counted agent by agent toward a total known once every agent
    not finished has an estimate. An agent finishes when told (`finish`), or
    when its parts were all handed out and came back; then its count
    replaces its estimate."""

    def __init__(self, report: Progress | None, what: str, estimates: Mapping[str, int | None]):
        self._report = report
        self._what = what
        self._estimates = dict(estimates)
        self._done = dict.fromkeys(self._estimates, 0)
        self._handed = dict.fromkeys(self._estimates, 0)
        self._back = dict.fromkeys(self._estimates, 0)
        self._listed: set[str] = set()
        self._finished: set[str] = set()
        self._told = 0.0
        self._tell()  # what is being done, before anything is counted

    def parts(self, agent: str, parts: Iterable[T]) -> Iterator[T]:
        """`parts` of `agent`, counted as they are handed out."""
        for part in parts:
            self._handed[agent] += 1
            yield part
        self._listed.add(agent)
        self._check(agent)

    def add(self, agent: str, sessions: int) -> None:
        """`sessions` more of `agent` counted."""
        self._done[agent] += sessions
        now = time.monotonic()
        if now - self._told >= _EVERY:
            self._told = now
            self._tell()

    def part_done(self, agent: str) -> None:
        """A part of `agent` came back."""
        self._back[agent] += 1
        self._check(agent)

    def finish(self, agent: str | None = None) -> None:
        """`agent` is done (None: every agent is)."""
        self._finished.update(self._estimates if agent is None else [agent])
        self._tell()

    def total(self) -> int | None:
        """The total, once known."""
        total = 0
        for agent, guess in self._estimates.items():
            if agent in self._finished:
                total += self._done[agent]
            elif guess is None:
                return None
            else:
                total += guess
        return total

    def _check(self, agent: str) -> None:
        if agent in self._listed and self._back[agent] == self._handed[agent]:
            self._finished.add(agent)
            self._tell()

    def _tell(self) -> None:
        if self._report is not None:
            self._report(self._what, sum(self._done.values()), self.total())
