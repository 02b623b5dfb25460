"""The daemon's unix socket: its folder, its file, and who may connect.

Only the user's own processes are served: the peer's uid comes from the
kernel, never from the request, and a peer whose uid cannot be read is
refused. Each connection gets its own thread (connection.py). A connection
the budgets (limits.py) close or turn away is told so with error BUSY:
nothing it had not been answered for was done.
"""

from __future__ import annotations

import errno
import itertools
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from agentkeep.daemon.connection import Connection, Handler
from agentkeep.daemon.limits import Budgets, Seat
from agentkeep.errors import Busy, Failed, Failure, error_message
from agentkeep.paths import UnsafeDirectory, ensure_private_dir
from agentkeep.protocol import encode, peer_credentials

log = structlog.get_logger("agentkeep.daemon.server")

# A burst of clients waits for accept() instead of being told EAGAIN.
BACKLOG = socket.SOMAXCONN

# Test seam: the peer uid instead of the kernel's. None in production.
_peer_uid_override: Callable[[socket.socket], int] | None = None


class ServerError(Exception):
    """The socket cannot be served (unsafe folder, path taken by a non-socket)."""


class AlreadyServing(ServerError):
    """Another daemon answers on the socket."""


class Server:
    """A unix socket server at `path` for the user `uid`."""

    def __init__(
        self,
        path: Path,
        handler: Handler,
        uid: int | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        self.path = path
        self.handler = handler
        self.uid = os.getuid() if uid is None else uid
        self.budgets = Budgets() if budgets is None else budgets
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        # Written by close(), and never read: the accept loop ends.
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._count = itertools.count(1)

    def bind(self) -> None:
        """Take the socket: a safe folder, no live daemon, a stale file replaced."""
        folder = self.path.parent
        try:
            # A folder others can write to is refused, never chmodded: whoever
            # can write there can swap the socket under the clients.
            ensure_private_dir(folder, self.uid)
        except UnsafeDirectory as exc:
            raise ServerError(f"refusing the socket's folder: {exc}") from exc
        except OSError as exc:
            raise ServerError(f"cannot create the socket's folder {folder}: {exc}") from exc
        self._clear_stale()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self.path))
            os.chmod(self.path, 0o600)
            listener.listen(BACKLOG)
        except OSError as exc:
            listener.close()
            raise ServerError(f"cannot listen on {self.path}: {exc}") from exc
        st = os.stat(self.path)
        self._inode = (st.st_dev, st.st_ino)
        listener.setblocking(False)
        self._listener = listener

    def _clear_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ServerError(f"{self.path} exists and is not a socket; not replacing it")
        if _answers(self.path):
            raise AlreadyServing(f"another agentkeep daemon is already serving {self.path}")
        # Nobody accepts on it: a crashed daemon's socket. The folder is ours
        # and private, so nobody can swap it between this check and the unlink.
        log.info("replacing a stale socket", path=str(self.path))
        os.unlink(self.path)

    def start(self) -> None:
        """Accept connections on a background thread (after bind())."""
        self._thread = threading.Thread(
            target=self._accept_loop, name="agentkeep-accept", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop accepting and remove the socket file, if it is still ours."""
        if self._wake_w < 0:
            return  # already closed
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while True:
            waiting: list[socket.socket | int] = [self._listener, self._wake_r]
            readable, _, _ = select.select(waiting, [], [])
            if self._wake_r in readable:
                return
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                log.warning("accept failed", error=str(exc), **self.budgets.counts)
                time.sleep(0.1)  # EMFILE and the like: do not spin
                continue
            sock.setblocking(True)
            threading.Thread(
                target=self._connection,
                args=(sock, next(self._count)),
                name="agentkeep-conn",
                daemon=True,
            ).start()

    def _connection(self, sock: socket.socket, number: int) -> None:
        with sock:
            conn = self._admit(sock, number)
            if conn is None:
                return
            if not self.budgets.join(conn.seat):
                log.warning("connection refused: every slot is mid-request", conn=number)
                why = f"too many connections ({self.budgets.slots}, each mid-request)"
                _tell(sock, Busy(f"{why}; try again"))
                return
            try:
                conn.run()
            finally:
                self.budgets.leave(conn.seat)
            if conn.seat.closed is not None:
                log.info("connection closed", conn=number, pid=conn.pid, why=conn.seat.closed)
                _tell(sock, Busy(f"{conn.seat.closed}; try again"))

    def _admit(self, sock: socket.socket, number: int) -> Connection | None:
        """The connection, or None when its peer is another user (or unknown)."""
        try:
            pid, uid = peer_credentials(sock)
            if _peer_uid_override is not None:
                uid = _peer_uid_override(sock)
        except OSError as exc:
            log.warning("peer credentials unreadable; refused", conn=number, error=str(exc))
            _tell(sock, Failed(f"refused: peer credentials unreadable ({exc})"))
            return None
        if uid != self.uid:
            log.warning("connection from another user refused", conn=number, pid=pid, uid=uid)
            _tell(sock, Failed(f"refused: this daemon serves uid {self.uid}, not uid {uid}"))
            return None
        return Connection(number, pid, Seat(number, sock), self.budgets, self.handler)


def _tell(sock: socket.socket, error: Failure) -> None:
    """Tell a client why its connection ends, without waiting: a client
    that does not read is not waited for."""
    try:
        sock.send(encode(error_message(None, error)), socket.MSG_DONTWAIT)
    except OSError:
        pass


def _answers(path: Path, timeout: float = 2.0) -> bool:
    """True when something accepts connections on the unix socket at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return False
        except OSError as exc:
            # A full backlog (EAGAIN) means a live, busy daemon.
            return exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK) or isinstance(exc, TimeoutError)
    return True
