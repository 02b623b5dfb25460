"""`agentkeep serve`: wire the index, watcher, scheduler and socket together.

Start-up takes the per-user daemon lock (a second daemon exits 1 naming the
first), opens the context (a bad config is recorded, never fatal), claims
the socket, starts watching, brings the index up to date, and only then
accepts connections and tells systemd READY=1. Signals only write a byte to
a wake-up socket; the main thread does the work: SIGHUP reloads, SIGTERM and
SIGINT stop within STOP_DEADLINE (a prune in flight finishes the session it
is removing and leaves the rest) and remove the socket file.

`subscribe` (for `agentkeep ui`) answers `{"changes": N}` at once and again
each time what clients are shown may have changed (see Changes), one line per
change, on the same request id, until the client closes the connection.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import structlog

from agentkeep import core, leases, processes, prune, watchplan
from agentkeep.daemon import apart, memory, schedule
from agentkeep.daemon.notify import Notifier
from agentkeep.daemon.schedule import Jobs, Schedule
from agentkeep.daemon.server import (
    AlreadyServing,
    BadRequest,
    Connection,
    RpcError,
    Server,
    ServerError,
    Stream,
)
from agentkeep.daemon.watch import Watcher
from agentkeep.errors import Failure, state_file_failure
from agentkeep.jsontext import JSONText
from agentkeep.methods import METHODS
from agentkeep.model import rfc3339
from agentkeep.paths import Env, UnsafeDirectory, private_state_dir
from agentkeep.protocol import ENV_MISMATCH, INVALID_PARAMS, METHOD_NOT_FOUND, SERVER_ERROR
from agentkeep.service import second_daemon_exit

log = structlog.get_logger("agentkeep.daemon")

STOP_DEADLINE = 4.5
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Written to the main loop's wake-up socket, beside the signal numbers the
# interpreter writes there (no signal is 0): the status line may have changed.
_CHANGED = 0
# What allocates in proportion to the sessions: its memory is given back
# to the system once it is answered (see memory.py).
_HEAVY = frozenset({"ls", "du", "scan", "prune", "purge"})


class Changes:
    """How many times what the daemon's clients are shown may have changed:
    the index (a watch event, a reconcile that listed something again, a
    scan), pins, leases it handed out, the trash, a prune's record. Counted,
    never queued: a subscriber that fell behind gets one line with the
    latest count. Processes and leases taken without the daemon (flock) are
    not seen here; a client looks again for those."""

    # How often a waiting stream yields None, so the server sees a client
    # that went away while nothing changed.
    TICK = 5.0

    def __init__(self, on_bump: Callable[[], None] = lambda: None) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._closed = False
        self._on_bump = on_bump

    def bump(self) -> None:
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
        with self._cond:
            seen = self._count
        yield {"changes": seen}
        while True:
            with self._cond:
                self._cond.wait_for(partial(self._moved_on, seen), self.TICK)
                if self._closed:
                    return
                now = self._count
            if now == seen:
                yield None
            else:
                seen = now
                yield {"changes": now}


def serve(env: Env) -> int:
    """Run the daemon in the foreground until SIGTERM or SIGINT; the exit code."""
    memory.use_system_malloc()
    return Daemon(env).run()


class Daemon:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.notifier = Notifier(env.environ)
        self.started = time.monotonic()
        self.ctx: core.Context | None = None
        self.server: Server | None = None
        self.watcher: Watcher | None = None
        self.schedule: Schedule | None = None
        self.ready = threading.Event()
        # The main loop's wake-up socket (signals and _CHANGED), while it runs.
        self._wake: socket.socket | None = None
        self.changes = Changes(on_bump=self._poke)
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._reconcile_lock = threading.Lock()
        self._fingerprint: dict[str, Any] = {}
        # Start-up (on its own thread) and stop must not cross: a stop during
        # start-up keeps the server and the scheduler from starting at all.
        self._lifecycle = threading.Lock()
        self._stopping = False
        # What a start-up that does not get as far as serving exits with: 1,
        # or for a second daemon the service started, the status its unit
        # lists in RestartPreventExitStatus= (service.RUN_BY_SERVICE).
        self._refused_exit = 1

    # -- life -------------------------------------------------------------
    def run(self) -> int:
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
        """The daemon lock in the state dir, held for the daemon's life; None
        (after saying who has it) when another daemon of this user holds it."""
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
            self.ctx = ctx = core.Context.open(self.env)
        except Exception:
            log.exception("cannot open the index")
            return False
        if ctx.config_error:
            log.error("config invalid: serving, but pruning nothing", error=ctx.config_error)
        self._fingerprint = ctx.fingerprint()
        self.server = Server(self.env.socket_path, self._handle, self.env.uid)
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
            self._refresh,
            on_flood=self._after_a_flood,
            budget=lambda: watchplan.budget_for(environ),
        )
        self.watcher.start()
        self.schedule = Schedule(
            Jobs(self._prune_job, self._reconcile_job, self._poll_job, self._trash_job),
            prune_interval=ctx.config.prune_interval,
            first_prune_delay=schedule.first_prune_delay(self.env.environ),
        )
        threading.Thread(target=self._warm_up, name="agentkeep-startup", daemon=True).start()
        return True

    def _warm_up(self) -> None:
        """Bring the index up to date, then serve (clients connecting before
        this wait in the backlog rather than see a half-built index)."""
        assert self.ctx is not None and self.server is not None and self.schedule is not None
        started = time.monotonic()
        try:
            with self._reconcile_lock:
                touched = core.reconcile(self.ctx)
            log.info(
                "index up to date", relisted=touched, seconds=round(time.monotonic() - started, 3)
            )
        except Exception:
            log.exception("start-up reconcile failed; the periodic one will retry")
        _close_thread_index(self.ctx)
        _give_back(self.ctx)
        with self._lifecycle:
            if self._stopping:
                return  # told to stop while indexing: never start serving
            # The clock first: the first answer a client gets already names
            # the next prune (a status between the two said none).
            self.schedule.start()
            self.server.start()
            self.ready.set()
        self.notifier.ready(self._status_line())
        log.info("serving", socket=str(self.env.socket_path), pid=os.getpid())

    def _loop(self, wake: socket.socket) -> None:
        """Wait for a signal, a change to show in the status line, or the
        service watchdog's next ping; nothing else wakes this thread (an
        idle daemon costs no CPU: the schedule's own wake-ups are the
        scheduler's, see schedule.py)."""
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
                    self._reload("SIGHUP")
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
        prune.STOP.set()
        if self.server is not None:
            self.server.close()
        if self.schedule is not None:
            self.schedule.shutdown()
        if self.watcher is not None:
            self.watcher.stop()
        while self._busy and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._busy:
            # Whatever is still running cannot be waited for; the prune
            # journal finishes an interrupted removal on the next run.
            log.warning("work still running at the stop deadline; exiting anyway", busy=self._busy)
            _flush()
            os._exit(0)
        if self.ctx is not None:
            self.ctx.index.close()
        log.info("stopped")
        return 0

    @contextmanager
    def _working(self) -> Iterator[None]:
        with self._busy_lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._busy_lock:
                self._busy -= 1

    def _poke(self) -> None:
        """Have the main loop write the status line again (what it shows may
        have changed). A full wake-up buffer already holds a wake-up."""
        wake = self._wake
        if wake is None:
            return
        try:
            wake.send(bytes([_CHANGED]))
        except OSError:
            pass  # full, or closed as the daemon stops

    # -- the view ---------------------------------------------------------
    def _reload(self, why: str) -> dict[str, Any]:
        assert self.ctx is not None
        self._reread()
        log.info("config reloaded", why=why, ok=self.ctx.config_error is None)
        return self._status()

    def _reread(self) -> None:
        """Read the config again, and follow it."""
        assert self.ctx is not None
        try:
            self.ctx.reload()
        except Exception:
            log.exception("reload failed")
        self._config_changed()

    def _config_changed(self) -> None:
        """After any re-read of the config: the prune interval and the
        watched roots follow it."""
        assert self.ctx is not None
        if self.schedule is not None:
            self.schedule.set_prune_interval(self.ctx.config.prune_interval)
        fingerprint = self.ctx.fingerprint()
        if fingerprint != self._fingerprint:
            self._fingerprint = fingerprint
            if self.watcher is not None:
                self.watcher.resync(replan=True)
        self.notifier.status(self._status_line())

    def _refresh(self, agent: str, session_ids: list[str], vanished: set[str]) -> None:
        assert self.ctx is not None
        try:
            core.relist(self.ctx, agent, session_ids, vanished)
        finally:
            # Listing many sessions again (more than a few changed in the
            # directories they share) kept those directories' listings: at
            # 50,000 sessions some 45 MB, held until the next heavy request.
            _give_back(self.ctx)
            self.changes.bump()

    # -- jobs -------------------------------------------------------------
    def _prune_job(self) -> None:
        assert self.ctx is not None
        with self._working():
            # As a scheduled prune does (core.prune), and in the daemon too:
            # a prune that will not run starts no process.
            self._reread()
            done = None
            try:
                if self.ctx.prunes_on_schedule():
                    done = self._apart("prune", {"scheduled": True})
            except Failure as exc:
                log.error("scheduled prune refused", error=exc.message)
            except Exception:
                log.exception("scheduled prune failed")
            finally:
                self.changes.bump()
                _give_back(self.ctx)
        if done is None or done.answer is None:
            log.info("scheduled prune skipped (no retention, bad config, or another prune running)")
        else:
            log.info("scheduled prune done", **done.counts)
            self._after_removal("prune", {})

    def _apart(
        self, method: str, params: dict[str, Any], asked_by: int | None = None
    ) -> apart.Done:
        """A prune, purge, scan or reconcile in its own process, the
        watcher's events held meanwhile (Watcher.held): they are listed
        again after what it removed or wrote."""
        assert self.ctx is not None and self.watcher is not None
        with self.watcher.held():
            return apart.run(self.ctx, method, params, asked_by)

    def _reconcile_job(self) -> None:
        self._reconcile(replan=True)

    def _poll_job(self) -> None:
        if self.watcher is not None and self.watcher.polling:
            self._reconcile(replan=False)

    def _after_a_flood(self) -> None:
        """The watcher dropped events (a big prune, thousands of sessions
        gone at once): a reconcile finds what they said, waiting for one
        running (it may have looked before them), in a process of its own
        (so many changes relist or scan whole agents)."""
        self._reconcile(replan=True, flood=True)

    def _reconcile(self, *, replan: bool, flood: bool = False) -> None:
        """One running covers this turn, unless this one is a flood's."""
        assert self.ctx is not None and self.watcher is not None
        if not self._reconcile_lock.acquire(blocking=flood):
            return
        try:
            with self._working():
                if replan:
                    self.watcher.resync(replan=True)
                if flood:
                    answer = self._apart("reconcile", {}).answer
                    relisted = int(answer.text) if answer is not None else 0
                else:
                    relisted = core.reconcile(self.ctx)
                log.info("reconciled", relisted=relisted)
                if relisted:
                    self.changes.bump()
        except Exception:
            log.exception("reconcile failed")
        finally:
            self._reconcile_lock.release()
            _give_back(self.ctx)
            self._poke()  # a root may have fallen back to polling, or come back

    def _trash_job(self) -> None:
        """Hourly, and once a prune or purge has answered: the trash's
        expiry, then the compression of what waits (trash.packing)."""
        assert self.ctx is not None
        with self._working():
            try:
                core.expire_trash(self.ctx)
                done = core.compress_trash(self.ctx.state_dir)
                if done["compressed"]:
                    log.info("trash compressed", **done)
            except Exception:
                log.exception("trash expiry or compression failed")
            finally:
                self.changes.bump()

    def _after_removal(self, method: str, params: dict[str, Any]) -> None:
        """A prune or purge that removed: the trash job runs now (it packs
        what the run moved in), after the answer, in its own thread."""
        if method in ("prune", "purge") and not params.get("dry_run") and self.schedule:
            self.schedule.soon(schedule.TRASH)

    # -- status -----------------------------------------------------------
    def _status(self) -> dict[str, Any]:
        assert self.ctx is not None and self.watcher is not None and self.schedule is not None
        fields = core.status_fields(self.ctx)
        next_prune = self.schedule.next_prune() if self.ctx.prunes_on_schedule() else None
        return {
            "pid": os.getpid(),
            "version": fields["version"],
            "uptime_s": int(time.monotonic() - self.started),
            "sessions": fields["sessions"],
            "watch": self.watcher.status(),
            "config": fields["config"],
            "last_prune": fields["last_prune"],
            "next_prune": rfc3339(next_prune.timestamp()) if next_prune else None,
            "paused": fields["paused"],
        }

    def _status_line(self) -> str:
        try:
            doc = self._status()
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

    # -- requests ---------------------------------------------------------
    def _handle(self, conn: Connection, method: str, params: dict[str, Any]) -> object:
        assert self.ctx is not None
        if method not in METHODS:
            raise BadRequest(METHOD_NOT_FOUND, f"unknown method {method!r}")
        if "env" in params:
            self._check_env(params["env"])
        params = {k: v for k, v in params.items() if k != "env"}
        sent_later = False
        with self._working(), processes.asked_by(conn.pid):
            try:
                answer = self._call(conn, method, params)
                if isinstance(answer, JSONText):
                    # Its parts are read from this thread's index connection
                    # as they are sent: it is closed once they all went.
                    sent_later = True
                    return JSONText(_Then(answer.parts(), partial(_answered, self.ctx, method)))
                return answer
            except Failure as exc:
                data: dict[str, object] | None = (
                    {"report": exc.report} if exc.report is not None else None
                )
                raise RpcError(exc.code, exc.message, exit=exc.exit, data=data) from None
            except OSError as exc:
                failure = state_file_failure(exc)
                log.error("request failed", method=method, error=failure.message)
                raise RpcError(failure.code, failure.message, exit=failure.exit) from None
            finally:
                if not sent_later:
                    _answered(self.ctx, method)
                if METHODS[method].changes and params.get("dry_run") is not True:
                    self.changes.bump()

    def _call(self, conn: Connection, method: str, params: dict[str, Any]) -> object:
        unknown = sorted(set(params) - set(METHODS[method].params))
        if unknown:
            raise BadRequest(INVALID_PARAMS, f"unknown parameter(s): {', '.join(unknown)}")
        return ANSWERS[method](self, conn, params)

    def _check_env(self, theirs: object) -> None:
        """Answer only a client that resolved the same config, state dir and
        roots: anything else would be the daemon's view under the client's name."""
        assert self.ctx is not None
        ours = self.ctx.fingerprint()
        if theirs != ours:
            raise RpcError(
                ENV_MISMATCH,
                "the daemon sees another config file, state dir or agent roots",
                exit=1,
                data={"daemon": ours},
            )

    def _hold(self, conn: Connection, params: dict[str, Any]) -> dict[str, str]:
        assert self.ctx is not None
        agent, raw = params.get("agent"), params.get("id")
        if not isinstance(agent, str) or not isinstance(raw, str):
            raise BadRequest(INVALID_PARAMS, "hold needs agent and id (strings)")
        session_id = self.ctx.session_id(agent, raw)
        path = leases.lease_path(self.ctx.state_dir, agent, session_id)
        try:
            lease = leases.hold_shared(path, wait=False)
        except leases.LeaseHeld:
            raise RpcError(SERVER_ERROR, f"{agent} {session_id} is being removed", exit=4) from None
        except leases.LeaseError as exc:
            raise RpcError(SERVER_ERROR, f"cannot take the lease: {exc}", exit=1) from None
        token = secrets.token_urlsafe(16)
        # The lease belongs to the connection: it ends at release or when
        # the connection closes, whichever comes first.
        conn.keep(token, lease.release)
        log.info("lease taken", agent=agent, id=session_id, conn=conn.number, pid=conn.pid)
        return {"lease": token}

    def _release(self, conn: Connection, params: dict[str, Any]) -> dict[str, bool]:
        token = params.get("lease")
        if not isinstance(token, str) or not conn.release(token):
            raise BadRequest(INVALID_PARAMS, "no such lease on this connection")
        return {"released": True}


