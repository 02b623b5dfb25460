"""Driving the real opencode non-interactively, against the mock model.

opencode talks to the mock through a custom provider in its own config
(`$XDG_CONFIG_HOME/opencode/opencode.json`): npm `@ai-sdk/openai-compatible`,
which opencode bundles (it installs nothing at run time for it), with
`baseURL` the mock's. `OPENCODE_DISABLE_MODELS_FETCH` keeps it from fetching
models.dev (with no cached copy, its catalogue is then empty and only the
config's provider exists). Each run is `opencode run --format json ...` in
the workspace, isolated (isolation.run); the session id comes from its JSON
events.

The script (rules()) answers by markers in the prompts: a plain answer; a
todo list, a file write and a shell command whose output is big enough to be
truncated into `tool-output/`, at once; such a command alone; and a
task-tool subagent that runs one too.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import isolation

if TYPE_CHECKING:
    from fakehome import FakeHome

PROTOCOL = "openai_chat"
PORT = 18765
# Lines of output: opencode truncates past 2000 lines (or 50 KiB) and saves
# the whole output to tool-output/tool_<id>.
BIG = 30_000

PLAIN = "PLAIN-HELLO say hello"
TOOLS = "WRITE-A-FILE please"
SHELL = "BIG-OUTPUT please"
DELEGATE = "DELEGATE please"
CHILD = "CHILD-WORK count for me"


def rules(workspace: Path) -> list[dict[str, Any]]:
    todos = [
        {"content": "write the file", "status": "in_progress", "priority": "high"},
        {"content": "check it", "status": "pending", "priority": "low"},
    ]
    big = {"command": f"seq 1 {BIG}", "description": "count a lot"}
    return [
        {"when": "TOOL RESULT task", "reply": {"text": "the subagent is done"}},
        {"when": "TOOL RESULT", "reply": {"text": "the tool is done"}},
        {"when": "PLAIN-HELLO", "reply": {"text": "Hello there!"}},
        {
            "when": "WRITE-A-FILE",
            "reply": [
                {"tool": "todowrite", "args": {"todos": todos}},
                {
                    "tool": "write",
                    "args": {"filePath": str(workspace / "hello.txt"), "content": "hello\n"},
                },
                {"tool": "bash", "args": big},
            ],
        },
        {"when": "BIG-OUTPUT", "reply": {"tool": "bash", "args": big}},
        {
            "when": "DELEGATE",
            "reply": {
                "tool": "task",
                "args": {"description": "count", "prompt": CHILD, "subagent_type": "general"},
            },
        },
        {"when": "CHILD-WORK", "reply": {"tool": "bash", "args": big}},
        {"reply": {"text": "ok"}},
    ]


def config() -> dict[str, Any]:
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": "mock/mock-model",
        "small_model": "mock/mock-model",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
        "provider": {
            "mock": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Mock",
                "options": {"baseURL": f"http://127.0.0.1:{PORT}/v1", "apiKey": "mock"},
                "models": {"mock-model": {"name": "Mock", "tool_call": True}},
            }
        },
    }


@dataclass
class Opencode:
    """One fake user's opencode, run in `workspace`."""

    home: FakeHome
    binary: Path
    workspace: Path
    workdir: Path

    @classmethod
    def setup(cls, home: FakeHome, binary: Path) -> Opencode:
        workspace = home.root / "project"
        workspace.mkdir()
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
        for argv in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "start"]):
            subprocess.run([*git, *argv], cwd=workspace, env=home.environ, check=True)
        folder = Path(home.environ["XDG_CONFIG_HOME"]) / "opencode"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "opencode.json").write_text(json.dumps(config(), indent=2))
        return cls(home, binary, workspace, home.root / "runs")

    @property
    def data(self) -> Path:
        return Path(self.home.environ["XDG_DATA_HOME"]) / "opencode"

    @property
    def db(self) -> Path:
        return self.data / "opencode.db"

    def environ(self) -> dict[str, str]:
        env = dict(self.home.environ)
        env.update(
            PWD=str(self.workspace),  # opencode takes its directory from PWD
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_AUTOUPDATE="1",
            OPENCODE_DISABLE_LSP_DOWNLOAD="1",
        )
        return env

    def run(self, *args: str, timeout: float = 240) -> isolation.Run:
        return isolation.run(
            [str(self.binary), *args],
            env=self.environ(),
            cwd=self.workspace,
            protocol=PROTOCOL,
            rules=rules(self.workspace),
            workdir=self.workdir,
            timeout=timeout,
        )

    def ask(self, prompt: str, *flags: str) -> str:
        """`opencode run` with `prompt`; the id of the session it ran in."""
        run = self.run("run", "--format", "json", *flags, prompt).check()
        ids = {e["sessionID"] for e in _events(run.stdout) if "sessionID" in e}
        if len(ids) != 1:
            raise AssertionError(f"opencode run named sessions {ids}:\n{run.stdout[-3000:]}")
        return ids.pop()

    def listed(self) -> set[str]:
        """The ids `opencode session list` shows."""
        run = self.run("session", "list", "--format", "json").check()
        text = run.stdout.strip()
        return {s["id"] for s in json.loads(text)} if text else set()

    def resumes(self, sid: str) -> bool:
        """Whether `opencode run --session <sid>` runs in that session."""
        run = self.run("run", "--format", "json", "--session", sid, PLAIN)
        if run.returncode != 0:
            return False
        return {e.get("sessionID") for e in _events(run.stdout)} == {sid}

    def archive(self, sid: str) -> None:
        """Archive the session as the TUI does (there is no CLI command):
        through `opencode serve`'s HTTP API, inside the namespace."""
        argv = [sys.executable, __file__, "archive", str(self.binary), sid, str(PORT + 1)]
        run = isolation.run(
            argv,
            env=self.environ(),
            cwd=self.workspace,
            protocol=PROTOCOL,
            rules=rules(self.workspace),
            workdir=self.workdir,
            timeout=240,
        ).check()
        archived = json.loads(run.stdout.strip().splitlines()[-1])["time"].get("archived")
        assert archived, f"opencode did not archive {sid}: {run.stdout[-2000:]}"

    def agentkeep(self, *args: str, timeout: float = 900) -> isolation.Run:
        """agentkeep as the user runs it, isolated like opencode itself: a
        removal runs `opencode debug paths` and `opencode session delete`
        (the opencode it finds first on PATH records each call, then is the
        real one: agentkeep_calls())."""
        shim = self.home.root / "recording-bin"
        shim.mkdir(exist_ok=True)
        (shim / "opencode").write_text(
            f'#!/bin/sh\nprintf \'%s\\n\' "$*" >> {self.calls}\nexec {self.binary} "$@"\n'
        )
        (shim / "opencode").chmod(0o755)
        env = self.environ()
        env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
        return isolation.run(
            [sys.executable, "-m", "agentkeep", *args],
            env=env,
            cwd=self.workspace,
            protocol=PROTOCOL,
            rules=[],
            workdir=self.workdir,
            timeout=timeout,
        )

    @property
    def calls(self) -> Path:
        return self.home.root / "opencode-calls-by-agentkeep"

    def agentkeep_calls(self) -> list[str]:
        """The opencode commands agentkeep ran, in order."""
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def tool_outputs(self) -> dict[str, set[str]]:
        """tool-output file name -> the sessions whose part rows point at it
        (read here, independently of agentkeep)."""
        found: dict[str, set[str]] = {}
        for sid, data in self.rows("SELECT session_id, data FROM part"):
            for name in re.findall(r"tool-output/(tool_[0-9A-Za-z]+)", data):
                found.setdefault(name, set()).add(sid)
        return found

    def rows(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()


def _events(stdout: str) -> list[dict[str, Any]]:
    found = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            found.append(event)
    return found


def age(oc: Opencode, sids: set[str], seconds: float, paths: list[Path]) -> None:
    """Move the sessions' own time columns and these files' times back."""
    shift = int(seconds * 1000)
    conn = sqlite3.connect(oc.db)
    try:
        with conn:
            for sid in sids:
                conn.execute(
                    "UPDATE session SET time_updated = time_updated - ?,"
                    " time_created = time_created - ? WHERE id = ?",
                    (shift, shift, sid),
                )
                for table in ("message", "part"):
                    conn.execute(
                        f"UPDATE {table} SET time_updated = time_updated - ?,"
                        " time_created = time_created - ? WHERE session_id = ?",
                        (shift, shift, sid),
                    )
    finally:
        conn.close()
    for path in paths:
        st = os.lstat(path)
        os.utime(path, (st.st_atime - seconds, st.st_mtime - seconds), follow_symlinks=False)


def _archive(binary: str, sid: str, port: int) -> int:
    """Inside the network namespace: start `opencode serve`, archive the
    session through its HTTP API (what the TUI's archive does), stop it."""
    server = subprocess.Popen(
        [binary, "serve", "--port", str(port), "--hostname", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/session/{sid}"
        deadline = time.monotonic() + 120
        while True:
            try:
                body = json.dumps({"time": {"archived": int(time.time() * 1000)}}).encode()
                request = urllib.request.Request(
                    url, data=body, method="PATCH", headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=30) as answer:
                    print(answer.read().decode())
                    return 0
            except OSError as exc:
                if time.monotonic() > deadline:
                    print(f"opencode serve did not answer: {exc}")
                    return 1
                time.sleep(0.5)
    finally:
        server.kill()
        server.wait(timeout=30)


if __name__ == "__main__":
    if sys.argv[1:2] == ["archive"]:
        sys.exit(_archive(sys.argv[2], sys.argv[3], int(sys.argv[4])))
