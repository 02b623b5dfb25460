"""Log lines: JSON on stderr when no person watches, key=value on a terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

PROGRAM = """
import logging, structlog
from agentkeep.logs import configure
configure()
structlog.get_logger("agentkeep.test").info("hello", k="v")
logging.getLogger("apscheduler.scheduler").info("routine chatter")
logging.getLogger("apscheduler.scheduler").warning("from the stdlib %s", "too")
try:
    1 / 0
except ZeroDivisionError:
    structlog.get_logger("agentkeep.test").exception("failed")
"""


def test_json_lines_when_stderr_is_not_a_terminal(fake_home) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=fake_home.environ,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [line["event"] for line in lines] == ["hello", "from the stdlib too", "failed"]
    assert lines[0]["k"] == "v" and lines[0]["level"] == "info"
    assert lines[0]["logger"] == "agentkeep.test" and lines[0]["timestamp"].endswith("Z")
    assert lines[1]["logger"] == "apscheduler.scheduler" and lines[1]["level"] == "warning"
    exc = lines[2]["exception"][0]
    assert exc["exc_type"] == "ZeroDivisionError" and "locals" not in exc["frames"][0]


def test_key_value_lines_on_a_terminal(fake_home) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM],
        env={**fake_home.environ, "NO_COLOR": "1"},
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(30) == 0
    text = out.decode(errors="replace")
    assert "hello" in text and "k=v" in text and "ZeroDivisionError" in text
    assert not any(line.startswith("{") for line in text.splitlines())