# What answers each method of the socket, given the daemon, the connection
# and the parameters (without `env`, checked before, and only those the
# method takes).
Answer = Callable[[Daemon, Connection, dict[str, Any]], object]


def _ctx(daemon: Daemon) -> core.Context:
    assert daemon.ctx is not None
    return daemon.ctx


def _answer_apart(d: Daemon, c: Connection, method: str, params: dict[str, Any]) -> JSONText | None:
    """The answer of work run in a process of its own (daemon.apart), sent
    as it is read back from the file it was written to: the daemon never
    holds a prune's tens of thousands of removals at once."""
    done = d._apart(method, params, c.pid)
    if done.answer is not None:
        log.info(f"{method} done", **done.counts)
        d._after_removal(method, params)
    return done.answer


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(INVALID_PARAMS, f"{name} must be a string")
    return value


def _opt_str(p: dict[str, Any], name: str) -> str | None:
    value = p.get(name)
    return None if value is None else _str(value, name)


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(INVALID_PARAMS, f"{name} must be true or false")
    return value


def _pin(daemon: Daemon, p: dict[str, Any], pinned: bool) -> object:
    return core.pin(_ctx(daemon), _str(p.get("agent"), "agent"), _str(p.get("id"), "id"), pinned)


def _answering(answers: dict[str, Answer]) -> dict[str, Answer]:
    """The dispatch, built from the one table of methods (methods.METHODS):
    an answer for every method there and for no other, or the daemon does
    not start (a method the CLI could ask that nothing answers)."""
    missing, extra = set(METHODS) - set(answers), set(answers) - set(METHODS)
    if missing or extra:
        raise RuntimeError(
            f"the daemon's answers do not match methods.METHODS: "
            f"unanswered {sorted(missing)}, unknown {sorted(extra)}"
        )
    return {name: answers[name] for name in METHODS}


