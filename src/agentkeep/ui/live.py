"""The daemon's `subscribe` stream, read on a thread of its own. It carries
no data, only "something changed": the app reads again through the same
calls as everything else, so there is one way to read. Without a daemon
nothing is watched and the refresh key reads again."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from textual.message import Message

from agentkeep import client
from agentkeep.errors import Failure
from agentkeep.paths import Env


class Changed(Message):
    """The daemon says something changed."""


class Live(Message):
    """The daemon's stream started (`on`), or ended (`why`)."""

    def __init__(self, on: bool, why: str = "") -> None:
        super().__init__()
        self.on = on
        self.why = why


class Subscription:
    """Posts Live(True) for the first line (the subscription stands), Changed
    for each line after it, and Live(False, why) once, when it stops: no
    daemon, a daemon that sees another view or has no `subscribe`, or one
    that stopped. `post` is called on the subscription's thread."""

    def __init__(
        self, env: Env, fingerprint: dict[str, Any], post: Callable[[Message], object]
    ) -> None:
        self._env = env
        self._fingerprint = fingerprint
        self._post = post
        self._sock: socket.socket | None = None
        self._stopped = threading.Event()
        threading.Thread(target=self._run, name="agentkeep-ui-live", daemon=True).start()

    def stop(self) -> None:
        """End the stream (from any thread); nothing is posted for it."""
        self._stopped.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _run(self) -> None:
        why = "the daemon stopped"
        try:
            self._sock = sock = client.connect(self._env)
        except client.NoDaemon as exc:
            self._end(str(exc))
            return
        try:
            with sock:
                if self._stopped.is_set():
                    return
                stream = client.results(sock, "subscribe", {"env": self._fingerprint})
                for n, _ in enumerate(stream):
                    self._post(Live(True) if n == 0 else Changed())
        except client.NoDaemon as exc:
            why = str(exc)
        except Failure as exc:
            why = exc.message
        self._end(why)

    def _end(self, why: str) -> None:
        if not self._stopped.is_set():
            self._post(Live(False, why))
