"""systemd's sd_notify protocol: READY=1, STATUS=, STOPPING=1 and the
service watchdog's WATCHDOG=1, to the datagram socket NOTIFY_SOCKET names
(a leading '@': the abstract namespace). Outside systemd every call does
nothing; a failed send is logged, never raised.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import structlog

log = structlog.get_logger("agentkeep.daemon.notify")


class Notifier:
    """Messages to the service manager named by NOTIFY_SOCKET, if any."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        name = environ.get("NOTIFY_SOCKET") or ""
        self.address = ("\0" + name[1:] if name.startswith("@") else name) or None
        self._last_status: str | None = None
        self._watchdog_usec: int | None = None
        # WATCHDOG_PID, when set, names the process the watchdog watches.
        if environ.get("WATCHDOG_PID", str(os.getpid())) == str(os.getpid()):
            usec = environ.get("WATCHDOG_USEC") or ""
            # isdecimal, not isdigit: int() refuses a superscript digit.
            self._watchdog_usec = int(usec) if usec.isdecimal() and int(usec) > 0 else None

    @property
    def enabled(self) -> bool:
        """Whether a service manager listens."""
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
        """READY=1, with the status line."""
        self._last_status = status
        self.send("READY=1", f"STATUS={status}")

    def status(self, text: str) -> None:
        """Send STATUS= when it changed since the last one sent."""
        if text != self._last_status:
            self._last_status = text
            self.send(f"STATUS={text}")

    def stopping(self) -> None:
        """STOPPING=1."""
        self.send("STOPPING=1", "STATUS=stopping")

    def watchdog_interval(self) -> float | None:
        """How often to send WATCHDOG=1 (half the timeout, as systemd advises),
        or None when no watchdog is asked for."""
        if self.address is None or self._watchdog_usec is None:
            return None
        return self._watchdog_usec / 2e6

    def ping(self) -> None:
        """WATCHDOG=1, when a watchdog is asked for."""
        if self.watchdog_interval() is not None:
            self.send("WATCHDOG=1")
