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


def entry(agent: str, sid: str, started: float, paths: list[str], trash: bool) -> JournalEntry:
    return JournalEntry(agent, sid, started, paths, trash)


def ids(entries: list[JournalEntry]) -> list[tuple[str, str]]:
    return [(e.agent, e.id) for e in entries]


def test_a_batch_round_trips_oldest_first(state: Path) -> None:
    j = Journal(state)
    assert j.pending() == []
    first = [
        entry("claude", "0b7c-1", 100.0, ["/h/.claude/projects/k/0b7c-1.jsonl"], True),
        entry("codex-issue-stores", "issue/42", 50.0, ["/h/.codex/s/issue/42"], False),
    ]
    j.begin_batch(first)
    j.begin_batch([entry("grok", "g1", 75.0, [], False)])

    pending = Journal(state).pending()  # a fresh run reads what the last one left
    assert ids(pending) == [
        ("codex-issue-stores", "issue/42"),
        ("grok", "g1"),
        ("claude", "0b7c-1"),
    ]
    assert pending[2] == first[0]
    assert stat.S_IMODE((state / "journal").stat().st_mode) == 0o700
    for name in files_below(state / "journal"):
        assert stat.S_IMODE((state / "journal" / name).stat().st_mode) == 0o600


def test_end_batch_forgets_only_its_own_batch(state: Path) -> None:
    j = Journal(state)
    a = j.begin_batch([entry("claude", "a", 1.0, ["/a"], True)])
    j.begin_batch([entry("claude", "b", 2.0, ["/b"], True)])
    j.end_batch(a)
    j.end_batch(a)  # already gone: fine
    assert ids(j.pending()) == [("claude", "b")]


def test_narrowing_keeps_only_the_unfinished_removals(state: Path) -> None:
    j = Journal(state)
    batch = [entry("claude", sid, n, [f"/{sid}"], False) for n, sid in enumerate("abc")]
    path = j.begin_batch(batch)
    j.narrow_batch(path, [batch[1]])
    assert j.pending() == [batch[1]]


def test_a_batch_goes_once_every_entry_of_it_is_settled(state: Path) -> None:
    j = Journal(state)
    j.begin_batch([entry("claude", "a", 1.0, [], False), entry("claude", "b", 2.0, [], False)])
    j.begin_batch([entry("claude", "c", 3.0, [], False)])
    unsettled = j.pending()
    a, b, c = unsettled

    j.settle(a, [b, c])  # b is still to be settled: the batch stays
    assert ids(j.pending()) == [("claude", "a"), ("claude", "b"), ("claude", "c")]
    j.settle(c, [b])
    assert ids(j.pending()) == [("claude", "a"), ("claude", "b")]
    j.settle(b, [])
    assert j.pending() == []
    assert files_below(state / "journal") == []


def test_unreadable_entries_are_skipped(state: Path) -> None:
    j = Journal(state)
    j.begin_batch([entry("claude", "good", 1.0, ["/x"], True)])
    folder = state / "journal" / "claude"
    folder.mkdir()
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
    (state / "journal" / "batch-1-1.json").write_text('{"batch": [{"agent": "../x"}]}')
    (state / "journal" / "batch-2-1.json").write_text('{"batch": 3}')
    (state / "journal" / "batch-3-1.json").write_text("[]")

    assert [e.id for e in j.pending()] == ["good"]


def test_a_full_disk_raises_and_leaves_nothing_claiming_a_removal(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []

    def full(path: Path) -> None:
        calls.append(path)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    j = Journal(state)
    earlier = [entry("claude", "earlier", 1.0, ["/e"], True), entry("claude", "x", 1.5, [], True)]
    path = j.begin_batch(earlier)
    monkeypatch.setattr(journal, "_write_hook", full)
    with pytest.raises(OSError) as raised:
        j.begin_batch([entry("claude", "s", 2.0, ["/a"], True)])
    assert raised.value.errno == errno.ENOSPC
    assert calls, "SETUP INVALID: the write never reached the hook"
    assert j.pending() == earlier
    assert files_below(state / "journal") == [path.name]

    # A failed narrowing keeps the whole batch.
    with pytest.raises(OSError):
        j.narrow_batch(path, earlier[:1])
    assert j.pending() == earlier


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
        Journal(state).begin_batch([entry("claude", "s", 1.0, ["/a"], False)])
    assert seen_tmp == [True], "SETUP INVALID: the failure did not come after the data was written"
    assert files_below(state / "journal") == []
    assert Journal(state).pending() == []


def test_bad_agent_names_are_refused(state: Path) -> None:
    with pytest.raises(ValueError):
        Journal(state).begin_batch([entry("../x", "s", 1.0, [], False)])
    assert not (state / "journal").exists() or files_below(state / "journal") == []
