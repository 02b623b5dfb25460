"""fsio's rules, each on real files: a link planted at a name is refused
unless followed, a FIFO never hangs a read, a file past its limit is
refused, reading or listing moves no atime, and a replace that fails leaves
the old file and no temporary one."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentkeep import fsio

# An atime far enough in the past that relatime would move it on a read.
LONG_AGO = 1_000_000_000


@contextmanager
def no_hang(seconds: int = 5) -> Iterator[None]:
    """Fail, rather than hang the run, when the block blocks."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_link_planted_at_the_name_is_refused_unless_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text('{"secret": 1}')
    planted = tmp_path / "state.json"
    planted.symlink_to(target)

    with pytest.raises(fsio.NotRegularFile) as refused:
        fsio.read_regular(planted)
    assert str(planted) in str(refused.value)
    assert fsio.open_quietly(planted) is None
    assert fsio.read_head(planted, 100) is None
    assert fsio.read_small_json(planted, 100) is None
    assert fsio.read_regular(planted, follow=True) == b'{"secret": 1}'


def test_a_fifo_does_not_hang_a_read(tmp_path: Path) -> None:
    fifo = tmp_path / "entry.json"
    os.mkfifo(fifo)
    with no_hang():
        with pytest.raises(fsio.NotRegularFile) as refused:
            fsio.read_regular(fifo)
        assert "FIFO" in str(refused.value)
        with pytest.raises(fsio.NotRegularFile):
            fsio.read_regular(fifo, follow=True)
        assert fsio.open_quietly(fifo) is None
        assert fsio.read_head(fifo, 100) is None
        assert fsio.read_small_json(fifo, 100) is None


def test_a_directory_or_nothing_at_the_name(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(fsio.NotRegularFile):
        fsio.read_regular(tmp_path / "dir")
    with pytest.raises(FileNotFoundError):
        fsio.read_regular(tmp_path / "missing")
    assert fsio.read_small_json(tmp_path / "missing", 100) is None


def test_a_file_past_its_limit_raises(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b"[" + b"1," * 50 + b"1]")
    size = path.stat().st_size

    assert fsio.read_regular(path, limit=size) == path.read_bytes()
    with pytest.raises(fsio.TooLarge) as refused:
        fsio.read_regular(path, limit=size - 1)
    assert refused.value.errno == errno.EFBIG and str(path) in str(refused.value)
    assert fsio.read_small_json(path, size) == [1] * 51
    assert fsio.read_small_json(path, size - 1) is None
    assert fsio.read_head(path, 5) == b"[1,1,"
    with pytest.raises(fsio.TooLarge):
        fsio.load_json(path, size - 1)


def test_malformed_json_is_none(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text('{"cut": ')
    assert fsio.read_small_json(path, 100) is None
    with pytest.raises(ValueError):
        fsio.load_json(path, 100)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        fsio.load_json(deep, 1 << 20)
    with pytest.raises(FileNotFoundError):
        fsio.load_json(tmp_path / "missing.json", 100)


def _aged(path: Path) -> Path:
    os.utime(path, (LONG_AGO, path.stat().st_mtime))
    return path


def _moves_atime(path: Path) -> bool:
    """Whether a plain read (or listing) of `path` moves its atime here."""
    _aged(path)
    if path.is_dir():
        os.listdir(path)
    else:
        path.read_bytes()
    return path.stat().st_atime != LONG_AGO


def test_reading_and_listing_move_no_atime(tmp_path: Path) -> None:
    control, agents = tmp_path / "control", tmp_path / "agents"
    for d in (control, agents):
        d.mkdir()
        (d / "transcript.jsonl").write_text('{"type": "user"}\n')
    if not (_moves_atime(control / "transcript.jsonl") and _moves_atime(control)):
        pytest.fail("SETUP INVALID: a plain read here moves no atime (noatime mount?)")

    transcript = _aged(agents / "transcript.jsonl")
    assert fsio.read_regular(transcript) == b'{"type": "user"}\n'
    assert fsio.read_head(transcript, 4) == b'{"ty'
    assert fsio.read_small_json(transcript, 100) == {"type": "user"}
    assert transcript.stat().st_atime == LONG_AGO, "reading moved the atime"

    _aged(agents)
    assert [e.name for e in fsio.entries(agents)] == ["transcript.jsonl"]
    assert fsio.entry_names(agents) == ["transcript.jsonl"]
    assert agents.stat().st_atime == LONG_AGO, "listing moved the atime"


def test_entries_tell_links_apart_and_resolve_them_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "to-dir").symlink_to(tmp_path / "real")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")

    plain = {e.name: (e.link, e.dir) for e in fsio.entries(tmp_path)}
    assert plain == {
        "real": (False, True),
        "file": (False, False),
        "to-dir": (True, False),
        "dangling": (True, False),
    }
    resolved = fsio.entries(tmp_path, resolve_links=True, sort=True)
    assert [(e.name, e.link, e.dir) for e in resolved] == [
        ("dangling", True, False),
        ("file", False, False),
        ("real", False, True),
        ("to-dir", True, True),
    ]
    assert [e.name for e in fsio.entries(tmp_path, keep=lambda n: n.startswith("r"))] == ["real"]
    assert fsio.entry_at(tmp_path, "to-dir") == fsio.Entry(
        "to-dir", str(tmp_path / "to-dir"), True, False
    )
    assert fsio.entry_at(tmp_path, "missing") is None
    with pytest.raises(FileNotFoundError):
        fsio.entries(tmp_path / "missing")


def test_replace_puts_the_whole_file_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "unit.service"
    path.write_text("old")
    fsio.replace(path, b"new", 0o644)
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["unit.service"]


def test_a_failed_replace_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    path = tmp_path / "pins.json"
    path.write_text(json.dumps(["old"]))
    seen: list[Path] = []

    def full(tmp: Path) -> None:
        seen.append(tmp)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))

    with pytest.raises(OSError) as failed:
        fsio.replace(path, json.dumps(["new"]).encode(), before_rename=full)
    assert failed.value.errno == errno.ENOSPC
    if not (seen and fsio.TEMPORARY.fullmatch(seen[0].name)):
        pytest.fail("SETUP INVALID: the write never reached its temporary file")
    assert json.loads(path.read_text()) == ["old"]
    assert os.listdir(tmp_path) == ["pins.json"], "the temporary file outlived the failure"
