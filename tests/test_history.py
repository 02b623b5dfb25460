"""The lasting record of what went (CONTRACT.md `history`): a line for each
session a prune or a purge removes, and one more when its trash entry
expires, is emptied or is restored, through the real CLI; what a person
knows a session by, read from each agent's own files; a record that stays
readable after a kill and a removal that goes on when the record cannot be
written (a full disk)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentkeep import history
from agentkeep.adapters.base import load
from agentkeep.paths import Env
from agentkeep.statefiles import write_json
from agentkeep.trash.entries import entry_dir
from build_claude import ClaudeSessionPaths, jsonl, make_session
from build_codex import build_codex
from build_opencode import build_opencode
from fakehome import FakeHome, cli_json

pytestmark = pytest.mark.slow


def lines(fh: FakeHome, *args: str) -> list[dict[str, Any]]:
    code, doc, err = cli_json(fh, "history", *args)
    assert code == 0, err
    assert isinstance(doc, list)
    return doc


def by_id(doc: list[dict[str, Any]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in doc:
        found.setdefault(line["id"], []).append(line["why"])
    return found


def titled(fh: FakeHome, title: str, **kw: Any) -> ClaudeSessionPaths:
    """A Claude session whose first prompt is `title`."""
    s = make_session(fh, **kw)
    records = [json.loads(line) for line in s.transcript.read_text().splitlines()]
    for record in records:
        if record.get("type") == "user":
            record["message"]["content"] = title
            break
    st = s.transcript.stat()
    s.transcript.write_text(jsonl(records))
    os.utime(s.transcript, ns=(st.st_atime_ns, st.st_mtime_ns))
    return s


def expire(fh: FakeHome, sid: str) -> None:
    """Its trash entry's time is up."""
    path = entry_dir(fh.state, "claude", sid) / "entry.json"
    entry = json.loads(path.read_text())
    entry["expires_at"] = time.time() - 60
    write_json(path, entry)


def test_history_after_prune_purge_expiry_empty_and_restore(fake_home: FakeHome) -> None:
    web = titled(fake_home, "fix the login form", cwd="/home/u/webapp", age_days=40)
    cli = titled(fake_home, "add a --verbose flag", cwd="/home/u/cli", age_days=50)
    named = titled(fake_home, "named by a person", cwd="/home/u/cli", age_days=0.5)
    assert lines(fake_home) == [], "SETUP INVALID: a record before anything went"

    code, _report, err = cli_json(fake_home, "prune", "--older-than", "30d")
    assert code == 0, err
    code, _report, err = cli_json(fake_home, "purge", "claude", named.id)
    assert code == 0, err

    doc = lines(fake_home)
    assert [(g["id"], g["why"], g["restorable"]) for g in doc] == [
        (cli.id, "age", True),
        (web.id, "age", True),
        (named.id, "purge", True),
    ]
    [first] = [g for g in doc if g["id"] == web.id]
    assert first["title"] == "fix the login form"
    assert first["workspace"] == "/home/u/webapp" and first["agent"] == "claude"
    assert first["bytes"] > 0 and first["first_activity"] and first["last_activity"]
    assert first["first_activity"] <= first["last_activity"] <= first["time"]

    expire(fake_home, web.id)
    code, _report, err = cli_json(fake_home, "prune", "--older-than", "30d")  # expires the trash
    assert code == 0, err
    restored = fake_home.cli("restore", "claude", named.id)
    assert restored.returncode == 0, restored.stderr
    assert "named by a person" in restored.stdout, "restore names what it brought back"
    assert fake_home.cli("trash", "--empty").returncode == 0
    gone = fake_home.cli("restore", "claude", web.id)
    assert gone.returncode == 5, gone.stderr
    assert "went for good (expired)" in gone.stderr and "fix the login form" in gone.stderr
    again = fake_home.cli("restore", "claude", named.id)
    assert again.returncode == 5 and "it was restored at" in again.stderr, again.stderr

    doc = lines(fake_home)
    assert by_id(doc) == {
        cli.id: ["age", "emptied"],
        web.id: ["age", "expired"],
        named.id: ["purge", "restored"],
    }
    assert [g["why"] for g in doc][3:] == ["expired", "restored", "emptied"], "newest last"
    assert not any(g["restorable"] for g in doc), "nothing is in the trash any more"
    assert all(g["title"] for g in doc), "every line names its session"

    assert {g["id"] for g in lines(fake_home, "--workspace", "/home/u/cli")} == {cli.id, named.id}
    assert {g["id"] for g in lines(fake_home, "--grep", "LOGIN")} == {web.id}
    assert {g["id"] for g in lines(fake_home, "--grep", cli.id[:13])} == {cli.id}
    assert lines(fake_home, "--agent", "codex") == []
    text = fake_home.cli("history", env=dict(fake_home.environ, COLUMNS="160")).stdout
    assert "fix the login form" in text and "expired" in text
    assert text.index("add a --verbose flag") < text.index("emptied"), "newest last"


