"""Driving the real Codex CLI non-interactively against the mock model.

`Codex(home, binary)` writes `$CODEX_HOME/config.toml` with a custom model
provider on the mock server (wire_api "responses", a dummy key through
`env_key`) and runs `codex exec ...` isolated (isolation.run). Each
session-making call returns the thread id Codex printed (`--json`: the
first event is `thread.started`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import isolation
import mockmodel

if TYPE_CHECKING:
    from fakehome import FakeHome

PROTOCOL = "openai_responses"
KEY_VAR = "AGENTKEEP_MOCK_OPENAI_KEY"

CONFIG = f"""\
model = "mock-model"
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.mock]
name = "mock"
base_url = "http://127.0.0.1:{mockmodel.PORT}/v1"
wire_api = "responses"
env_key = "{KEY_VAR}"
request_max_retries = 0
stream_max_retries = 0
"""


@dataclass
class Codex:
    home: FakeHome
    binary: Path
    workspace: Path
    logs: Path
    runs: list[isolation.Run] = field(default_factory=list)

    @classmethod
    def setup(cls, home: FakeHome, binary: Path) -> Codex:
        home.codex.mkdir(parents=True, exist_ok=True)
        (home.codex / "config.toml").write_text(CONFIG)
        home.environ[KEY_VAR] = "sk-mock-not-a-key"
        workspace = home.home / "project"
        workspace.mkdir(parents=True, exist_ok=True)
        return cls(home, binary, workspace, home.root / "mock-logs")

    def run(
        self,
        *args: str,
        rules: list[dict[str, Any]] | None = None,
        cwd: Path | None = None,
        timeout: float = 240,
    ) -> isolation.Run:
        run = isolation.run(
            [str(self.binary), *args],
            env=self.home.environ,
            cwd=cwd or self.workspace,
            protocol=PROTOCOL,
            rules=rules or [],
            workdir=self.logs,
            timeout=timeout,
        )
        self.runs.append(run)
        return run

    def app_server(self, requests: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Answers of `codex app-server` to `requests` (JSON-RPC), in order."""
        argv = [sys.executable, str(Path(__file__)), str(self.binary), "60", json.dumps(requests)]
        run = isolation.run(
            argv,
            env=self.home.environ,
            cwd=self.workspace,
            protocol=PROTOCOL,
            rules=[],
            workdir=self.logs,
            timeout=120,
        )
        self.runs.append(run)
        answers = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
        if run.returncode != 0 or len(answers) != len(requests):
            raise AssertionError(f"codex app-server: {run.stdout[-2000:]}\n{run.stderr[-2000:]}")
        return answers

    def listed(self, *, archived: bool = False) -> dict[str, dict[str, Any]]:
        """The sessions Codex itself lists (thread/list, every source kind),
        by id."""
        params = {"limit": 500, "sourceKinds": SOURCE_KINDS, "archived": archived}
        (answer,) = self.app_server([("thread/list", params)])
        if "result" not in answer:
            raise AssertionError(f"thread/list failed: {answer}")
        return {t["id"]: t for t in answer["result"]["data"]}

    def exec(self, *args: str, rules: list[dict[str, Any]] | None = None) -> str:
        """`codex exec --json ...`; the thread id it started or resumed."""
        run = self.run("exec", "--json", "--skip-git-repo-check", *args, rules=rules).check()
        return thread_id(run)


def thread_id(run: isolation.Run) -> str:
    for line in run.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "thread.started":
            return str(event["thread_id"])
    raise AssertionError(f"no thread.started event in:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")


# -- Codex's own list of sessions -----------------------------------------------

# Every source kind: thread/list defaults to the interactive ones only.
SOURCE_KINDS = [
    "cli",
    "vscode",
    "exec",
    "appServer",
    "subAgent",
    "subAgentReview",
    "subAgentCompact",
    "subAgentThreadSpawn",
    "subAgentOther",
    "unknown",
]


def _app_server(binary: str, requests: list[tuple[str, dict[str, Any]]], timeout: float) -> int:
    """Run `codex app-server` on stdio, send `requests` after initializing,
    print each answer as a JSON line, and close it. Runs inside the network
    namespace (see Codex.app_server): the server exits at end of input, so
    input stays open until every answer is in."""
    import subprocess
    import threading

    proc = subprocess.Popen(
        [binary, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    answers: dict[int, Any] = {}
    done = threading.Event()
    wanted = set(range(2, 2 + len(requests)))

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") in wanted:
                answers[message["id"]] = message
                if set(answers) == wanted:
                    done.set()
        done.set()

    threading.Thread(target=read, daemon=True).start()
    init = {"clientInfo": {"name": "agentkeep-conformance", "version": "0"}}
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}]
    lines.append({"jsonrpc": "2.0", "method": "initialized"})
    for n, (method, params) in enumerate(requests, start=2):
        lines.append({"jsonrpc": "2.0", "id": n, "method": method, "params": params})
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in lines))
    proc.stdin.flush()
    done.wait(timeout)
    proc.stdin.close()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    for n in sorted(wanted):
        print(json.dumps(answers.get(n, {"id": n, "error": {"message": "no answer"}})))
    return 0 if set(answers) == wanted else 1


if __name__ == "__main__":
    import sys

    _binary, _timeout, _requests = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
    sys.exit(_app_server(_binary, [(m, p) for m, p in _requests], _timeout))
