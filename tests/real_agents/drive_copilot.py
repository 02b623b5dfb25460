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
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import install
import isolation
import mockmodel

from fakehome import FakeHome
from waiting import wait_until

PROTOCOL = "openai_chat"
HERE = Path(__file__).resolve().parent
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


@dataclass
class Copilot:
    home: FakeHome
    binary: Path
    logs: Path
    runs: list[isolation.Run] = field(default_factory=list)

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

    def workspace(self, *parts: str) -> Path:
        path = self.home.home.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def run(
        self, cwd: Path, *args: str, rules: list[dict[str, Any]] | None = None
    ) -> isolation.Run:
        result = isolation.run(
            [str(self.binary), *args],
            env=self.home.environ,
            cwd=cwd,
            protocol=PROTOCOL,
            rules=rules or [],
            workdir=self.logs,
            timeout=240,
        )
        self.runs.append(result)
        return result

    def prompt(
        self, cwd: Path, text: str, *args: str, rules: list[dict[str, Any]] | None = None
    ) -> isolation.Run:
        return self.run(
            cwd, "-p", text, "--allow-all-tools", "--output-format", "json", *args, rules=rules
        )

    def session(
        self, cwd: Path, text: str, *args: str, rules: list[dict[str, Any]] | None = None
    ) -> str:
        """Run one prompt and return the id of the session it used."""
        result = self.prompt(cwd, text, *args, rules=rules).check()
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
        return Tui.start(self, cwd, list(args), rules or [])


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


@dataclass
class Tui:
    """Copilot in a terminal: a tmux server of its own, whose one pane runs
    Copilot isolated with the mock model beside it (netns_run)."""

    copilot: Copilot
    socket: Path
    env: dict[str, str]

    @classmethod
    def start(
        cls, copilot: Copilot, cwd: Path, args: list[str], rules: list[dict[str, Any]]
    ) -> Tui:
        logs = copilot.logs
        logs.mkdir(parents=True, exist_ok=True)
        n = len(list(logs.glob("run-*.log")))
        script, log = logs / f"run-{n}.rules.json", logs / f"run-{n}.log"
        script.write_text(json.dumps(rules))
        log.touch()
        env = dict(copilot.home.environ, TERM="xterm-256color", PYTHONPATH=str(HERE))
        netns = [sys.executable, str(HERE / "netns_run.py"), PROTOCOL, str(script), str(log)]
        argv = [*isolation.unshare_prefix(), *netns, "--", str(copilot.binary), *args]
        tui = cls(copilot, copilot.home.root / f"tmux-{n}", env)
        size = ["-x", "200", "-y", "50"]
        tui.tmux("new-session", "-d", "-s", "copilot", *size, "-c", str(cwd), *argv)
        tui.wait("/ commands")
        return tui

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "copilot").stdout

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "copilot", "-l", text)
        # Enter only once the TUI shows what was typed (it takes keys in its own time).
        self.wait(text)
        self.tmux("send-keys", "-t", "copilot", "Enter")

    def wait(self, text: str, timeout: float = 90, *, setup: bool = True) -> str:
        """The screen once it shows `text`; `setup` False: its absence is
        the failure under test, not a setup that did not arise."""
        what = f"{text!r} on Copilot's screen"
        wait_until(lambda: text in self.screen(), what, timeout=timeout, setup=setup)
        return self.screen()

    def alive(self) -> bool:
        return self.tmux("has-session", "-t", "copilot").returncode == 0

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

    def kill(self) -> None:
        if self.alive():
            self.tmux("kill-server")
            wait_until(lambda: not self.alive(), "the terminal gone", timeout=30)


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