def test_a_line_says_restorable_while_its_session_is_in_the_trash(fake_home: FakeHome) -> None:
    s = titled(fake_home, "still in the trash", age_days=40)
    assert cli_json(fake_home, "purge", "claude", s.id)[0] == 0
    [line] = lines(fake_home)
    assert line["restorable"] is True
    text = fake_home.cli("history", env=dict(fake_home.environ, COLUMNS="160")).stdout
    assert "1 can be restored" in text


def test_a_removal_without_the_trash_is_recorded_not_restorable(fake_home: FakeHome) -> None:
    fake_home.write_config('trash = "0"\n')
    s = titled(fake_home, "gone at once", age_days=40)
    assert cli_json(fake_home, "purge", "claude", s.id)[0] == 0
    [line] = lines(fake_home)
    assert (line["why"], line["restorable"], line["title"]) == ("purge", False, "gone at once")


def test_a_dry_run_writes_no_line(fake_home: FakeHome) -> None:
    titled(fake_home, "stays", age_days=40)
    assert cli_json(fake_home, "prune", "--older-than", "30d", "--dry-run")[0] == 0
    assert lines(fake_home) == []


# -- forgetting -------------------------------------------------------------------


def write_lines(state: Path, *gone: history.Gone) -> None:
    record = history.Record(state)
    for g in gone:
        assert record.add(g)


def test_forget_one_session_or_what_is_older_than_an_age(fake_home: FakeHome) -> None:
    now = time.time()
    day = 86400.0
    write_lines(
        fake_home.state,
        history.Gone(now - 100 * day, "claude", "old-one", "age", False, title="long ago"),
        history.Gone(now - 100 * day, "codex", "old-two", "age", False),
        history.Gone(now - 2 * day, "claude", "kept-one", "purge", True, title="lately"),
        history.Gone(now - 1 * day, "claude", "named", "age", True),
        history.Gone(now, "claude", "named", "expired", False),
    )

    code, doc, err = cli_json(
        fake_home, "history", "--forget", "--agent", "claude", "--id", "named"
    )
    assert (code, doc) == (0, {"forgotten": 2}), err
    code, doc, err = cli_json(
        fake_home, "history", "--forget", "--older-than", "30d", "--agent", "claude"
    )
    assert (code, doc) == (0, {"forgotten": 1}), err
    assert [g["id"] for g in lines(fake_home)] == ["old-two", "kept-one"]
    code, doc, err = cli_json(fake_home, "history", "--forget", "--older-than", "30d")
    assert (code, doc) == (0, {"forgotten": 1}), err
    assert [g["id"] for g in lines(fake_home)] == ["kept-one"]


