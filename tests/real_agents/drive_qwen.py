"""Driving the real Qwen Code against the mock model, headless and in a
real terminal.

`Qwen.setup(home, binary)` writes `<QWEN_HOME>/settings.json` (OpenAI auth,
Qwen's own clean-up of old sessions' files put off, `general.cleanupPeriodDays`,
so it takes nothing a test ages) and points Qwen at the mock server
(`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `OPENAI_MODEL`); `QWEN_RUNTIME_DIR`
is set apart from the home, so both roots are written, and
`QWEN_DEBUG_LOG_FILE` on, so debug logs are. A session-making run is
`qwen -o json [-y] TEXT`; its `session_id` is read from the first record
printed (Qwen exits before a big answer is all written to a pipe). What
only the terminal has (`/delete`, plan mode, file history of an edit, a
session left open) goes through terminal.py.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import isolation
import mockmodel
from driver import Driver
from terminal import Terminal

from fakehome import FakeHome
from waiting import wait_until

SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "openai"}},
    "general": {"cleanupPeriodDays": 99999, "enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}
BIG_OUTPUT = "seq 1 60000"  # ~350 kB: truncated into `<runtime>/tmp/<hash>/*.output`
NOT_FOUND = "No saved session found with ID"
_SESSION_ID = re.compile(r'"session_id":"([0-9a-f-]{36})"')


def say(when: str, text: str) -> dict[str, Any]:
    return {"when": when, "reply": [{"text": text}]}


def call(when: str, tool: str, **args: Any) -> dict[str, Any]:
    return {"when": when, "reply": [{"tool": tool, "args": args}]}


@dataclass
class Qwen(Driver):
    AGENT = "qwen"
    PROTOCOL = "openai_chat"

    @classmethod
    def setup(cls, home: FakeHome, binary: Path) -> Qwen:
        runtime = home.home / ".qwen-runtime"
        home.environ.update(
            QWEN_RUNTIME_DIR=str(runtime),
            QWEN_DEBUG_LOG_FILE="1",
            OPENAI_BASE_URL=f"http://127.0.0.1:{mockmodel.PORT}/v1",
            OPENAI_API_KEY="mock-key-not-a-key",
            OPENAI_MODEL="mock-model",
        )
        qwen = cls(home, binary, home.root / "model-logs")
        qwen.root.mkdir(parents=True, exist_ok=True)
        (qwen.root / "settings.json").write_text(json.dumps(SETTINGS, indent=2))
        return qwen

    @property
    def root(self) -> Path:
        return Path(self.home.environ["QWEN_HOME"])

    @property
    def runtime(self) -> Path:
        return Path(self.home.environ["QWEN_RUNTIME_DIR"])

    def prompt_args(self, text: str, *args: str) -> list[str]:
        return ["-o", "json", *args, text]

    def session_id(self, result: isolation.Run) -> str:
        found = _SESSION_ID.search(result.stdout)
        assert found, result.stdout[-2000:]
        return found.group(1)

    # -- the sessions a conformance run makes ------------------------------
    def plain(self, cwd: Path, prompt: str) -> str:
        return self.session(cwd, prompt, rules=[say(prompt, "Hello.")])

    def tools(self, cwd: Path, prompt: str) -> str:
        """A file write, then a shell command whose output is truncated into
        the project's tmp dir."""
        rules = [
            say("TOOL RESULT run_shell_command", "All done."),
            call("TOOL RESULT write_file", "run_shell_command", command=BIG_OUTPUT),
            call(prompt, "write_file", file_path=str(cwd / "hello.txt"), content="hello\n"),
        ]
        return self.session(cwd, prompt, "-y", rules=rules)

    def subagent(self, cwd: Path, prompt: str) -> str:
        """A session handing a task to the general-purpose subagent, which
        runs a shell command of big output."""
        rules = [
            say("TOOL RESULT agent", "The subagent is done."),
            say("TOOL RESULT run_shell_command", "sub done"),
            call("SUBTASK", "run_shell_command", command=BIG_OUTPUT),
            call(
                prompt,
                "agent",
                description="count things",
                prompt="SUBTASK: count",
                subagent_type="general-purpose",
            ),
        ]
        return self.session(cwd, prompt, "-y", rules=rules)

    def resume(self, cwd: Path, sid: str, prompt: str = "and again") -> str:
        return self.session(cwd, prompt, "--resume", sid, rules=[say(prompt, "Again.")])

    def listed(self, cwd: Path) -> list[str]:
        """The ids `qwen sessions list` gives for the workspace."""
        result = self.run(cwd, "sessions", "list", "--json", "--limit", "100").check()
        return [json.loads(line)["sessionId"] for line in result.stdout.splitlines() if line]

    def refused(self, cwd: Path, sid: str) -> bool:
        result = self.run(cwd, "-o", "json", "--resume", sid, "back?")
        return result.returncode != 0 and NOT_FOUND in result.stdout + result.stderr

    def registry(self) -> dict[str, dict[str, Any]]:
        """The live-session registry by the session each record names (a
        record being written is left out until it is whole)."""
        found = {}
        for path in sorted((self.root / "sessions").glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            found[record["sessionId"]] = record
        return found

    # -- in a terminal -------------------------------------------------------
    def tui(self, cwd: Path, rules: list[dict[str, Any]]) -> QwenTui:
        """Qwen in a terminal, once it registered its session (the id)."""
        before = set(self.registry())
        terminal = self.terminal(cwd, "--approval-mode", "yolo", rules=rules)
        terminal.wait("Type your message", timeout=120)
        tui = QwenTui(self, terminal)
        tui.id = wait_until(lambda: self._registered(before), "Qwen registering", timeout=120)
        return tui

    def _registered(self, before: set[str]) -> str | None:
        return next(iter(set(self.registry()) - before), None)


@dataclass
class QwenTui:
    qwen: Qwen
    terminal: Terminal
    id: str = ""

    def ask(self, prompt: str, answer: str) -> None:
        self.terminal.type(prompt)
        self.terminal.wait(answer)

    def delete(self, prompt: str) -> None:
        """`/delete`, and the session whose first prompt is `prompt`."""
        self.terminal.type("/delete")
        self.terminal.wait("Delete Session")
        screen = self.terminal.wait(prompt)  # the list fills in after the frame
        listed = [line for line in screen.splitlines() if "[ ]" in line]
        index = next(i for i, line in enumerate(listed) if prompt in line)
        self.terminal.keys(*["Down"] * index, "Enter")
        self.terminal.wait("Session deleted successfully")

    def quit(self) -> None:
        self.terminal.type("/quit")
        self.terminal.wait_gone()


def edit_rules(target: Path) -> list[dict[str, Any]]:
    """Read then overwrite an existing file (Qwen refuses to overwrite one
    it has not read): the edit leaves a pre-edit backup in file history."""
    return [
        say("TOOL RESULT write_file", "Edited."),
        call("TOOL RESULT read_file", "write_file", file_path=str(target), content="after\n"),
        call("edit it", "read_file", file_path=str(target)),
    ]


def plan_rules() -> list[dict[str, Any]]:
    return [
        say("TOOL RESULT exit_plan_mode", "Planned."),
        call("make a plan", "exit_plan_mode", plan="1. do it\n2. done"),
    ]


def age(paths: list[Path], seconds: float) -> None:
    """Set back the mtime of `paths` and everything below them."""
    when = time.time() - seconds
    for path in paths:
        for p in [path, *(sorted(path.rglob("*")) if path.is_dir() else [])]:
            os.utime(p, (when, when), follow_symlinks=False)
