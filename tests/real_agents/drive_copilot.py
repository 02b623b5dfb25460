"""Driving the real GitHub Copilot CLI against the mock model, offline.

`Copilot.setup(home, binary)` points Copilot at the mock server as a local
OpenAI-compatible provider (`COPILOT_PROVIDER_BASE_URL`, a dummy key,
`COPILOT_MODEL`, `COPILOT_OFFLINE=true`: no login, no telemetry, no
update), trusts the workspace (`COPILOT_ALLOW_ALL=true`) and shares one
unpacked package among the suite's homes (`COPILOT_PKG_CACHE_HOME`: Copilot
unpacks 235 MB of itself at its first start). A prompt runs as `copilot -p
TEXT --allow-all-tools --output-format json`, whose `result` line carries
the session's id; what exists only in the TUI (`/fork`, `/session delete`,
a session left open) is typed into a real terminal, a tmux of its own, in
the same network namespace as every other run (isolation).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import install
import isolation
import mockmodel
from driver import Driver
from terminal import Terminal

from fakehome import FakeHome
from waiting import wait_until

# Past the size Copilot reads at once: saved to $TMPDIR as a tool output.
BIG_OUTPUT = "seq 1 200000"
# What a crash is: the bash tool kills Copilot (the pid is in the name of the
# tool output it just wrote; `kill` itself is refused by its validator).
CRASH = (
    "python3 -c \"import glob,os; f=glob.glob(os.environ.get('TMPDIR','/tmp')"
    "+'/*-copilot-tool-output-*.txt')[0];"
    " os.kill(int(f.split('-copilot-tool-output-')[1].split('-')[0]), 9)\""
)
REFUSED = "No session, task, or name matched"


def say(prompt: str, text: str) -> list[dict[str, Any]]:
    return [{"when": prompt, "reply": [{"text": text}]}]


class Tui(Terminal):
    """Copilot in a terminal (terminal.py), typed into as it wants."""

    def type(self, text: str) -> None:
        self.write(text)
        # Enter only once the TUI shows what was typed (it takes keys in its own time).
        self.wait(text)
        self.keys("Enter")

    def exit(self) -> None:
        """`/exit` until Copilot (and its terminal) is gone: after `/fork` the
        first one only closes the fork's view and goes back to its parent."""
        for _ in range(3):
            self.wait("/ commands")
            self.type("/exit")
            try:
                wait_until(lambda: not self.alive(), "Copilot exiting", timeout=15, setup=False)
                return
            except AssertionError:
                continue
        wait_until(lambda: not self.alive(), "Copilot exiting", timeout=30)