@pytest.mark.parametrize(
    "args",
    [
        ("--forget",),
        ("--forget", "--id", "x"),
        ("--forget", "--grep", "x", "--older-than", "1d"),
        ("--id", "x"),
        ("--older-than", "1d"),
        ("--forget", "--older-than", "soon"),
    ],
)
def test_a_forget_must_name_what_it_removes(fake_home: FakeHome, args: tuple[str, ...]) -> None:
    write_lines(fake_home.state, history.Gone(0.0, "claude", "a", "age", False))
    before = (fake_home.state / "history.jsonl").read_bytes()
    proc = fake_home.cli("history", *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip()
    assert (fake_home.state / "history.jsonl").read_bytes() == before


# -- what a kill or a full disk leaves -------------------------------------------


def test_a_line_cut_by_a_kill_is_passed_over_and_the_next_starts_clean(
    fake_home: FakeHome,
) -> None:
    write_lines(fake_home.state, history.Gone(1.0, "claude", "whole", "age", False))
    with (fake_home.state / "history.jsonl").open("ab") as f:
        f.write(b'{"agent": "claude", "id": "cut sh')  # what a kill mid-write leaves
    s = titled(fake_home, "after the kill", age_days=40)
    assert cli_json(fake_home, "purge", "claude", s.id)[0] == 0
    assert [g["id"] for g in lines(fake_home)] == ["whole", s.id]


# Every file this process writes stops growing past LIMIT bytes (a file
# size limit): the record, filled to it beforehand, cannot take a line,
# while the small files a prune writes (journal, trash entries) still can.
LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))
sys.argv = ["agentkeep", *sys.argv[1:]]
from agentkeep.cli import main
main()
"""


def test_a_record_that_cannot_be_written_loses_no_removal(fake_home: FakeHome) -> None:
    filler = [
        history.Gone(float(n), "claude", f"filler-{n}", "age", False, title="x" * 60)
        for n in range(8000)
    ]
    write_lines(fake_home.state, *filler)
    size = (fake_home.state / "history.jsonl").stat().st_size
    olds = [titled(fake_home, f"old {n}", age_days=40 + n) for n in range(3)]
    code = LIMITED.format(limit=size)
    prune = [sys.executable, "-c", code, "prune", "--older-than", "30d", "--json"]

    proc = subprocess.run(prune, env=fake_home.environ, capture_output=True, text=True)

    assert proc.returncode == 0, proc.stderr
    assert proc.returncode != -signal.SIGXFSZ
    report = json.loads(proc.stdout)
    assert sorted(r["id"] for r in report["removed"]) == sorted(s.id for s in olds)
    assert not any(s.transcript.exists() for s in olds), "every removal went on"
    assert "not in the record of what went" in proc.stderr, "and it says so"
    assert (fake_home.state / "history.jsonl").stat().st_size == size, "SETUP INVALID"
    # Room again: the record reads as before, and takes lines again.
    assert len(lines(fake_home)) == len(filler)
    s = titled(fake_home, "with room again", age_days=40)
    assert cli_json(fake_home, "purge", "claude", s.id)[0] == 0
    assert lines(fake_home)[-1]["title"] == "with room again"


# -- what each agent's files say ----------------------------------------------------


def describe(fh: FakeHome, agent: str, sid: str) -> tuple[str | None, float | None]:
    adapter = importlib.import_module(f"agentkeep.adapters.{agent}").ADAPTER(
        Env.from_environ(fh.environ)
    )
    s = load(adapter, sid)
    assert s is not None, "SETUP INVALID: the session is not listed"
    described = adapter.describe(s)
    return described.title, described.started


def test_claude_a_summary_before_the_first_prompt_and_no_command_for_one(
    fake_home: FakeHome,
) -> None:
    plain = titled(fake_home, "<command-name>/clear</command-name>", age_days=40)
    records = [json.loads(line) for line in plain.transcript.read_text().splitlines()]
    users = [r for r in records if r.get("type") == "user"]
    if len(users) < 2:
        pytest.fail("SETUP INVALID: one user record")
    users[1]["message"]["content"] = [{"type": "text", "text": "  the real\n  question  " * 8}]
    plain.transcript.write_text(jsonl(records))
    title, started = describe(fake_home, "claude", plain.id)
    assert title is not None and title.startswith("the real question the real question")
    assert len(title) == 80 and title.endswith("…")
    assert started is not None and abs(started - plain.mtime) < 86400 * 400

    resumed = make_session(fake_home, age_days=40)
    summary = {"type": "summary", "summary": "Login form bug", "leafUuid": "x"}
    resumed.transcript.write_text(jsonl([summary]) + resumed.transcript.read_text())
    assert describe(fake_home, "claude", resumed.id)[0] == "Login form bug"


def test_claude_the_head_is_read_without_moving_its_atime(fake_home: FakeHome) -> None:
    s = titled(fake_home, "read me quietly", age_days=40)
    os.utime(s.transcript, ns=(1_000_000_000_000_000_000, 1_100_000_000_000_000_000))
    assert describe(fake_home, "claude", s.id)[0] == "read me quietly"
    assert s.transcript.stat().st_atime_ns == 1_000_000_000_000_000_000


def test_codex_the_threads_name_or_title_else_the_first_prompt(fake_home: FakeHome) -> None:
    tree = build_codex(fake_home)
    sid = tree.full_session()
    assert describe(fake_home, "codex", sid)[0] == "a title"

    alone = "0199a000-0000-7000-8000-00000000c0de"
    path = tree.rollout(alone)
    prompt = {"type": "event_msg", "payload": {"type": "user_message", "message": "ship it"}}
    with path.open("a") as f:
        f.write(json.dumps(prompt) + "\n")
    title, started = describe(fake_home, "codex", alone)
    assert title == "ship it"
    assert started == 1_767_605_400.0  # session_meta's 2026-01-05T09:30:00Z


def test_opencode_its_title_from_the_row_or_the_session_json(fake_home: FakeHome) -> None:
    tree = build_opencode(fake_home)
    tree.session_rows("ses_withrow01")
    title, started = describe(fake_home, "opencode", "ses_withrow01")
    assert title == "a session" and started is not None

    older = build_opencode(fake_home)
    older.session_json("ses_injson001")
    assert describe(fake_home, "opencode", "ses_injson001")[0] == "a session"


def test_gemini_the_first_prompt_not_its_session_context(fake_home: FakeHome) -> None:
    from build_agents import make_gemini_session

    sid = "5b5e8d2a-0000-4000-8000-00000000beef"
    made = make_gemini_session(fake_home.home / ".gemini", sid, days=40)
    title, started = describe(fake_home, "gemini", sid)
    assert title == "hi" and started is not None
    # As 0.61 wrote a subagent's chat: its context a message of its own.
    records = [json.loads(line) for line in made.chat.read_text().splitlines()]
    context = {"type": "user", "content": [{"text": "<session_context>\nThis is the Gemini CLI."}]}
    made.chat.write_text(jsonl([records[0], context, *records[1:]]))
    assert describe(fake_home, "gemini", sid)[0] == "hi"


def test_qwen_its_custom_title_else_the_prompt_as_typed(fake_home: FakeHome) -> None:
    from build_qwen import QwenTree
    from build_qwen import jsonl as qwen_jsonl

    s = QwenTree(fake_home.home / ".qwen").session("/work/q", days=40)
    records = [json.loads(line) for line in s.chat.read_text().splitlines()]
    user = next(r for r in records if r["type"] == "user")
    # As Qwen writes a prompt with an @file expanded: what was typed beside it.
    user["message"]["parts"] = [{"text": "expanded @notes.md ..."}]
    user["systemPayload"] = {"displayText": "fix  the\nbuild"}
    s.chat.write_text(qwen_jsonl(records))
    title, started = describe(fake_home, "qwen", s.id)
    assert title == "fix the build"
    assert started is not None and abs(started - (time.time() - 40 * 86400)) < 60

    renamed = {**records[-1], "type": "system", "subtype": "custom_title"}
    renamed.pop("message")
    titles = ["first name", "the name it has now"]
    extra = [
        {**renamed, "systemPayload": {"customTitle": t, "titleSource": "manual"}} for t in titles
    ]
    s.chat.write_text(qwen_jsonl([*records, *extra]))
    assert describe(fake_home, "qwen", s.id)[0] == "the name it has now"


def test_pi_its_name_else_its_first_prompt(fake_home: FakeHome) -> None:
    from build_pi import PiTree

    tree = PiTree(fake_home.home / ".pi" / "agent" / "sessions", Path(fake_home.environ["TMPDIR"]))
    s = tree.session("/work/p", days=40)
    title, started = describe(fake_home, "pi", s.id)
    assert title == "run it"
    assert started is not None and abs(started - (time.time() - 40 * 86400)) < 60

    info = {"type": "session_info", "id": "ab12cd34", "timestamp": "2026-01-01T00:00:00.000Z"}
    with s.file.open("a") as f:
        f.write(json.dumps({**info, "name": "  deploy script  "}) + "\n")
    assert describe(fake_home, "pi", s.id)[0] == "deploy script"
    with s.file.open("a") as f:  # an empty name clears it, as pi reads it
        f.write(json.dumps({**info, "name": ""}) + "\n")
    assert describe(fake_home, "pi", s.id)[0] == "run it"


def test_copilot_its_name_else_its_first_prompt(fake_home: FakeHome) -> None:
    from build_copilot import CopilotTree

    env = fake_home.environ
    tree = CopilotTree(
        Path(env["COPILOT_HOME"]), Path(env["TMPDIR"]), Path(env["XDG_STATE_HOME"]) / ".copilot"
    )
    made = tree.session(when=time.time() - 40 * 86400)
    assert made.dir is not None
    yaml = made.dir / "workspace.yaml"
    text = yaml.read_text()
    assert "name: say hello\n" in text, "SETUP INVALID: the builder's name"
    for written, shown in [
        ("name: 'it''s: quoted'\n", "it's: quoted"),
        ('name: "fix \\"the\\" bug"\n', 'fix "the" bug'),
        ("name: Plain name\n", "Plain name"),
        ("name: |\n  a block\n", "say hello"),  # no name: its first prompt
    ]:
        yaml.write_text(text.replace("name: say hello\n", written))
        title, started = describe(fake_home, "copilot", made.id)
        assert title == shown, written
        assert started is not None
