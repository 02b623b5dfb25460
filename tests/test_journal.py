"""The removal journal: durable intent, finished next run, never crashing."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from agentkeep import journal
from agentkeep.journal import Journal, JournalEntry


@pytest.fixture
def state(fake_home) -> Path:
    return fake_home.state


def files_below(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def test_begin_done_pending_round_trip(state: Path) -> None:
    j = Journal(state)
    assert j.pending() == []
    j.begin("claude", "0b7c-1", ["/h/.claude/projects/k/0b7c-1.jsonl"], trash=True, started=100.0)
    j.begin("codex-issue-stores", "issue/42", ["/h/.codex/s/issue/42"], trash=False, started=50.0)
    j.begin("grok", "g1", [], trash=False)

    pending = Journal(state).pending()  # a fresh run reads what the last one left
    assert [(e.agent, e.id) for e in pending[:2]] == [
        ("codex-issue-stores", "issue/42"),
        ("claude", "0b7c-1"),
    ]
    assert pending[1] == JournalEntry(
        "claude", "0b7c-1", 100.0, ["/h/.claude/projects/k/0b7c-1.jsonl"], True
    )
    assert pending[2].agent == "grok" and pending[2].started > 1_000_000_000

    assert stat.S_IMODE((state / "journal").stat().st_mode) == 0o700
    for name in files_below(state / "journal"):
        assert stat.S_IMODE((state / "journal" / name).stat().st_mode) == 0o600
    assert "codex-issue-stores/issue%2F42.json" in files_below(state / "journal")

    j.done("claude", "0b7c-1")
    j.done("claude", "0b7c-1")  # already done: fine
    j.done("grok", "g1")
    assert [(e.agent, e.id) for e in j.pending()] == [("codex-issue-stores", "issue/42")]


def test_begin_again_replaces_the_entry(state: Path) -> None:
    j = Journal(state)
    j.begin("claude", "s", ["/a"], trash=True, started=1.0)
    j.begin("claude", "s", ["/a", "/b"], trash=False, started=2.0)
    assert j.pending() == [JournalEntry("claude", "s", 2.0, ["/a", "/b"], False)]
    assert files_below(state / "journal") == ["claude/s.json"]


def test_unreadable_entries_are_skipped(state: Path) -> None:
    j = Journal(state)
    j.begin("claude", "good", ["/x"], trash=True, started=1.0)
    folder = state / "journal" / "claude"
    (folder / "garbage.json").write_text("{not json")
    (folder / "binary.json").write_bytes(b"\xff\xfe\x00")
    (folder / "wrong-types.json").write_text(
        json.dumps(
            {"agent": "claude", "id": "wrong-types", "started": "now", "paths": [], "trash": 1}
        )
    )
    (folder / "list.json").write_text("[1, 2]")
    (folder / "elsewhere.json").write_text(
        json.dumps({"agent": "claude", "id": "other", "started": 1, "paths": [], "trash": True})
    )
    (folder / "half.json.tmp").write_text('{"agent": "cl')
    unreadable = folder / "unreadable.json"
    unreadable.mkdir()  # reading a directory fails with an OSError
    (state / "journal" / "stray-file").write_text("not a folder")

    assert [e.id for e in j.pending()] == ["good"]


def test_a_full_disk_raises_and_leaves_nothing_claiming_a_removal(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []

    def full(path: Path) -> None:
        calls.append(path)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    j = Journal(state)
    j.begin("claude", "earlier", ["/e"], trash=True, started=1.0)
    monkeypatch.setattr(journal, "_write_hook", full)
    with pytest.raises(OSError) as raised:
        j.begin("claude", "s", ["/a"], trash=True, started=2.0)
    assert raised.value.errno == errno.ENOSPC
    assert calls, "SETUP INVALID: the write never reached the hook"
    assert [e.id for e in j.pending()] == ["earlier"]
    assert files_below(state / "journal") == ["claude/earlier.json"]

    # A failed rewrite keeps the record of an interrupted removal.
    with pytest.raises(OSError):
        j.begin("claude", "earlier", ["/e", "/f"], trash=True, started=3.0)
    assert j.pending() == [JournalEntry("claude", "earlier", 1.0, ["/e"], True)]


def test_a_failure_after_the_data_is_written_leaves_no_temporary_file(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_tmp: list[bool] = []

    def full_at_rename(path: Path) -> None:
        if path.suffix == ".json":
            seen_tmp.append(any(p.name.endswith(".tmp") for p in path.parent.iterdir()))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(journal, "_write_hook", full_at_rename)
    with pytest.raises(OSError):
        Journal(state).begin("claude", "s", ["/a"], trash=False)
    assert seen_tmp == [True], "SETUP INVALID: the failure did not come after the data was written"
    assert files_below(state / "journal") == []
    assert Journal(state).pending() == []


def test_bad_agent_names_are_refused(state: Path) -> None:
    with pytest.raises(ValueError):
        Journal(state).begin("../x", "s", [], trash=False)
    assert not (state / "journal").exists() or files_below(state / "journal") == []
