"""systemd's sd_notify protocol, in a few lines of Python.

When systemd starts the daemon as `Type=notify` it sets NOTIFY_SOCKET to an
AF_UNIX datagram socket (a leading '@' names one in the abstract namespace)
and waits for `READY=1`; `STATUS=` is what `systemctl status` shows; with
`WatchdogSec=` it also sets WATCHDOG_USEC and expects `WATCHDOG=1` more often
than that. Outside systemd every call is a no-op. A failed send is logged and
never raised: readiness reporting must not take the daemon down.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import structlog

log = structlog.get_logger("agentkeep.daemon.notify")


def _address(name: str) -> str:
    # An abstract socket has no file: its name starts with a NUL byte, which
    # systemd writes as '@' in the variable.
    return "\0" + name[1:] if name.startswith("@") else name


class Notifier:
    """Messages to the service manager named by NOTIFY_SOCKET, if any."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        name = environ.get("NOTIFY_SOCKET") or ""
        self.address: str | None = _address(name) if name else None
        self._watchdog_usec = _watchdog_usec(environ)
        self._last_status: str | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """Send one datagram of `KEY=value` lines; False when it could not go."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(self.address)
                sock.sendall("\n".join(lines).encode())
        except OSError as exc:
            log.warning("sd_notify failed", socket=self.address, error=str(exc))
            return False
        return True

    def ready(self, status: str) -> None:
        self._last_status = status
        self.send("READY=1", f"STATUS={status}")

    def status(self, text: str) -> None:
        """Send STATUS= when it changed since the last one sent."""
        if text != self._last_status:
            self._last_status = text
            self.send(f"STATUS={text}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping")

    def watchdog_interval(self) -> float | None:
        """How often to send WATCHDOG=1 (half the timeout, as systemd advises),
        or None when no watchdog is asked for."""
        if self.address is None or self._watchdog_usec is None:
            return None
        return self._watchdog_usec / 2e6

    def ping(self) -> None:
        if self.watchdog_interval() is not None:
            self.send("WATCHDOG=1")


def _watchdog_usec(environ: Mapping[str, str]) -> int | None:
    """WATCHDOG_USEC when it is meant for this process (WATCHDOG_PID, when set,
    names the process the watchdog watches)."""
    pid = environ.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(environ.get("WATCHDOG_USEC") or "")
    except ValueError:
        return None
    return usec if usec > 0 else None