@dataclass
class Copilot(Driver):
    AGENT = "copilot"
    PROTOCOL = "openai_chat"
    TERMINAL = Tui

    @classmethod
    def setup(cls, home: FakeHome, binary: Path) -> Copilot:
        package = install.cache_dir() / "copilot-package"
        package.mkdir(parents=True, exist_ok=True)
        home.environ.update(
            COPILOT_PROVIDER_BASE_URL=f"http://127.0.0.1:{mockmodel.PORT}/v1",
            COPILOT_PROVIDER_API_KEY="mock-key-not-a-key",
            COPILOT_MODEL="mock-model",
            COPILOT_OFFLINE="true",
            COPILOT_AUTO_UPDATE="false",
            COPILOT_ALLOW_ALL="true",
            COPILOT_PKG_CACHE_HOME=str(package),
        )
        return cls(home, binary, home.root / "model-logs")

    @property
    def root(self) -> Path:
        return Path(self.home.environ.get("COPILOT_HOME") or self.home.home / ".copilot")

    @property
    def state(self) -> Path:
        return self.root / "session-state"

    @property
    def tmp(self) -> Path:
        return Path(self.home.environ["TMPDIR"])

    def prompt_args(self, text: str, *args: str) -> list[str]:
        return ["-p", text, "--allow-all-tools", "--output-format", "json", *args]

    def session_id(self, result: isolation.Run) -> str:
        sid = result_id(result.stdout)
        assert sid is not None, result.stdout[-2000:]
        return sid

    # -- the sessions a conformance run makes --------------------------------
    def plain(self, cwd: Path, text: str) -> str:
        return self.session(cwd, text, rules=say(text, "Hello."))

    def tools(self, cwd: Path, text: str) -> str:
        """A file written, a row in the session's own database (the `sql`
        tool), and a shell command whose output is saved to $TMPDIR."""
        rules = [
            {"when": "TOOL RESULT bash", "reply": [{"text": "All done."}]},
            {"when": "TOOL RESULT sql", "reply": [bash(BIG_OUTPUT)]},
            {
                "when": "TOOL RESULT create",
                "reply": [
                    {
                        "tool": "sql",
                        "args": {
                            "description": "add a todo",
                            "query": "INSERT INTO todos (id, title) VALUES ('t1', 'a todo')",
                        },
                    }
                ],
            },
            {
                "when": text,
                "reply": [{"tool": "create", "args": {"path": str(cwd / "hi"), "file_text": "hi"}}],
            },
        ]
        return self.session(cwd, text, rules=rules)

    def subagent(self, cwd: Path, text: str) -> str:
        """A `task` subagent that runs a command: its events are the parent's."""
        rules = [
            {"when": "TOOL RESULT task", "reply": [{"text": "The subagent is done."}]},
            {"when": "TOOL RESULT bash", "reply": [{"text": "1 2 3"}]},
            {"when": "SUBTASK", "reply": [bash("seq 1 5")]},
            {
                "when": text,
                "reply": [
                    {
                        "tool": "task",
                        "args": {
                            "description": "count",
                            "prompt": "SUBTASK: count",
                            "agent_type": "task",
                            "name": "counter",
                        },
                    }
                ],
            },
        ]
        return self.session(cwd, text, rules=rules)

    def resume(self, cwd: Path, sid: str, text: str = "and again") -> str:
        return self.session(cwd, text, f"--resume={sid}", rules=say(text, "Again."))

    def chosen(self, cwd: Path, text: str) -> str:
        """`--session-id=<uuid>`: the caller names the new session."""
        sid = str(uuid.uuid4())
        assert self.session(cwd, text, f"--session-id={sid}", rules=say(text, "Named.")) == sid
        return sid

    def crash(self, cwd: Path, text: str) -> str:
        """A session whose process is killed after a big tool output: its
        `inuse.<pid>` pair and the output in $TMPDIR stay."""
        before = set(self.ids())
        rules = [
            {"when": "TOOL RESULT bash: Output too large", "reply": [bash(CRASH)]},
            {"when": text, "reply": [bash(BIG_OUTPUT)]},
        ]
        result = self.prompt(cwd, text, rules=rules)
        assert result.returncode != 0, "SETUP INVALID: Copilot was not killed"
        (sid,) = set(self.ids()) - before
        return sid

    def resumes(self, cwd: Path, sid: str) -> bool:
        """Whether Copilot resumes `sid` (False: it says it has no such session)."""
        result = self.prompt(cwd, "back?", f"--resume={sid}", rules=say("back?", "Back."))
        if result.returncode == 0:
            return result_id(result.stdout) == sid
        assert REFUSED in result.stdout + result.stderr, result.stdout[-2000:]
        return False

    def ids(self) -> list[str]:
        return sorted(p.name for p in self.state.iterdir() if not p.name.startswith("."))

    def tui(self, cwd: Path, *args: str, rules: list[dict[str, Any]] | None = None) -> Tui:
        """Copilot in a terminal, once its prompt shows."""
        tui = self.terminal(cwd, *args, rules=rules)
        assert isinstance(tui, Tui)
        tui.wait("/ commands")
        return tui


def bash(command: str) -> dict[str, Any]:
    return {"tool": "bash", "args": {"command": command, "description": "run"}}


def result_id(stdout: str) -> str | None:
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("type") == "result":
            sid = record.get("sessionId")
            return sid if isinstance(sid, str) else None
    return None


def age(copilot: Copilot, sid: str, seconds: float, extra: Sequence[Path] = ()) -> None:
    """Move a session `seconds` into the past: the mtime of everything of it
    (its dir, its lock, `extra`) and its `sessions` row's update time."""
    when = time.time() - seconds
    paths = [copilot.state / sid, copilot.state / ".session-operation-locks" / f"{sid}.lock"]
    for path in [*paths, *extra]:
        if not os.path.lexists(path):
            continue
        for p in [path, *(sorted(path.rglob("*")) if path.is_dir() else [])]:
            os.utime(p, (when, when), follow_symlinks=False)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(when))
    conn = sqlite3.connect(copilot.root / "session-store.db", timeout=30)
    with conn:
        conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, sid))
    conn.close()
