"""Driving the real pi against the mock model, headless and in a real
terminal.

`Pi.setup(home, binary)` writes `<PI_CODING_AGENT_DIR>/models.json` with a
provider of its own for the mock server (OpenAI chat completions, with no
developer role or reasoning effort, which the mock does not speak) and
turns pi's startup network off (`PI_OFFLINE`). A session-making run is
`pi --provider mock --model mock-model -p TEXT`; pi prints only the answer,
so the session is the file the run wrote (its name ends in the id). What
only the terminal has (the `/resume` picker, which lists and deletes, a
session left open) goes through terminal.py.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import isolation
import mockmodel
from driver import Driver
from terminal import Terminal

from fakehome import FakeHome

MODEL = ["--provider", "mock", "--model", "mock-model"]
BIG_OUTPUT = "seq 1 60000"  # ~350 kB: past pi's limit, saved whole to pi-bash-<hex>.log
NOT_FOUND = "No session found matching"


def say(when: str, text: str) -> dict[str, Any]:
    return {"when": when, "reply": [{"text": text}]}


@dataclass
class Pi(Driver):
    AGENT = "pi"
    PROTOCOL = "openai_chat"

    @classmethod
    def setup(cls, home: FakeHome, binary: Path) -> Pi:
        home.environ.update(PI_OFFLINE="1", PI_SKIP_VERSION_CHECK="1", PI_TELEMETRY="0")
        pi = cls(home, binary, home.root / "model-logs")
        provider = {
            "baseUrl": f"http://127.0.0.1:{mockmodel.PORT}/v1",
            "api": "openai-completions",
            "apiKey": "mock-key-not-a-key",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "mock-model"}],
        }
        pi.agent_dir.mkdir(parents=True, exist_ok=True)
        models = {"providers": {"mock": provider}}
        (pi.agent_dir / "models.json").write_text(json.dumps(models, indent=2))
        return pi

    @property
    def agent_dir(self) -> Path:
        return Path(self.home.environ["PI_CODING_AGENT_DIR"])

    @property
    def root(self) -> Path:
        return self.agent_dir / "sessions"

    @property
    def tmp(self) -> Path:
        return Path(self.home.environ["TMPDIR"])

    def command(self, *args: str) -> list[str]:
        return [str(self.binary), *MODEL, *args]

    def files(self) -> dict[str, Path]:
        """Every session file, by the id its name ends in."""
        return {p.stem.rpartition("_")[2]: p for p in self.root.rglob("*.jsonl")}

    def session(
        self, cwd: Path, text: str, *args: str, rules: list[dict[str, Any]] | None = None
    ) -> str:
        """The id of the session a prompt (answered "Hello." unless `rules`
        say otherwise) wrote."""
        return super().session(cwd, text, *args, rules=rules or [say(text, "Hello.")])

    def prompt_args(self, text: str, *args: str) -> list[str]:
        return [*args, "-p", text]

    def session_id(self, result: isolation.Run) -> str:
        """pi prints only the answer: the session is the newest file."""
        files = self.files()
        return max(files, key=lambda sid: files[sid].stat().st_mtime_ns)

    # -- the sessions a conformance run makes ------------------------------
    def tools(self, cwd: Path, prompt: str) -> str:
        """A bash command whose output pi saves whole to the tmp dir."""
        rules = [
            say("TOOL RESULT bash", "All done."),
            {"when": prompt, "reply": [{"tool": "bash", "args": {"command": BIG_OUTPUT}}]},
        ]
        return self.session(cwd, prompt, rules=rules)

    def resume(self, cwd: Path, sid: str, prompt: str = "and again") -> str:
        return self.session(cwd, prompt, "--session", sid, rules=[say(prompt, "Again.")])

    def refused(self, cwd: Path, sid: str) -> bool:
        result = self.run(cwd, "--session", sid, "-p", "back?")
        return result.returncode != 0 and NOT_FOUND in result.stdout + result.stderr

    # -- in a terminal -------------------------------------------------------
    def tui(
        self,
        cwd: Path,
        *args: str,
        rules: list[dict[str, Any]] | None = None,
        ready: str = "mock-model",
    ) -> Terminal:
        """pi in a terminal, once `ready` shows (the editor's footer names
        the model; it takes pi some seconds to draw)."""
        terminal = self.terminal(cwd, *args, rules=rules)
        terminal.wait(ready, timeout=120)
        return terminal

    def listed(self, cwd: Path, one: str) -> str:
        """What pi's own session picker (`pi -r`) lists for the workspace,
        each session by its first prompt, once `one` of them shows."""
        picker = self.tui(cwd, "-r", ready="Resume Session")
        screen = picker.wait(one)
        picker.kill()
        return screen

    def delete(self, cwd: Path, prompt: str) -> None:
        """Delete the session whose first prompt is `prompt` with the
        picker's own delete (Ctrl+D, then Enter to confirm)."""
        picker = self.tui(cwd, "-r", ready="Resume Session")
        picker.wait(prompt)
        picker.write(prompt)  # the search narrows the list to it
        picker.keys("C-d")
        picker.wait("Delete session?")
        picker.keys("Enter")
        picker.wait("Session deleted")
        picker.kill()


def age(paths: list[Path], seconds: float) -> None:
    when = time.time() - seconds
    for path in paths:
        os.utime(path, (when, when), follow_symlinks=False)
