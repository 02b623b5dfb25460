"""`agentkeep adopt` against the real agents' own clean-up (pins.py).

Each agent starts with its own sweep at its default (30 days) and a settings
file as a person keeps it. Sessions are aged past that, then:

1. a fresh start of the agent deletes an aged session (else the test
   proves nothing: SETUP INVALID);
2. after `agentkeep adopt AGENT`, a fresh start leaves an aged session;
3. after `agentkeep adopt AGENT --undo`, a fresh start deletes it again,
   and the settings file is byte for byte what it was before adopt.

How each sweep is made to run (read in the agents' code):
- Claude Code runs it inside any process about 5 s after start, at most
  once a day (`<config>/.last-cleanup`, written when a sweep completes): the
  marker is removed, a `claude -p` is kept open on a waiting command until
  the marker is back, then ended.
- Gemini CLI runs it at every start, for the project it starts in.
- Qwen Code runs it in terminal sessions only, a minute after start when
  its markers (`$QWEN_HOME/.*-cleanup*`, at most once a day) are missing or
  a week old, and only while nobody typed in the last minute: the markers
  are removed, `qwen` is left untouched in a terminal until they are back.
  Its sweep takes a session's subagent transcripts and debug log, never the
  chat (FIELD-NOTES).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from drive_claude import Claude
from drive_claude import age as age_claude
from drive_gemini import SETTINGS as GEMINI_SETTINGS
from drive_gemini import Gemini
from drive_gemini import age as age_gemini
from drive_qwen import SETTINGS as QWEN_SETTINGS
from drive_qwen import Qwen, say
from drive_qwen import age as age_qwen

from conftest import agent_binary
from fakehome import FakeHome, kill_group
from waiting import wait_until

DAY = 86400.0
AGED_DAYS = 60
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _adopt(home: FakeHome, agent: str, *args: str) -> dict[str, Any]:
    done = home.cli("adopt", agent, *args, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, dict)
    return doc


# -- Claude Code ----------------------------------------------------------------

CLAUDE_SETTINGS = """{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "permissions": {
    "allow": ["Bash(ls:*)"]
  },
  "env": {"GREETING": "grüß dich"}
}
"""


def _claude_sweep(claude: Claude, cwd: Path) -> None:
    """One sweep of Claude's own, run to its end."""
    marker = claude.home.claude / ".last-cleanup"
    marker.unlink(missing_ok=True)  # at most once a day: as if a day had passed
    wait = {"command": "tail -f /dev/null", "description": "Wait", "timeout": 600000}
    rules: list[dict[str, Any]] = [
        {"when": "tool_result", "reply": [{"text": "done"}]},
        {"reply": [{"tool": "Bash", "input": wait}]},
    ]
    proc = claude.start("stay open", cwd=cwd, rules=rules)
    try:
        wait_until(marker.exists, "Claude's own sweep completing", timeout=180)
    finally:
        kill_group(proc)


def test_claude_sweep_is_handed_to_agentkeep_and_back(agent_home: FakeHome) -> None:
    claude = Claude(agent_home, agent_home.root / "runs", agent_binary("claude"))
    settings = agent_home.claude / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(CLAUDE_SETTINGS)
    work = agent_home.home / "work" / "one"
    work.mkdir(parents=True)
    ids = [claude.run(f"a plain session {n}", cwd=work).session_id for n in (1, 2)]
    first, second = (next((agent_home.claude / "projects").glob(f"*/{sid}.jsonl")) for sid in ids)

    age_claude([str(first)], AGED_DAYS)
    _claude_sweep(claude, work)
    assert not first.exists(), "SETUP INVALID: Claude's own sweep left an aged session"
    assert second.exists()

    before = settings.read_bytes()
    adopted = _adopt(agent_home, "claude")
    assert (adopted["key"], adopted["before"], adopted["after"]) == (
        "cleanupPeriodDays",
        None,
        99999,
    )
    age_claude([str(second)], AGED_DAYS)
    _claude_sweep(claude, work)
    assert second.exists(), "after adopt, Claude's sweep deleted an aged session"

    undone = _adopt(agent_home, "claude", "--undo")
    assert (undone["before"], undone["after"], undone["undone"]) == (99999, None, True)
    assert settings.read_bytes() == before
    _claude_sweep(claude, work)
    assert not second.exists(), "after undo, Claude's sweep left an aged session"


# -- Gemini CLI -------------------------------------------------------------------


def _gemini_text() -> str:
    """Gemini's settings without sessionRetention (its sweep on, by default),
    with a comment, as Gemini CLI reads them."""
    general = {k: v for k, v in GEMINI_SETTINGS["general"].items() if k != "sessionRetention"}
    body = json.dumps({**GEMINI_SETTINGS, "general": general}, indent=2)
    return "{\n  // mine: no telemetry, no updates\n" + body[2:] + "\n"