ANSWERS: dict[str, Answer] = _answering(
    {
        "status": lambda d, c, p: d._status(),
        "ls": lambda d, c, p: core.ls_text(_ctx(d), _opt_str(p, "agent"), _opt_str(p, "idle_over")),
        "show": lambda d, c, p: core.show(
            _ctx(d),
            _str(p.get("agent"), "agent"),
            _str(p.get("id"), "id"),
            verdict=_bool(p.get("verdict", True), "verdict"),
        ),
        "du": lambda d, c, p: core.du(_ctx(d), _opt_str(p, "by") or "agent"),
        "prune": lambda d, c, p: _answer_apart(
            d,
            c,
            "prune",
            {
                "dry_run": _bool(p.get("dry_run", False), "dry_run"),
                "older_than": _opt_str(p, "older_than"),
                "agent": _opt_str(p, "agent"),
            },
        ),
        "purge": lambda d, c, p: _answer_apart(
            d,
            c,
            "purge",
            {
                "agent": _str(p.get("agent"), "agent"),
                "id": _str(p.get("id"), "id"),
                "dry_run": _bool(p.get("dry_run", False), "dry_run"),
                "cascade": _bool(p.get("cascade", False), "cascade"),
            },
        ),
        "hold": lambda d, c, p: d._hold(c, p),
        "release": lambda d, c, p: d._release(c, p),
        "pin": lambda d, c, p: _pin(d, p, True),
        "unpin": lambda d, c, p: _pin(d, p, False),
        "scan": lambda d, c, p: _answer_apart(d, c, "scan", {}),
        "reload": lambda d, c, p: d._reload("request"),
        "subscribe": lambda d, c, p: Stream(d.changes.stream()),
    }
)


