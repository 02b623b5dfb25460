"""What a client may take from the daemon's socket, each bounded on its own so
that no kind of client can starve another.

- Slots: at most `slots` connections holding no lease. When all are taken, a
  newcomer gets the slot of the longest-idle one not mid-request (told why
  it was closed); with none such, the newcomer is told the daemon is busy.
- Leases: a connection's first lease takes it out of the slots and counts
  against the lease budget instead (one descriptor per lease and one per
  connection, out of RLIMIT_NOFILE). A lease lasts as long as its
  connection, so one holding a lease is never closed to make room; a hold
  past the budget is refused, nothing held is dropped.
- Unfinished lines: at most `unfinished` bytes of lines not yet ended over
  all connections. Past that, the connection holding the most is closed,
  never the one whose bytes pushed it past (its line may be about to end).

Every count lives in one Budgets object and changes under its lock.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

from agentkeep import descriptors

MAX_CONNECTIONS = 256
# Bytes of unfinished lines over all connections: eight 1 MiB lines at once.
MAX_UNFINISHED = 8 << 20
# Descriptors of a connection being answered (its socket, the index and its
# -wal and -shm), and the daemon's own.
FDS_PER_SLOT = 4
FDS_OF_THE_DAEMON = 128
# Leases, whatever the descriptor limit: each may be a connection's thread.
MAX_LEASES = 1024
MIN_LEASES = 16


class LeasesSpent(Exception):
    """The lease budget is spent; `limit` is its size."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"{limit} leases are held, the daemon's limit")
        self.limit = limit


@dataclass(eq=False)
class Seat:
    """One connection's share of the budgets. Its counts change only under
    the Budgets lock; `closed` (why the budgets closed it) is set once."""

    number: int
    sock: socket.socket
    last_seen: float = field(default_factory=time.monotonic)
    leases: int = 0
    busy: bool = False
    unfinished: int = 0
    in_slot: bool = False
    closed: str | None = None


class Budgets:
    """The module's limits unless given; the lease budget from RLIMIT_NOFILE
    (raised first, see fd_limit)."""

    def __init__(
        self, slots: int | None = None, leases: int | None = None, unfinished: int | None = None
    ) -> None:
        self.slots = MAX_CONNECTIONS if slots is None else slots
        self.leases = lease_budget(fd_limit(self.slots), self.slots) if leases is None else leases
        self.max_unfinished = MAX_UNFINISHED if unfinished is None else unfinished
        self._lock = threading.Lock()
        self._seats: dict[int, Seat] = {}
        self._in_slots = 0
        self._held = 0
        self._unfinished = 0

    def join(self, seat: Seat) -> bool:
        """Give `seat` a slot, closing the longest-idle connection in one
        when all are taken; False when every slot is mid-request."""
        with self._lock:
            victim = None
            if self._in_slots >= self.slots:
                victim = self._idlest()
                if victim is None:
                    return False
                # Its slot passes straight to the newcomer, none can take it first.
                victim.in_slot = False
                victim.closed = f"closed to make room: the longest idle of {self.slots}"
                self._in_slots -= 1
            seat.in_slot = True
            self._in_slots += 1
            self._seats[seat.number] = seat
        if victim is not None:
            _wake(victim)
        return True

    def _idlest(self) -> Seat | None:
        # Never a lease holder (no slot) nor one being answered (lost answer).
        idle = [s for s in self._seats.values() if s.in_slot and not s.busy and s.closed is None]
        return min(idle, key=lambda s: s.last_seen, default=None)

    def leave(self, seat: Seat) -> None:
        """The connection is gone (its leases closed before this)."""
        with self._lock:
            if self._seats.pop(seat.number, None) is None:
                return
            if seat.in_slot:
                self._in_slots -= 1
            self._held -= seat.leases
            self._unfinished -= seat.unfinished
            seat.in_slot, seat.leases, seat.unfinished = False, 0, 0

    def begin(self, seat: Seat) -> bool:
        """A request of `seat` is about to be answered; False when the
        budgets closed it first (the request is then not answered at all)."""
        with self._lock:
            if seat.closed is not None:
                return False
            seat.busy = True
            return True

    def end(self, seat: Seat) -> None:
        """The request of `seat` is answered."""
        with self._lock:
            seat.busy = False

    def take_lease(self, seat: Seat) -> None:
        """Count one more lease of `seat`; LeasesSpent when none is left."""
        with self._lock:
            if self._held >= self.leases:
                raise LeasesSpent(self.leases)
            self._held += 1
            seat.leases += 1
            if seat.in_slot:
                seat.in_slot = False
                self._in_slots -= 1

    def drop_lease(self, seat: Seat) -> None:
        """One lease of `seat` ended; with its last, it takes a slot again
        (over `slots` for a while, if need be: the next newcomer closes the
        idlest, so connections never number more than slots + leases)."""
        with self._lock:
            if seat.leases == 0:
                return
            self._held -= 1
            seat.leases -= 1
            if seat.leases == 0 and seat.closed is None and seat.number in self._seats:
                seat.in_slot = True
                self._in_slots += 1

    def unfinished(self, seat: Seat, nbytes: int) -> None:
        """`seat` now holds `nbytes` of a line not yet ended. Over the total,
        the others holding the most are closed, largest first, until it fits
        (alone `seat` cannot pass it: a line is at most 1 MiB)."""
        victims = []
        with self._lock:
            if seat.closed is not None or seat.number not in self._seats:
                return
            self._unfinished += nbytes - seat.unfinished
            seat.unfinished = nbytes
            while self._unfinished > self.max_unfinished:
                others = (s for s in self._seats.values() if s is not seat and s.unfinished)
                victim = max(others, key=lambda s: (s.unfinished, -s.last_seen), default=None)
                if victim is None:
                    break
                victim.closed = (
                    f"closed: unfinished lines over all connections passed "
                    f"{self.max_unfinished} bytes, and this one held the most "
                    f"({victim.unfinished} bytes)"
                )
                self._unfinished -= victim.unfinished
                victim.unfinished = 0
                victims.append(victim)
        for victim in victims:
            _wake(victim)

    @property
    def counts(self) -> dict[str, int]:
        """How much of each budget is taken (for the log and for tests)."""
        with self._lock:
            return {
                "connections": len(self._seats),
                "in_slots": self._in_slots,
                "leases": self._held,
                "unfinished": self._unfinished,
            }


def _wake(seat: Seat) -> None:
    """Make the connection's thread see end-of-file; it says why and goes.
    Only the reading side is shut, so it can still send that."""
    try:
        seat.sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass  # already gone


def lease_budget(nofile: int, slots: int = MAX_CONNECTIONS) -> int:
    """Leases that fit in `nofile` descriptors beside the slots' and the
    daemon's own: each lease is one, and its connection's socket one more."""
    spare = nofile - FDS_OF_THE_DAEMON - slots * FDS_PER_SLOT
    return max(MIN_LEASES, min(MAX_LEASES, spare // 2))


def fd_limit(slots: int = MAX_CONNECTIONS) -> int:
    """RLIMIT_NOFILE's soft limit, first raised to what the budgets can use.
    The daemon select()s only on descriptors it opens at start, far below
    1024."""
    return descriptors.allow(FDS_OF_THE_DAEMON + slots * FDS_PER_SLOT + 2 * MAX_LEASES)
