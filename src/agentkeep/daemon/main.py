"""`agentkeep serve`: the per-user daemon lock, then the context (a bad
config is recorded, never fatal), the socket, the watches, the index brought
up to date, and only then connections accepted and READY=1. Signals only
write a byte to a wake-up socket; the main thread reloads on SIGHUP and on
SIGTERM/SIGINT stops within STOP_DEADLINE, removing the socket file.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import sys
import threading
import time
from contextlib import suppress
from functools import partial
from typing import Any

import structlog

from agentkeep import leases, watchplan
from agentkeep.core.context import Context
from agentkeep.core.status import status_fields
from agentkeep.daemon import answers, memory, schedule
from agentkeep.daemon.changes import Changes
from agentkeep.daemon.notify import Notifier
from agentkeep.daemon.schedule import Jobs, Schedule
from agentkeep.daemon.server import AlreadyServing, Server, ServerError
from agentkeep.daemon.watch import Watcher
from agentkeep.daemon.work import Work
from agentkeep.model import rfc3339
from agentkeep.paths import Env, UnsafeDirectory, private_state_dir
from agentkeep.service import second_daemon_exit

log = structlog.get_logger("agentkeep.daemon")

STOP_DEADLINE = 4.5
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Written to the main loop's wake-up socket, beside the signal numbers the
# interpreter writes there (no signal is 0): the status line may have changed.
_CHANGED = 0


def serve(env: Env) -> int:
    """Run the daemon in the foreground until SIGTERM or SIGINT; the exit code."""
    memory.use_system_malloc()
    return Daemon(env).run()


class Daemon:
    """One user's daemon: its context, socket, watches and schedule."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.notifier = Notifier(env.environ)
        self.started = time.monotonic()
        self.ctx: Context | None = None
        self.server: Server | None = None
        self.watcher: Watcher | None = None
        self.schedule: Schedule | None = None
        self.ready = threading.Event()
        # The main loop's wake-up socket (signals and _CHANGED), while it runs.
        self._wake: socket.socket | None = None
        self.changes: Changes = Changes(on_bump=self._poke)
        self.work = Work(self.changes, self._reread, self._poke, self._trash_soon)
        self._fingerprint: dict[str, Any] = {}
        # Start-up (on its own thread) and stop must not cross: a stop during
        # start-up keeps the server and the scheduler from starting at all.
        self._lifecycle = threading.Lock()
        self._stopping = False
        # A second daemon the service started exits with the status its unit
        # lists in RestartPreventExitStatus= (service.RUN_BY_SERVICE).
        self._refused_exit = 1

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT; the exit code."""
        wake_r, wake_w = socket.socketpair()
        for end in (wake_r, wake_w):
            end.setblocking(False)
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        self._wake = wake_w
        old_handlers = {s: signal.signal(s, _note) for s in (*_STOP_SIGNALS, signal.SIGHUP)}
        lock_fd = None
        try:
            lock_fd = self._single_instance()
            if lock_fd is None:
                return self._refused_exit
            try:
                started = self._start()
            except Exception:
                log.exception("start-up failed")
                started = False
            if not started:
                self._stop()  # whatever did start (the socket) is taken down again
                return self._refused_exit
            self._loop(wake_r)
            return self._stop()
        finally:
            self._wake = None
            signal.set_wakeup_fd(old_wakeup)
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
            wake_r.close()
            wake_w.close()
            if lock_fd is not None:
                os.close(lock_fd)

    def _single_instance(self) -> int | None:
        """The daemon lock, held for the daemon's life; None (after saying
        who has it) when another daemon of this user holds it."""
        path = self.env.state_dir / "daemon.lock"
        try:
            private_state_dir(self.env)
        except UnsafeDirectory as exc:
            log.error("refusing the state dir; not starting", error=str(exc))
            return None
        try:
            fd = leases.open_lock_file(path, create_dirs=False, writable=True)
        except (OSError, leases.LeaseError) as exc:
            log.error("cannot take the daemon lock", lock=str(path), error=str(exc))
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            self._refused_exit = second_daemon_exit(self.env)
            log.error(
                "another agentkeep daemon is already running for this user; not starting a second",
                pid=other,
                lock=str(path),
                socket=str(self.env.socket_path),
            )
            return None
        os.ftruncate(fd, 0)
        try:
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:  # a full disk: the lock holds, without its pid
            log.warning("the daemon lock names no pid", lock=str(path), error=str(exc))
        return fd

    def _start(self) -> bool:
        try:
            self.ctx = ctx = Context.open(self.env)
        except Exception:
            log.exception("cannot open the index")
            return False
        self.work.ctx = ctx
        if ctx.config_error:
            log.error("config invalid: serving, but pruning nothing", error=ctx.config_error)
        self._fingerprint = ctx.fingerprint()
        self.server = Server(self.env.socket_path, partial(answers.handle, self), self.env.uid)
        try:
            self.server.bind()
        except AlreadyServing as exc:
            self._refused_exit = second_daemon_exit(self.env)
            log.error(f"{exc}; not starting a second daemon")
            return False
        except ServerError as exc:
            log.error("cannot serve the socket", error=str(exc))
            return False
        self.notifier.status("starting: watching and indexing")
        environ = self.env.environ
        self.watcher = Watcher(
            lambda: ctx.adapters,
            self.work.refresh,
            on_flood=self.work.after_a_flood,
            budget=lambda: watchplan.budget_for(environ),
        )
        self.work.watcher = self.watcher
        self.watcher.start()
        self.schedule = Schedule(
            Jobs(self.work.prune, self.work.reconcile, self.work.poll, self.work.expire_trash),
            prune_interval=ctx.config.prune_interval,
            first_prune_delay=schedule.first_prune_delay(self.env.environ),
        )
        threading.Thread(target=self._warm_up, name="agentkeep-startup", daemon=True).start()
        return True

    def _warm_up(self) -> None:
        """Bring the index up to date, then serve (clients wait in the
        backlog meanwhile rather than see a half-built index)."""
        assert self.ctx is not None and self.server is not None and self.schedule is not None
        started = time.monotonic()
        try:
            touched = self.work.at_start()
            log.info(
                "index up to date", relisted=touched, seconds=round(time.monotonic() - started, 3)
            )
        except Exception:
            log.exception("start-up reconcile failed; the periodic one will retry")
        self.ctx.index.close()  # this thread's (see answers._answered)
        memory.give_back()
        with self._lifecycle:
            if self._stopping:
                return  # told to stop while indexing: never start serving
            # The clock first: the first answer already names the next prune.
            self.schedule.start()
            self.server.start()
            self.ready.set()
        self.notifier.ready(self._status_line())
        log.info("serving", socket=str(self.env.socket_path), pid=os.getpid())

    def _loop(self, wake: socket.socket) -> None:
        """Wait for a signal, a status line to send, or the service
        watchdog's next ping; nothing else wakes this thread."""
        ping_every = self.notifier.watchdog_interval()
        last_ping = time.monotonic()
        while True:
            timeout = None
            if ping_every is not None:
                timeout = max(0.0, last_ping + ping_every - time.monotonic())
            readable, _, _ = select.select([wake], [], [], timeout)
            woken = _drain(wake) if readable else []
            for signum in woken:
                if signum in _STOP_SIGNALS:
                    log.info("stopping", signal=signal.Signals(signum).name)
                    return
                if signum == signal.SIGHUP:
                    self.reload("SIGHUP")
            if ping_every is not None and time.monotonic() - last_ping >= ping_every:
                self.notifier.ping()
                last_ping = time.monotonic()
                if self.schedule is not None:
                    self.schedule.tick()
            if _CHANGED in woken and self.ready.is_set():
                self.notifier.status(self._status_line())

    def _stop(self) -> int:
        """Stop cleanly within STOP_DEADLINE; the exit code."""
        deadline = time.monotonic() + STOP_DEADLINE
        with self._lifecycle:
            self._stopping = True
        self.notifier.stopping()
        self.changes.close()
        # A prune in flight (scheduled or asked over the socket) finishes the
        # session it is removing and leaves the rest for the next run.
        from agentkeep.prune.act import STOP  # here: serving alone never imports the act

        STOP.set()
        if self.server is not None:
            self.server.close()
        if self.schedule is not None:
            self.schedule.shutdown()
        if self.watcher is not None:
            self.watcher.stop()
        while self.work.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.work.busy:
            # Whatever is still running cannot be waited for; the prune
            # journal finishes an interrupted removal on the next run.
            log.warning(
                "work still running at the stop deadline; exiting anyway", busy=self.work.busy
            )
            _flush()
            os._exit(0)
        if self.ctx is not None:
            self.ctx.index.close()
        log.info("stopped")
        return 0

    def _poke(self) -> None:
        """Have the main loop send the status line again."""
        wake = self._wake
        if wake is None:
            return
        try:
            wake.send(bytes([_CHANGED]))
        except OSError:
            pass  # full (a wake-up is queued already), or closed as the daemon stops

    def _trash_soon(self) -> None:
        """The trash job now, off its interval (Work.after_removal)."""
        if self.schedule is not None:
            self.schedule.soon(schedule.TRASH)

    def reload(self, why: str) -> dict[str, Any]:
        """Read the config again (SIGHUP, the `reload` method); the status."""
        assert self.ctx is not None
        self._reread()
        log.info("config reloaded", why=why, ok=self.ctx.config_error is None)
        return self.status()

    def _reread(self) -> None:
        """Read the config again; the prune interval and the watches follow it."""
        assert self.ctx is not None
        try:
            self.ctx.reload()
        except Exception:
            log.exception("reload failed")
        if self.schedule is not None:
            self.schedule.set_prune_interval(self.ctx.config.prune_interval)
        fingerprint = self.ctx.fingerprint()
        if fingerprint != self._fingerprint:
            self._fingerprint = fingerprint
            if self.watcher is not None:
                self.watcher.resync(replan=True)
        self.notifier.status(self._status_line())

    def status(self) -> dict[str, Any]:
        """The `status` answer (CONTRACT: its fields in this order)."""
        assert self.ctx is not None and self.watcher is not None and self.schedule is not None
        fields = status_fields(self.ctx)
        next_prune = self.schedule.next_prune() if self.ctx.prunes_on_schedule() else None
        doc = {
            "pid": os.getpid(),
            "version": fields["version"],
            "uptime_s": int(time.monotonic() - self.started),
            "sessions": fields["sessions"],
            "watch": self.watcher.status(),
            "config": fields["config"],
            "last_prune": fields["last_prune"],
            "next_prune": rfc3339(next_prune.timestamp()) if next_prune else None,
            "paused": fields["paused"],
            "compaction_waiting": fields["compaction_waiting"],
        }
        if "unreadable" in fields:
            doc["unreadable"] = fields["unreadable"]
        return doc

    def _status_line(self) -> str:
        try:
            doc = self.status()
        except Exception as exc:
            return f"status unavailable: {exc}"
        parts = [f"{doc['sessions']} sessions", f"watch {doc['watch']['mode']}"]
        if not doc["config"]["ok"]:
            parts.append(f"config error: {doc['config']['error']}")
        elif doc["paused"]:
            parts.append(f"pruning paused: {doc['paused']}")
        elif doc["next_prune"]:
            parts.append(f"next prune {doc['next_prune']}")
        else:
            parts.append("no retention: nothing is pruned")
        return "; ".join(parts)


def _note(signum: int, frame: object) -> None:
    """Signals are handled in the main loop (the wake-up fd carries them)."""


def _drain(wake: socket.socket) -> list[int]:
    got = bytearray()
    with suppress(BlockingIOError, InterruptedError):
        while data := wake.recv(64):
            got += data
    return list(got)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