def _answered(ctx: core.Context, method: str) -> None:
    """A request is answered: its thread's index connection closed, and
    what a heavy one kept and allocated given back."""
    _close_thread_index(ctx)
    if method in _HEAVY:
        _give_back(ctx)


def _give_back(ctx: core.Context) -> None:
    """After work in proportion to the sessions: per-session state lives in
    the index, not in the adapters' listings, and the memory goes back to
    the system (memory.py)."""
    for adapter in ctx.adapters.values():
        adapter.forget()
    memory.give_back()


def _close_thread_index(ctx: core.Context) -> None:
    """Close the calling thread's index connection; the next use on this
    thread opens another. Called when a request is answered (each socket
    connection has a thread of its own, ending with it) and after start-up.
    The index keeps one SQLite connection per thread, and in CPython 3.11 a
    sqlite3.Connection is in a reference cycle with its statement cache: one
    left to its thread's end lived on, page cache and all, until a full
    garbage collection. At 10,000 sessions 200 `show` requests piled up ~35 MB."""
    ctx.index.close()


class _Then:
    """`parts`, then `done()` once: when they all went, or when the send is
    given up (close(), called whether or not a part was read)."""

    def __init__(self, parts: Iterator[str], done: Callable[[], None]) -> None:
        self._parts = parts
        self._done: Callable[[], None] | None = done

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        try:
            return next(self._parts)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        done, self._done = self._done, None
        if done is not None:
            close = getattr(self._parts, "close", None)
            if close is not None:
                close()
            done()


def _note(signum: int, frame: object) -> None:
    """Signals are handled in the main loop (the wake-up fd carries them)."""


def _drain(wake: socket.socket) -> list[int]:
    signals: list[int] = []
    while True:
        try:
            data = wake.recv(64)
        except (BlockingIOError, InterruptedError):
            return signals
        if not data:
            return signals
        signals.extend(data)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