def test_gemini_sweep_is_handed_to_agentkeep_and_back(agent_home: FakeHome) -> None:
    gemini = Gemini.setup(agent_home, agent_binary("gemini"))
    settings = gemini.root / "settings.json"
    settings.write_text(_gemini_text())
    work = gemini.workspace("work", "one")
    first, second = gemini.plain(work, "first"), gemini.plain(work, "second")
    chats = {sid: gemini.chats(sid) for sid in (first, second)}
    assert all(chats.values()), "SETUP INVALID: a session wrote no chat"

    age_gemini(chats[first], AGED_DAYS * DAY)
    gemini.plain(work, "a fresh start")
    assert not any(c.exists() for c in chats[first]), "SETUP INVALID: Gemini's sweep left it"
    assert all(c.exists() for c in chats[second])

    before = settings.read_bytes()
    adopted = _adopt(agent_home, "gemini")
    assert (adopted["key"], adopted["before"], adopted["after"]) == (
        "general.sessionRetention.enabled",
        None,
        False,
    )
    assert "// mine: no telemetry, no updates" in settings.read_text()
    age_gemini(chats[second], AGED_DAYS * DAY)
    gemini.plain(work, "another fresh start")
    assert all(c.exists() for c in chats[second]), "after adopt, Gemini's sweep deleted it"

    undone = _adopt(agent_home, "gemini", "--undo")
    assert (undone["before"], undone["after"], undone["undone"]) == (False, None, True)
    assert settings.read_bytes() == before
    gemini.plain(work, "a last fresh start")
    assert not any(c.exists() for c in chats[second]), "after undo, Gemini's sweep left it"


# -- Qwen Code ----------------------------------------------------------------------


def _qwen_text() -> str:
    general = {k: v for k, v in QWEN_SETTINGS["general"].items() if k != "cleanupPeriodDays"}
    body = json.dumps({**QWEN_SETTINGS, "general": general}, indent=2)
    return "{\n  // mine\n" + body[2:] + "\n"


def _qwen_sweep(qwen: Qwen, cwd: Path) -> None:
    """One sweep of Qwen's own: its markers gone (as if a week had passed),
    a terminal session nobody types in, until the markers are back. A part
    writes its marker when it is done (its `.lock` beside it while it runs);
    the subagent transcripts go last."""
    for marker in qwen.root.glob(".*-cleanup*"):
        marker.unlink()

    def done() -> bool:
        markers = [p.name for p in qwen.root.glob(".*-cleanup-*") if p.suffix != ".lock"]
        return all(any(m.startswith(part) for m in markers) for part in _QWEN_PARTS)

    tui = qwen.tui(cwd, [say("hi", "Hello.")])
    try:
        wait_until(done, "Qwen's own sweep completing", timeout=240)
    finally:
        tui.terminal.kill()


# The markers of the parts of Qwen's sweep that take a session's files.
_QWEN_PARTS = (".debug-logs-cleanup-", ".subagent-cleanup-")


def _times(paths: list[Path]) -> dict[str, str]:
    """When each of `paths` was last written, for a failure to show."""
    return {
        p.name: time.ctime(p.stat().st_mtime) if p.exists() else "gone"
        for p in [*paths, *(c for p in paths if p.is_dir() for c in p.rglob("*"))]
    }


def test_qwen_sweep_is_handed_to_agentkeep_and_back(agent_home: FakeHome) -> None:
    agent_binary("node")  # Qwen Code needs Node >= 22: the suite's own, on PATH
    qwen = Qwen.setup(agent_home, agent_binary("qwen"))
    settings = qwen.root / "settings.json"
    settings.write_text(_qwen_text())
    work = qwen.workspace("work", "one")
    ids = [qwen.subagent(work, f"delegate {n}") for n in (1, 2)]

    def parts(sid: str) -> list[Path]:
        """What Qwen's sweep takes of a session: its subagent transcripts
        and its debug log."""
        runtime = qwen.runtime
        return [*runtime.glob(f"projects/*/subagents/{sid}"), runtime / "debug" / f"{sid}.txt"]

    for sid in ids:
        assert len(parts(sid)) == 2 and all(p.exists() for p in parts(sid)), "SETUP INVALID"
    first, second = (parts(sid) for sid in ids)
    chat = next(qwen.runtime.glob(f"projects/*/chats/{ids[1]}.jsonl"))

    try:
        age_qwen(first, AGED_DAYS * DAY)
        _qwen_sweep(qwen, work)
        assert not any(p.exists() for p in first), "SETUP INVALID: Qwen's sweep left them"
        assert all(p.exists() for p in second)

        before = settings.read_bytes()  # as Qwen keeps it: it added its $version
        adopted = _adopt(agent_home, "qwen")
        assert (adopted["key"], adopted["before"], adopted["after"]) == (
            "general.cleanupPeriodDays",
            None,
            99999,
        )
        age_qwen([*second, chat], AGED_DAYS * DAY)
        _qwen_sweep(qwen, work)
        assert all(p.exists() for p in second), "after adopt, Qwen's sweep deleted them"

        undone = _adopt(agent_home, "qwen", "--undo")
        assert (undone["before"], undone["after"], undone["undone"]) == (99999, None, True)
        assert settings.read_bytes() == before
        _qwen_sweep(qwen, work)
        assert not any(p.exists() for p in second), (
            f"after undo, Qwen's sweep left them: {_times(second)}; markers"
            f" {_times(sorted(qwen.root.glob('.*-cleanup*')))}; settings {settings.read_text()}"
        )
        assert chat.exists(), "Qwen's sweep never takes the chat"
    finally:
        qwen.close()
