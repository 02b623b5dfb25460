"""The daemon's clock: prune, reconcile, polling and trash jobs.

apscheduler runs each job one instance at a time, late runs coalesced into
one and never dropped: a laptop that slept through three prune intervals
prunes once when it wakes. Its timer is monotonic and stands still in a
suspend, so the poll job waking it every POLL_INTERVAL (and `tick()` at each
service watchdog ping) bounds how late an overdue job runs. These are the
only timers of an idle daemon.

The first prune runs `first_prune_delay` after the daemon is ready, then
every prune_interval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

log = structlog.get_logger("agentkeep.daemon.schedule")

FIRST_PRUNE_DELAY = 60.0
RECONCILE_INTERVAL = 30 * 60.0
# How often unwatched roots are reconciled; how late a job runs after a suspend.
POLL_INTERVAL = 60.0
TRASH_INTERVAL = 3600.0

PRUNE, RECONCILE, POLL, TRASH = "prune", "reconcile", "poll", "expire_trash"


@dataclass(frozen=True)
class Jobs:
    """What each job does; each is called with no arguments on a pool thread."""

    prune: Callable[[], None]
    reconcile: Callable[[], None]
    poll: Callable[[], None]
    expire_trash: Callable[[], None]


def first_prune_delay(environ: Mapping[str, str]) -> float:
    """AGENTKEEP_FIRST_PRUNE_DELAY (seconds, for tests), else 60."""
    raw = environ.get("AGENTKEEP_FIRST_PRUNE_DELAY")
    if raw:
        with suppress(ValueError):
            if 0 <= (value := float(raw)) < 86400 * 365:
                return value
        log.warning("ignoring a bad AGENTKEEP_FIRST_PRUNE_DELAY", value=raw)
    return FIRST_PRUNE_DELAY


class Schedule:
    """The jobs on apscheduler's background scheduler."""

    def __init__(self, jobs: Jobs, *, prune_interval: float, first_prune_delay: float) -> None:
        self._scheduler = BackgroundScheduler(
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        self._jobs = jobs
        self._prune_interval = prune_interval
        self._first_prune_delay = first_prune_delay

    def start(self) -> None:
        """Start the clock; the first prune is first_prune_delay from now."""
        first, jobs = self._first_prune_delay, self._jobs
        self._add(PRUNE, jobs.prune, self._prune_interval, first)
        self._add(RECONCILE, jobs.reconcile, RECONCILE_INTERVAL, RECONCILE_INTERVAL)
        self._add(POLL, jobs.poll, POLL_INTERVAL, POLL_INTERVAL)
        self._add(TRASH, jobs.expire_trash, TRASH_INTERVAL, first)
        self._scheduler.start()

    def _add(self, job_id: str, func: Callable[[], None], interval: float, first: float) -> None:
        start = datetime.now(UTC) + timedelta(seconds=first)
        # next_run_time is the first run: a start_date already past (a delay
        # of 0) would be rounded up to a whole interval later.
        self._scheduler.add_job(
            func,
            IntervalTrigger(seconds=interval, start_date=start, timezone=UTC),
            id=job_id,
            name=job_id,
            next_run_time=start,
        )

    def set_prune_interval(self, seconds: float) -> None:
        """A reloaded prune_interval: the next prune comes no later than one
        new interval from now, then every new interval."""
        if seconds == self._prune_interval:
            return
        self._prune_interval = seconds
        job = self._scheduler.get_job(PRUNE)
        if job is None:
            return
        soonest = datetime.now(UTC) + timedelta(seconds=seconds)
        start = min(job.next_run_time, soonest) if job.next_run_time else soonest
        job.reschedule(IntervalTrigger(seconds=seconds, start_date=start, timezone=UTC))
        log.info("prune interval changed", seconds=seconds, next=start.isoformat())

    def soon(self, job_id: str) -> None:
        """Run a job now, off its interval (its turns after stay as they were)."""
        job = self._scheduler.get_job(job_id) if self._scheduler.running else None
        if job is not None:
            job.modify(next_run_time=datetime.now(UTC))
            self._scheduler.wakeup()

    def next_prune(self) -> datetime | None:
        """When the next prune runs (None: not scheduled)."""
        job = self._scheduler.get_job(PRUNE) if self._scheduler.running else None
        return job.next_run_time if job is not None else None

    def tick(self) -> None:
        """Look at the wall clock again (after a suspend, overdue jobs run now)."""
        if self._scheduler.running:
            self._scheduler.wakeup()

    def shutdown(self) -> None:
        """Stop starting jobs; a job already running is left to finish."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
