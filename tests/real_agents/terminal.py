"""An agent in a real terminal, for what it does only there (its own
delete, a session left open): a tmux server of its own whose one pane runs
the agent isolated, with the mock model beside it (netns_run.py), as
isolation.run does for a command without a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import isolation

from fakehome import FakeHome
from waiting import wait_until

SESSION = "agent"


@dataclass
class Terminal:
    socket: Path
    env: dict[str, str]
    log: Path

    @classmethod
    def start(
        cls,
        home: FakeHome,
        argv: list[str],
        *,
        cwd: Path,
        protocol: str,
        rules: list[dict[str, Any]],
        workdir: Path,
    ) -> Terminal:
        workdir.mkdir(parents=True, exist_ok=True)
        n = len(list(workdir.glob("tmux-*")))
        script, log = workdir / f"tui-{n}.rules.json", workdir / f"tui-{n}.log"
        script.write_text(json.dumps(rules))
        log.touch()
        env = dict(home.environ, TERM="xterm-256color", PYTHONPATH=str(isolation.HERE))
        netns = [sys.executable, str(isolation.HERE / "netns_run.py"), protocol, str(script)]
        command = [*isolation.unshare_prefix(), *netns, str(log), "--", *argv]
        terminal = cls(workdir / f"tmux-{n}", env, log)
        size = ["-x", "200", "-y", "50"]
        terminal.tmux("new-session", "-d", "-s", SESSION, *size, "-c", str(cwd), *command)
        return terminal

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", SESSION).stdout

    def write(self, text: str) -> None:
        """Type `text` (and no Enter)."""
        self.tmux("send-keys", "-t", SESSION, "-l", text)
        time.sleep(0.3)  # a TUI takes typed text before a key in its own time

    def type(self, text: str) -> None:
        """Type `text` and Enter."""
        self.write(text)
        self.keys("Enter")

    def keys(self, *keys: str) -> None:
        """Press keys by tmux's names (`Down`, `C-d`, `Escape`)."""
        for key in keys:
            self.tmux("send-keys", "-t", SESSION, key)
            time.sleep(0.3)

    def wait(self, text: str, timeout: float = 90, *, setup: bool = True) -> str:
        """The screen once it shows `text`; `setup` False: its absence is
        the failure under test, not a setup that did not arise."""
        what = f"{text!r} on the agent's screen"
        wait_until(lambda: text in self.screen(), what, timeout=timeout, setup=setup)
        return self.screen()

    def alive(self) -> bool:
        return self.tmux("has-session", "-t", SESSION).returncode == 0

    def wait_gone(self, timeout: float = 60) -> None:
        wait_until(lambda: not self.alive(), "the agent exiting", timeout=timeout)

    def kill(self) -> None:
        if self.alive():
            self.tmux("kill-server")
            wait_until(lambda: not self.alive(), "the terminal gone", timeout=30)
