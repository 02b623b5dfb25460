"""`agentkeep adopt AGENT [--dry-run] [--undo] [--json]` through the real CLI,
on settings files as people keep them: comments where the agent reads them,
keys agentkeep does not know, their order, unicode, CRLF, a link to a
dotfiles checkout, a missing file, one that does not parse, a read-only one.
An adopt then its undo gives back the file byte for byte."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from fakehome import FakeHome

pytestmark = pytest.mark.slow

CLAUDE_SETTINGS = """{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "model": "opus",
  "cleanupPeriodDays": 30,
  "permissions": {
    "allow": ["Bash(npm run test:*)", "Read(~/.zshrc)"],
    "deny": []
  },
  "env": {"GREETING": "grüß dich ✓", "EMPTY": ""},
  "statusLine": {"type": "command", "command": "printf '%s' \\"$PWD\\""}
}
"""

GEMINI_SETTINGS = """{
  // Managed by hand: keep the theme.
  "ui": { "theme": "GitHub" },
  "general": {
    "vimMode": true, /* since 0.40 */
    "preferredEditor": "vim"
  },
  "mcpServers": {"local": {"command": "node", "args": ["server.js", "--port=8080//x"]}}
}
"""


def adopt(fh: FakeHome, *args: str) -> tuple[int, Any, str]:
    """`agentkeep adopt ARGS --json`: (exit status, the document, stderr)."""
    done = fh.cli("adopt", *args, "--json")
    doc = json.loads(done.stdout) if done.stdout.strip() else None
    return done.returncode, doc, done.stderr


def text(fh: FakeHome, *args: str) -> tuple[int, str, str]:
    done = fh.cli("adopt", *args)
    return done.returncode, done.stdout, done.stderr


def claude_file(fh: FakeHome, content: str | bytes) -> Path:
    fh.claude.mkdir(parents=True, exist_ok=True)
    path = fh.claude / "settings.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def gemini_file(fh: FakeHome, content: str | bytes) -> Path:
    root = fh.home / ".gemini"
    root.mkdir(parents=True, exist_ok=True)
    path = root / "settings.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def qwen_file(fh: FakeHome, content: str | bytes) -> Path:
    root = Path(fh.environ["QWEN_HOME"])
    root.mkdir(parents=True, exist_ok=True)
    path = root / "settings.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def record(fh: FakeHome, agent: str) -> Path:
    return fh.state / "adopted" / f"{agent}.json"


# -- adopt, then undo: byte for byte ---------------------------------------------


def test_claude_value_replaced_in_place_and_put_back_byte_for_byte(fake_home: FakeHome) -> None:
    path = claude_file(fake_home, CLAUDE_SETTINGS)
    os.chmod(path, 0o644)

    code, doc, err = adopt(fake_home, "claude")

    assert code == 0, err
    assert doc == {
        "agent": "claude",
        "file": str(path),
        "key": "cleanupPeriodDays",
        "before": 30,
        "after": 99999,
        "dry_run": False,
        "undone": False,
    }
    assert path.read_text() == CLAUDE_SETTINGS.replace(
        '"cleanupPeriodDays": 30', '"cleanupPeriodDays": 99999'
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o644, "the file's mode is kept"
    assert record(fake_home, "claude").exists()

    code, doc, err = adopt(fake_home, "claude", "--undo")

    assert code == 0, err
    assert (doc["before"], doc["after"], doc["undone"]) == (99999, 30, True)
    assert path.read_bytes() == CLAUDE_SETTINGS.encode()
    assert not record(fake_home, "claude").exists(), "an undo done forgets its record"


@pytest.mark.parametrize(
    ("agent", "write", "content"),
    [
        ("claude", claude_file, CLAUDE_SETTINGS.replace('  "cleanupPeriodDays": 30,\n', "")),
        ("claude", claude_file, '{"model":"opus"}'),
        ("claude", claude_file, "{}"),
        ("claude", claude_file, '\ufeff{\r\n  "model": "opus"\r\n}\r\n'),
        ("gemini", gemini_file, GEMINI_SETTINGS),
        ("gemini", gemini_file, '{"ui": {"theme": "GitHub"}}\n'),
        (
            "gemini",
            gemini_file,
            '{\n\t"general": {\n\t\t"sessionRetention": {\n\t\t\t"maxAge": "7d"\n\t\t}\n\t}\n}',
        ),
        (
            "gemini",
            gemini_file,
            '{\n  "general": {\n    "sessionRetention": {"enabled": true}\n  }\n}\n',
        ),
        ("gemini", gemini_file, "{ // nothing yet\n}\n"),
        (
            "qwen",
            qwen_file,
            '\ufeff{\n  // mine\n  "general": {"enableAutoUpdate": false},\n  "$version": 4\n}\n',
        ),
        ("qwen", qwen_file, '{\n    "general": {\n        "cleanupPeriodDays": 0\n    }\n}'),
    ],
)
def test_adopt_then_undo_gives_back_the_file_byte_for_byte(
    fake_home: FakeHome, agent: str, write: Any, content: str
) -> None:
    path = write(fake_home, content)
    original = path.read_bytes()

    code, doc, err = adopt(fake_home, agent)
    changed = path.read_bytes()
    undone, back, err2 = adopt(fake_home, agent, "--undo")

    assert code == 0, err
    assert doc["after"] == (False if agent == "gemini" else 99999)
    assert changed != original
    assert undone == 0, err2
    assert back["undone"] is True
    assert path.read_bytes() == original


def test_what_adopt_writes_reads_as_the_same_settings_and_one_more(fake_home: FakeHome) -> None:
    path = gemini_file(fake_home, GEMINI_SETTINGS)

    code, _, err = adopt(fake_home, "gemini")

    assert code == 0, err
    written = path.read_text()
    # Every line the user wrote is still there, the comments with them.
    lines = written.splitlines()
    assert [line for line in GEMINI_SETTINGS.splitlines() if line not in lines] == [
        '    "preferredEditor": "vim"'
    ]
    assert written == GEMINI_SETTINGS.replace(
        '    "preferredEditor": "vim"\n',
        '    "preferredEditor": "vim",\n    "sessionRetention": {\n      "enabled": false\n    }\n',
    )


def test_text_shows_the_change_before_it_is_made(fake_home: FakeHome) -> None:
    path = claude_file(fake_home, '{"model": "opus"}\n')

    code, out, err = text(fake_home, "claude")

    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == [f"claude: {path}", "  cleanupPeriodDays: (unset) -> 99999"]
    assert "`agentkeep adopt claude --undo` puts it back" in out
    assert "agentkeep has no retention for claude" in out, "nothing would remove them now"
    code, out, err = text(fake_home, "claude")
    assert code == 0, err
    assert "  cleanupPeriodDays: 99999 (already leaves sessions to agentkeep)" in out
    code, out, err = text(fake_home, "claude", "--undo")
    assert code == 0, err
    assert out.splitlines()[1:] == [
        "  cleanupPeriodDays: 99999 -> (unset)",
        "put back as it was before adopt",
    ]


def test_dry_run_only_shows(fake_home: FakeHome) -> None:
    path = qwen_file(fake_home, '{"general": {"cleanupPeriodDays": 7}}')

    code, out, err = text(fake_home, "qwen", "--dry-run")
    jcode, doc, _ = adopt(fake_home, "qwen", "--dry-run")

    assert code == jcode == 0, err
    assert "  general.cleanupPeriodDays: 7 -> 99999" in out and "dry run: nothing written" in out
    assert doc["dry_run"] is True and (doc["before"], doc["after"]) == (7, 99999)
    assert path.read_text() == '{"general": {"cleanupPeriodDays": 7}}'
    assert not record(fake_home, "qwen").exists()


def test_a_missing_file_is_made_and_undo_takes_it_away(fake_home: FakeHome) -> None:
    fake_home.claude.mkdir()
    path = fake_home.claude / "settings.json"

    code, doc, err = adopt(fake_home, "claude")

    assert code == 0, err
    assert doc["before"] is None
    assert path.read_text() == '{\n  "cleanupPeriodDays": 99999\n}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    code, _, err = adopt(fake_home, "claude", "--undo")
    assert code == 0, err
    assert not path.exists()


def test_a_missing_agent_folder_is_not_made(fake_home: FakeHome) -> None:
    code, doc, err = adopt(fake_home, "gemini")

    assert code == 1 and doc is None
    assert f"{fake_home.home / '.gemini'} does not exist" in err
    assert not (fake_home.home / ".gemini").exists()


def test_a_linked_settings_file_stays_a_link(fake_home: FakeHome) -> None:
    dotfiles = fake_home.home / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(CLAUDE_SETTINGS)
    fake_home.claude.mkdir()
    link = fake_home.claude / "settings.json"
    link.symlink_to(dotfiles)

    code, doc, err = adopt(fake_home, "claude")

    assert code == 0, err
    assert doc["file"] == str(link)
    assert link.is_symlink() and os.readlink(link) == str(dotfiles)
    assert '"cleanupPeriodDays": 99999' in dotfiles.read_text()
    code, _, err = adopt(fake_home, "claude", "--undo")
    assert code == 0, err
    assert link.is_symlink() and dotfiles.read_text() == CLAUDE_SETTINGS


# -- refused, nothing written ----------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "write", "content", "why"),
    [
        (
            "claude",
            claude_file,
            '{\n  // mine\n  "model": "opus"\n}',
            "a comment, which Claude Code cannot read at line 2",
        ),
        ("claude", claude_file, '{"model": "opus",}', "a comma before '}'"),
        ("claude", claude_file, "", "the end of the text where a value belongs"),
        ("claude", claude_file, "[]", "the document in {path} is [], not an object"),
        ("claude", claude_file, b'{"model": "\xff"}', "is not UTF-8 (at byte 11)"),
        (
            "claude",
            claude_file,
            '{"cleanupPeriodDays": 30, "cleanupPeriodDays": 7}',
            "sets cleanupPeriodDays more than once",
        ),
        (
            "gemini",
            gemini_file,
            '\ufeff{"general": {}}',
            "byte order mark, which Gemini CLI cannot read",
        ),
        (
            "gemini",
            gemini_file,
            '{"general": "none"}',
            'general in {path} is "none", not an object',
        ),
        (
            "gemini",
            gemini_file,
            '{"general": {"sessionRetention": true}}',
            "general.sessionRetention in {path} is true",
        ),
        ("qwen", qwen_file, '{"general": {"x": 1} /* open', "a comment that never ends"),
    ],
)
def test_a_file_the_agent_cannot_read_is_refused_with_exit_2(
    fake_home: FakeHome, agent: str, write: Any, content: str | bytes, why: str
) -> None:
    path = write(fake_home, content)
    before = path.read_bytes()

    code, doc, err = adopt(fake_home, agent)

    assert code == 2 and doc is None
    assert str(path) in err and why.replace("{path}", str(path)) in err, err
    assert "nothing changed" in err
    assert path.read_bytes() == before
    assert not record(fake_home, agent).exists()


def test_a_read_only_file_a_hard_linked_one_are_refused(fake_home: FakeHome) -> None:
    path = claude_file(fake_home, CLAUDE_SETTINGS)
    os.chmod(path, 0o444)

    code, _, err = adopt(fake_home, "claude")

    assert code == 1 and f"{path} is read-only" in err
    assert path.read_text() == CLAUDE_SETTINGS
    os.chmod(path, 0o644)
    os.link(path, fake_home.home / "second-name.json")
    code, _, err = adopt(fake_home, "claude")
    assert code == 1 and "has 2 names (hard links)" in err
    assert path.read_text() == CLAUDE_SETTINGS and not record(fake_home, "claude").exists()


@pytest.mark.parametrize(
    ("agent", "why"),
    [
        ("codex", "codex has no clean-up of its own on a timer: nothing to adopt"),
        ("chatgpt", "no such agent: chatgpt"),
    ],
)
def test_an_agent_adopt_does_not_know_is_a_usage_error(
    fake_home: FakeHome, agent: str, why: str
) -> None:
    code, doc, err = adopt(fake_home, agent)

    assert code == 2 and doc is None
    assert why in err and "(adopt knows claude, gemini, qwen)" in err


def test_a_relative_folder_variable_is_refused(fake_home: FakeHome) -> None:
    fake_home.environ["CLAUDE_CONFIG_DIR"] = "dotclaude"

    code, _, err = adopt(fake_home, "claude")

    assert code == 2 and "CLAUDE_CONFIG_DIR=dotclaude is relative" in err


def test_a_bad_agentkeep_config_does_not_stop_adopt(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "soon"\n')
    path = claude_file(fake_home, "{}")

    code, _, err = adopt(fake_home, "claude")

    assert code == 0, err
    assert json.loads(path.read_text()) == {"cleanupPeriodDays": 99999}


# -- undo ---------------------------------------------------------------------------


def test_undo_never_writes_over_a_value_set_since(fake_home: FakeHome) -> None:
    path = claude_file(fake_home, CLAUDE_SETTINGS)
    assert adopt(fake_home, "claude")[0] == 0
    since = path.read_text().replace('"cleanupPeriodDays": 99999', '"cleanupPeriodDays": 60')
    path.write_text(since)

    code, doc, err = adopt(fake_home, "claude", "--undo")

    assert code == 1 and doc is None
    assert "cleanupPeriodDays in" in err and "is 60 now, not the 99999 adopt set" in err
    assert "changed since" in err
    assert path.read_text() == since
    assert record(fake_home, "claude").exists(), "the record stays while undo is refused"


def test_undo_keeps_what_else_changed_in_the_file_since(fake_home: FakeHome) -> None:
    """An agent rewrites its own settings (Qwen Code adds `$version` and lays
    out the object again at start): undo still takes out only the setting."""
    path = qwen_file(fake_home, '{"general": {"enableAutoUpdate": false}}')
    assert adopt(fake_home, "qwen")[0] == 0
    assert (
        path.read_text() == '{"general": {"enableAutoUpdate": false, "cleanupPeriodDays": 99999}}'
    )
    rewritten = (
        '{\n  "general": {\n    "enableAutoUpdate": false,\n    "cleanupPeriodDays": 99999\n  },\n'
        '  "$version": 4\n}\n'
    )
    path.write_text(rewritten)

    code, doc, err = adopt(fake_home, "qwen", "--undo")

    assert code == 0, err
    assert doc["after"] is None
    assert (
        path.read_text()
        == '{\n  "general": {\n    "enableAutoUpdate": false\n  },\n  "$version": 4\n}\n'
    )


def test_undo_of_a_created_object_keeps_what_the_user_put_in_it(fake_home: FakeHome) -> None:
    path = gemini_file(fake_home, '{"ui": {}}')
    assert adopt(fake_home, "gemini")[0] == 0
    assert path.read_text() == '{"ui": {}, "general": {"sessionRetention": {"enabled": false}}}'
    path.write_text(
        '{"ui": {}, "general": {"sessionRetention": {"enabled": false, "maxAge": "90d"}}}'
    )

    code, _, err = adopt(fake_home, "gemini", "--undo")

    assert code == 0, err
    assert path.read_text() == '{"ui": {}, "general": {"sessionRetention": {"maxAge": "90d"}}}'


def test_undo_with_nothing_recorded_says_so(fake_home: FakeHome) -> None:
    claude_file(fake_home, '{"cleanupPeriodDays": 100000}')

    code, doc, err = adopt(fake_home, "claude")
    assert code == 0 and doc["before"] == doc["after"] == 100000, "already keeps: left as it is"
    code, _, err = adopt(fake_home, "claude", "--undo")

    assert code == 1 and "nothing to undo" in err


def test_adopt_twice_then_undo_puts_back_the_first(fake_home: FakeHome) -> None:
    path = claude_file(fake_home, CLAUDE_SETTINGS)

    assert adopt(fake_home, "claude")[0] == 0
    assert adopt(fake_home, "claude")[0] == 0
    code, _, err = adopt(fake_home, "claude", "--undo")

    assert code == 0, err
    assert path.read_text() == CLAUDE_SETTINGS


def test_undo_when_the_user_already_put_it_back(fake_home: FakeHome) -> None:
    path = claude_file(fake_home, CLAUDE_SETTINGS)
    assert adopt(fake_home, "claude")[0] == 0
    path.write_text(CLAUDE_SETTINGS)

    code, doc, err = adopt(fake_home, "claude", "--undo")

    assert code == 0, err
    assert doc["before"] == doc["after"] == 30
    assert not record(fake_home, "claude").exists()


def test_a_record_others_can_write_to_is_never_read(fake_home: FakeHome) -> None:
    """A record says what undo writes into an agent's settings: in a folder
    another user can write to, it could have been planted."""
    path = claude_file(fake_home, CLAUDE_SETTINGS)
    assert adopt(fake_home, "claude")[0] == 0
    adopted = path.read_text()
    os.chmod(fake_home.state / "adopted", 0o777)

    code, _, err = adopt(fake_home, "claude", "--undo")

    assert code == 1 and str(fake_home.state / "adopted") in err
    assert path.read_text() == adopted


@pytest.mark.parametrize("kind", [["replace"], {"replace": 1}, 7])
def test_a_record_of_another_shape_is_named_damaged_and_nothing_is_written(
    fake_home: FakeHome, kind: object
) -> None:
    """A record whose kind is no name adopt writes is "not a record of
    adopt", whatever JSON stands there, and undo writes nothing."""
    path = claude_file(fake_home, CLAUDE_SETTINGS)
    assert adopt(fake_home, "claude")[0] == 0
    adopted = path.read_text()
    saved = json.loads(record(fake_home, "claude").read_text())
    record(fake_home, "claude").write_text(json.dumps({**saved, "kind": kind}))

    code, _, err = adopt(fake_home, "claude", "--undo")

    assert code == 1, err
    assert "is damaged (not a record of adopt)" in err
    assert path.read_text() == adopted
