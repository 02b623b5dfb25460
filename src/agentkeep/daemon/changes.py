"""What the daemon's clients are shown may have changed: counted for
`subscribe` (`agentkeep ui`), which answers `{"changes": N}` at once and
again each time the count moves, one line per change, on the same request
id, until the client closes the connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from functools import partial


class Changes:
    """How many times what the daemon's clients are shown may have changed
    (the index, pins, leases, the trash, a prune's record). Counted, never
    queued: a subscriber that fell behind gets one line, the latest count.
    Leases taken without the daemon are not seen; a client looks for those."""

    # How often a waiting stream yields None, so the server sees a client
    # that went away while nothing changed.
    TICK = 5.0

    def __init__(self, on_bump: Callable[[], None] = lambda: None) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._closed = False
        self._on_bump = on_bump

    def bump(self) -> None:
        """Something may have changed."""
        with self._cond:
            self._count += 1
            self._cond.notify_all()
        self._on_bump()

    def close(self) -> None:
        """The daemon stops: every stream ends."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _moved_on(self, seen: int) -> bool:
        return self._closed or self._count != seen

    def stream(self) -> Generator[dict[str, int] | None, None, None]:
        """The count now, then each time it moves (None every TICK between)."""
        with self._cond:
            seen = self._count
        yield {"changes": seen}
        while True:
            with self._cond:
                last = seen
                self._cond.wait_for(partial(self._moved_on, last), self.TICK)
                if self._closed:
                    return
                seen = self._count
            yield {"changes": seen} if seen != last else None
