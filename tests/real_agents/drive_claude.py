"""Driving real Claude Code sessions for the conformance suite.

`Claude(home)` runs the pinned `claude -p ... --output-format json` as the
fake user, isolated, against the mock model speaking the Anthropic Messages
API (mock_anthropic.py). Each run's rules script what the model answers.

What the environment must hold, and why:
- ANTHROPIC_BASE_URL at the mock, and any ANTHROPIC_API_KEY;
- IS_SANDBOX=1: as root Claude refuses --dangerously-skip-permissions
  without it (the tools must run without asking);
- CLAUDE_CODE_ENABLE_SDK_FILE_CHECKPOINTING=true: headless runs write
  `file-history/<id>/` only with it;
- CLAUDE_CODE_ENABLE_TODO_TOOLS=true: 2.1.332 offers the task tools
  (TaskCreate, which writes `tasks/<id>/`) to its newest default model only
  with it ("TaskCreate is disabled for this session" without);
- settings.json's cleanupPeriodDays large: Claude's own sweep runs inside
  every claude process, ~5 s after start, and deletes by mtime what the
  test has aged (it must never be 0: that stops transcripts being written).
The fake home's TMPDIR puts Claude's `claude-<uid>` tmp dir in the fake
user's tmp.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import isolation

from fakehome import FakeHome

MOCK_URL = "http://127.0.0.1:18765"
KEEP_EVERYTHING_DAYS = 99999
# What `claude --resume` says of an id it has no transcript for.
NOT_FOUND = "No conversation found"


@dataclass
class Result:
    run: isolation.Run
    output: dict[str, Any]

    @property
    def session_id(self) -> str:
        return str(self.output["session_id"])


@dataclass
class Claude:
    home: FakeHome
    runs: Path
    binary: Path  # the pinned claude (conftest.agent_binary)

    def env(self) -> dict[str, str]:
        env = dict(self.home.environ)
        env["PATH"] = os.pathsep.join([str(self.binary.parent), env.get("PATH", os.defpath)])
        env.update(
            ANTHROPIC_BASE_URL=MOCK_URL,
            ANTHROPIC_API_KEY="sk-ant-mock-key",
            IS_SANDBOX="1",
            CLAUDE_CODE_ENABLE_SDK_FILE_CHECKPOINTING="true",
            CLAUDE_CODE_ENABLE_TODO_TOOLS="true",
        )
        # A suite started from inside Claude Code must not look nested to it.
        for name in ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SESSION_ID"):
            env.pop(name, None)
        return env

    def keep_everything(self) -> Path:
        """settings.json with a cleanupPeriodDays Claude's sweep never reaches."""
        settings = self.home.claude / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps({"cleanupPeriodDays": KEEP_EVERYTHING_DAYS}))
        return settings

    def run(
        self,
        *args: str,
        cwd: Path,
        rules: list[dict[str, Any]] | None = None,
        check: bool = True,
        timeout: float = 240,
    ) -> Result:
        argv = ["claude", "-p", *args, "--output-format", "json"]
        argv.append("--dangerously-skip-permissions")
        run = isolation.run(
            argv,
            env=self.env(),
            cwd=cwd,
            protocol="anthropic",
            rules=rules or [{"reply": [{"text": "ok"}]}],
            workdir=self.runs,
            timeout=timeout,
        )
        if check:
            run.check()
        try:
            output = json.loads(run.stdout)
        except ValueError:
            output = {}
        if check and not output.get("session_id"):
            raise AssertionError(f"claude printed no session id:\n{run.stdout[-2000:]}")
        return Result(run, output if isinstance(output, dict) else {})

    def start(self, *args: str, cwd: Path, rules: list[dict[str, Any]]) -> subprocess.Popen[str]:
        """Start `claude -p ...` isolated and return at once (the caller ends
        it with fakehome.kill_group): a session that stays open. Built as
        isolation.run builds its command, in a process group of its own."""
        self.runs.mkdir(parents=True, exist_ok=True)
        n = len(list(self.runs.glob("live-*.log")))
        script, log = self.runs / f"live-{n}.rules.json", self.runs / f"live-{n}.log"
        script.write_text(json.dumps(rules))
        argv = ["claude", "-p", *args, "--dangerously-skip-permissions"]
        wrapper = [
            *isolation.unshare_prefix(),
            sys.executable,
            str(isolation.HERE / "netns_run.py"),
            "anthropic",
            str(script),
            str(log),
            "--",
            *argv,
        ]
        env = {**self.env(), "PYTHONPATH": str(isolation.HERE)}
        return subprocess.Popen(
            wrapper,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )


def rich_rules(workspace: Path, notes: Path) -> list[dict[str, Any]]:
    """One session that uses what writes files beside the transcript: Read
    then Write an existing file (file-history), a Bash command whose output
    is too big to keep inline (tool-results/, and a tmp tasks/*.output), a
    task list (tasks/<id>/), a subagent (subagents/ with its .meta.json, and
    a tmp link into its transcript), and a background command (a tmp
    tasks/*.output). First matching rule wins: the specific ones first."""
    return [
        {"when": "SUBAGENT-DONE", "reply": [{"text": "subagent finished"}]},
        {
            "when": "subagent job",
            "reply": [
                {
                    "tool": "Bash",
                    "input": {"command": "echo SUBAGENT-DONE; ls", "description": "List"},
                }
            ],
        },
        {"when": "tool_result Agent", "reply": [{"text": "all done"}]},
        {"when": "task-notification", "reply": [{"text": "noted"}]},
        {
            "when": "tool_result TaskCreate",
            "reply": [
                {
                    "tool": "Agent",
                    "input": {
                        "description": "Run a subagent",
                        "prompt": "subagent job: list the files",
                        "subagent_type": "general-purpose",
                    },
                },
                {
                    "tool": "Bash",
                    "input": {
                        "command": "seq 1 1000",
                        "description": "Count in the background",
                        "run_in_background": True,
                    },
                },
            ],
        },
        {
            "when": "tool_result Write",
            "reply": [
                {"tool": "Bash", "input": {"command": "seq 1 60000", "description": "Count"}},
                {
                    "tool": "TaskCreate",
                    "input": {
                        "subject": "Check",
                        "description": "Check it",
                        "activeForm": "Checking",
                    },
                },
            ],
        },
        {
            "when": "tool_result Read",
            "reply": [{"tool": "Write", "input": {"file_path": str(notes), "content": "new\n"}}],
        },
        {"when": "do the work", "reply": [{"tool": "Read", "input": {"file_path": str(notes)}}]},
        {"reply": [{"text": f"a plain answer in {workspace.name}"}]},
    ]


def age(paths: list[str], days: float) -> None:
    """Set mtime and atime of each path, and of everything below it, `days`
    back (links as links; the deepest first, so a directory's own time is
    the last one set)."""
    when = time.time() - days * 86400
    found: set[str] = set()
    for path in paths:
        found.add(path)
        if os.path.isdir(path) and not os.path.islink(path):
            for top, dirs, files in os.walk(path):
                found.update(os.path.join(top, n) for n in [*dirs, *files])
    for path in sorted(found, key=lambda p: p.count("/"), reverse=True):
        if os.path.lexists(path):
            os.utime(path, (when, when), follow_symlinks=False)
