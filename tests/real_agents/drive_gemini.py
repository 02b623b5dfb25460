"""Driving the real Gemini CLI non-interactively against the mock model.

`Gemini.setup(home, binary)` writes `~/.gemini/settings.json` (API-key auth,
usage statistics, telemetry, updates and IDE mode off, folder trust off so
a fresh workspace may run tools, and Gemini's own session clean-up off: it
is on by default since 0.33 and would delete the aged sessions a test
makes) and points Gemini at the mock server (`GOOGLE_GEMINI_BASE_URL`, a
dummy `GEMINI_API_KEY`). Each run is isolated (isolation.run); a
session-making run uses `--output-format json`, whose `session_id` is the
session's id.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import isolation
import mockmodel
from driver import Driver

from fakehome import FakeHome

SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {
        "enableAutoUpdate": False,
        "enableAutoUpdateNotification": False,
        "sessionRetention": {"enabled": False},
    },
    "ide": {"enabled": False},
}
# What `--resume` of a session it does not have makes Gemini exit with.
REFUSED = 42
BIG_OUTPUT = "seq 1 30000"  # ~170 kB: past the 40,000-character truncation


@dataclass
class Gemini(Driver):
    AGENT = "gemini"
    PROTOCOL = "gemini"

    @classmethod
    def setup(cls, home: FakeHome, binary: Path) -> Gemini:
        root = home.home / ".gemini"
        root.mkdir(parents=True, exist_ok=True)
        (root / "settings.json").write_text(json.dumps(SETTINGS, indent=2))
        home.environ["GOOGLE_GEMINI_BASE_URL"] = f"http://127.0.0.1:{mockmodel.PORT}"
        home.environ["GEMINI_API_KEY"] = "mock-key-not-a-key"
        return cls(home, binary, home.root / "model-logs")

    @property
    def root(self) -> Path:
        return self.home.home / ".gemini"

    def prompt_args(self, text: str, *args: str) -> list[str]:
        return ["--output-format", "json", *args, "-p", text]

    def session_id(self, result: isolation.Run) -> str:
        answer = json.loads(result.stdout[result.stdout.index("{") :])
        sid = answer.get("session_id")
        assert isinstance(sid, str) and sid, result.stdout[-2000:]
        return sid

    # -- the sessions a conformance run makes ------------------------------
    def plain(self, cwd: Path, prompt: str = "say hello") -> str:
        return self.session(cwd, prompt, rules=[{"when": prompt, "reply": [{"text": "Hello."}]}])

    def tools(self, cwd: Path) -> str:
        """A file write, a shell command whose output is truncated into
        `tool-outputs/session-<id>/`, and plan mode (`<id>/plans/`)."""
        rules = [
            {"when": "TOOL RESULT enter_plan_mode", "reply": [{"text": "All done."}]},
            {
                "when": "TOOL RESULT run_shell_command",
                "reply": [{"call": "enter_plan_mode", "args": {"reason": "plan next"}}],
            },
            {
                "when": "TOOL RESULT write_file",
                "reply": [
                    {
                        "call": "run_shell_command",
                        "args": {"command": BIG_OUTPUT, "description": "numbers"},
                    }
                ],
            },
            {
                "when": "write a file",
                "reply": [
                    {
                        "call": "write_file",
                        "args": {"file_path": str(cwd / "hello.txt"), "content": "hello\n"},
                    }
                ],
            },
        ]
        return self.session(cwd, "write a file", "--yolo", rules=rules)

    def subagent(self, cwd: Path) -> str:
        """A session that hands a task to the `generalist` subagent, which
        runs a shell command of big output and completes."""
        rules = [
            {"when": "TOOL RESULT invoke_agent", "reply": [{"text": "The subagent is done."}]},
            {
                "when": "TOOL RESULT run_shell_command",
                "reply": [{"call": "complete_task", "args": {"result": {"response": "1 2 3"}}}],
            },
            {
                "when": "SUBTASK",
                "reply": [
                    {
                        "call": "run_shell_command",
                        "args": {"command": BIG_OUTPUT, "description": "numbers"},
                    }
                ],
            },
            {
                "when": "delegate this",
                "reply": [
                    {
                        "call": "invoke_agent",
                        "args": {"agent_name": "generalist", "prompt": "SUBTASK: count"},
                    }
                ],
            },
        ]
        return self.session(cwd, "delegate this", "--yolo", rules=rules)

    def resume(self, cwd: Path, which: str, prompt: str = "and again", *, late: float = 0) -> str:
        """`--resume`; the model answers `late` seconds after it is asked."""
        reply = [{"sleep": late}, {"text": "Again."}]
        rules = [{"when": prompt, "reply": reply}]
        return self.session(cwd, prompt, "--resume", which, rules=rules)

    def listed(self, cwd: Path) -> str:
        """What `gemini --list-sessions` prints for the workspace."""
        result = self.run(cwd, "--list-sessions").check()
        return result.stdout + result.stderr

    def import_session(self, cwd: Path, chat: Path, prompt: str = "imported") -> str:
        """`--session-file`: a new session with a copy of another's messages
        (Gemini records no parent)."""
        rules = [{"when": prompt, "reply": [{"text": "Imported."}]}]
        return self.session(cwd, prompt, "--session-file", str(chat), rules=rules)

    def chats(self, sid: str) -> list[Path]:
        """Every top-level chat file naming `sid` in its first record."""
        found = []
        for chat in sorted(self.root.glob("tmp/*/chats/session-*.json*")):
            with chat.open("rb") as f:
                first = json.loads(f.readline() or b"{}")
            if first.get("sessionId") == sid:
                found.append(chat)
        return found

    def subagents(self, sid: str) -> list[str]:
        return sorted(p.stem for p in self.root.glob(f"tmp/*/chats/{sid}/*.jsonl"))


# Time fields of Gemini's chat records, moved when a session is aged.
TIME_FIELDS = ("startTime", "lastUpdated", "timestamp")


def age(paths: list[Path], seconds: float) -> None:
    """Move a session `seconds` into the past as if it were that old: every
    time field of its chats' records, then the mtime of everything below
    `paths` (Gemini's own retention and agentkeep both read both)."""
    files: list[Path] = []
    for path in paths:
        files += [path, *sorted(path.rglob("*"))] if path.is_dir() else [path]
    for f in files:
        if f.is_file() and ".jsonl" in f.name:
            f.write_text("".join(_aged(line, seconds) for line in f.read_text().splitlines(True)))
    when = time.time() - seconds
    for f in files:
        os.utime(f, (when, when), follow_symlinks=False)


def _aged(line: str, seconds: float) -> str:
    record = json.loads(line)
    for target in (record, record.get("$set")):
        if isinstance(target, dict):
            for name in TIME_FIELDS:
                if isinstance(target.get(name), str):
                    target[name] = _earlier(target[name], seconds)
    return json.dumps(record, separators=(",", ":")) + "\n"


def _earlier(stamp: str, seconds: float) -> str:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")) - timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def last_updated(chat: Path, *, first: bool = False) -> float:
    """The last lastUpdated a chat sets (what Gemini itself reads), or the
    one of its first record."""
    value = None
    for line in chat.read_text().splitlines():
        record = json.loads(line)
        update = record.get("$set") if isinstance(record.get("$set"), dict) else record
        value = update.get("lastUpdated", value)
        if first:
            break
    assert isinstance(value, str), chat
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
