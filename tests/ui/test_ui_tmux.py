"""`agentkeep ui` in a real terminal: tmux runs the real command on the demo
home (a tmux server of the test's own, on its own socket), keys go in with
send-keys, the screen comes back with capture-pane, and the purge it makes
is checked on the disk."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from uihome import BIG_OLD, Demo

from waiting import wait_until

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


class Tmux:
    def __init__(self, socket: Path, env: dict[str, str]) -> None:
        self.socket, self.env = socket, env

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "ui").stdout

    def keys(self, *keys: str) -> None:
        assert self("send-keys", "-t", "ui", *keys).returncode == 0

    def shows(self, text: str, timeout: float = 30) -> str:
        return wait_until(
            lambda: self.screen() if text in self.screen() else None,
            f"the screen to show {text!r}",
            timeout,
            setup=False,
        )


@pytest.fixture
def tmux(demo: Demo) -> Iterator[Tmux]:
    env = {**demo.fh.environ, "TERM": "xterm-256color"}
    t = Tmux(demo.fh.root / "tmux.sock", env)
    command = f"{sys.executable} -m agentkeep ui"
    started = t("new-session", "-d", "-s", "ui", "-x", "100", "-y", "30", command)
    assert started.returncode == 0, started.stderr
    yield t
    t("kill-server")


def test_purge_in_a_real_terminal(demo: Demo, tmux: Tmux) -> None:
    tmux.shows("reclaimable now")
    # The largest session is the first row; its detail shows once it is selected.
    tmux.keys("2")
    tmux.shows(f"claude {BIG_OLD}")
    tmux.keys("d")
    screen = tmux.shows("Purge claude 2a9d8c7b?")
    assert "to the trash" in screen
    transcript = demo.transcript(BIG_OLD, "/home/you/cli-tool")
    assert transcript.exists(), "SETUP INVALID: asking removed something"
    tmux.keys("y")
    wait_until(lambda: not transcript.exists(), "the transcript to leave", 30, setup=False)
    assert list(demo.trash.rglob(f"{BIG_OLD}.jsonl")), "the transcript is not in the trash"
    tmux.shows("purged 1 session")
    tmux.keys("q")
    try:
        wait_until(
            lambda: tmux("has-session", "-t", "ui").returncode != 0,
            "the app to quit",
            20,
            setup=False,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{tmux.screen()}") from None
