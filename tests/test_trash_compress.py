"""The trash compresses what it keeps (trash.packing), and restore gives
back every file byte for byte, with its mode and times to the nanosecond,
every link as a link and every second name of a file as a second name of
it; entries written uncompressed (as earlier versions wrote them) restore
as ever, and a compression or an unpacking killed at any step leaves an
entry that restores whole. Through the real CLI where a person would act.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentkeep import leases
from agentkeep.core.context import Context
from agentkeep.core.pruning import purge
from agentkeep.core.trashcan import compress_trash
from agentkeep.model import Artifact
from agentkeep.paths import Env
from agentkeep.removal import SessionRemoval
from agentkeep.statefiles import write_json
from agentkeep.trash.entries import entry_dir, list_entries
from agentkeep.trash.writing import open_entry
from build_claude import SESSION_DIR, TRANSCRIPT, ClaudeSessionPaths, make_session
from fakehome import FakeHome, cli_json
from snapshots_of_trees import contents, set_times, stats
from test_daemon_serve import start_daemon, stop_daemons
from waiting import wait_until

pytestmark = pytest.mark.slow

# Imported for its effect: every daemon a test here starts is killed after it.
__all__ = ["stop_daemons"]

ARCHIVE = "entry.tar.zst"


def add_oddities(s: ClaudeSessionPaths) -> None:
    """What a session dir may hold besides plain files: a second name of a
    file, links (one going nowhere), a FIFO, a read-only directory, a name
    that is not UTF-8, an empty file, a file dated before 1970, and text
    that compresses well."""
    x = s.session_dir / "odd"
    x.mkdir()
    (x / "random.bin").write_bytes(os.urandom(20_000))
    (x / "random.bin").chmod(0o640)
    os.link(x / "random.bin", x / "second-name.bin")
    (x / "log.txt").write_text("the same line, again and again\n" * 5000)
    os.symlink("../nowhere", x / "dangling")
    os.symlink("/etc/hostname", x / "absolute")
    os.mkfifo(x / "pipe", 0o600)
    (x / "new\nline \udcff").write_text("odd name")
    (x / "empty").write_bytes(b"")
    (x / "script.sh").write_text("#!/bin/sh\n")
    (x / "script.sh").chmod(0o750)
    frozen = x / "frozen"
    frozen.mkdir()
    (frozen / "kept.txt").write_text("frozen")
    (frozen / "kept.txt").chmod(0o444)


def session(fh: FakeHome, *, small: bool = False) -> tuple[ClaudeSessionPaths, list[Path]]:
    """An idle Claude session with add_oddities in its dir, every entry
    with times of its own: the session, and its top-level paths."""
    kinds = {TRANSCRIPT, SESSION_DIR} if small else None
    s = make_session(fh, age_days=40, kinds=kinds)
    add_oddities(s)
    paths = [p for found in s.artifacts.values() for p in found]
    return s, paths


def settle_times(s: ClaudeSessionPaths, paths: list[Path]) -> None:
    """Times set last (reading a link moves its atime), the read-only
    directory made so first; one file dated before 1970."""
    (s.session_dir / "odd" / "frozen").chmod(0o555)
    set_times(*paths)
    os.utime(s.session_dir / "odd" / "empty", ns=(-86_400_000_000_123, -1_000_000_007))


def snapshot(paths: list[Path]) -> tuple[dict[str, Any], dict[str, str]]:
    """stats first: contents reads links, which moves their atimes."""
    return stats(*paths), contents(*paths)


def differences(
    got: tuple[dict[str, Any], dict[str, str]], want: tuple[dict[str, Any], dict[str, str]]
) -> dict[str, Any]:
    """What differs, path by path: (got, wanted)."""
    out = {}
    for g, w in zip(got, want, strict=True):
        out |= {k: (g.get(k), w.get(k)) for k in set(g) | set(w) if g.get(k) != w.get(k)}
    return out


def entry_json(fh: FakeHome, sid: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (entry_dir(fh.state, "claude", sid) / "entry.json").read_text()
    )
    return data


def listed(fh: FakeHome, sid: str) -> dict[str, Any]:
    code, doc, err = cli_json(fh, "trash")
    assert code == 0, err
    [entry] = [e for e in doc["entries"] if e["id"] == sid]
    return entry


def restore(fh: FakeHome, sid: str) -> None:
    proc = fh.cli("restore", "claude", sid)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("how", ["purge", "prune"])
def test_what_a_prune_moves_in_is_compressed_and_comes_back_byte_for_byte(
    fake_home: FakeHome, how: str
) -> None:
    s, paths = session(fake_home)
    expected = contents(*paths)
    settle_times(s, paths)
    before = stats(*paths)
    args = ("purge", "claude", s.id) if how == "purge" else ("prune", "--older-than", "30d")

    code, doc, err = cli_json(fake_home, *args)

    assert code == 0, err
    assert [r["id"] for r in doc["removed"]] == [s.id]
    assert not any(os.path.lexists(p) for p in paths)
    entry = entry_dir(fake_home.state, "claude", s.id)
    assert sorted(os.listdir(entry)) == ["entry.json", ARCHIVE], "kept only compressed"
    shown = listed(fake_home, s.id)
    assert 0 < shown["compressed_bytes"] < shown["bytes"] / 2
    text = fake_home.cli("trash", "--wide", env=dict(fake_home.environ, COLUMNS="120")).stdout
    assert "PACKED" in text and "kept compressed in" in text
    tar = subprocess.run(["tar", "--zstd", "-tf", str(entry / ARCHIVE)], capture_output=True)
    if tar.returncode == 0:  # a tar without zstd says so, and proves nothing
        assert b"odd/second-name.bin" in tar.stdout, "a person's tar reads it"

    restore(fake_home, s.id)

    assert snapshot(paths) == (before, expected)
    assert not entry.exists()


@pytest.mark.parametrize("later", ["as written", "compressed later"])
def test_an_entry_written_uncompressed_restores(fake_home: FakeHome, later: str) -> None:
    """An entry as the versions before compression wrote it: roots/ and an
    entry.json that knows nothing of archives; the hourly job may compress
    it, or it stays as it is until it expires."""
    s, paths = session(fake_home)
    expected = contents(*paths)
    settle_times(s, paths)
    before = stats(*paths)
    ctx = Context.open(Env.from_environ(fake_home.environ))
    try:
        purge(ctx, agent="claude", id=s.id)  # in-process: nothing compresses
    finally:
        ctx.index.close()
    entry = entry_dir(fake_home.state, "claude", s.id)
    old = {
        k: v for k, v in entry_json(fake_home, s.id).items() if k not in ("packed", "unpackable")
    }
    write_json(entry / "entry.json", old)
    if "roots" not in os.listdir(entry):
        pytest.fail("SETUP INVALID: the entry holds no roots/")
    assert listed(fake_home, s.id)["compressed_bytes"] is None
    if later == "compressed later":
        done = compress_trash(fake_home.state)
        assert done["compressed"] == 1 and sorted(os.listdir(entry)) == ["entry.json", ARCHIVE]

    restore(fake_home, s.id)

    assert snapshot(paths) == (before, expected)


# -- a kill at any step ---------------------------------------------------------

# The child: a seam kills it at the k-th step of packing (or of unpacking,
# for a restore), as SIGKILL would at any moment between two steps.
KILLED_AT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from agentkeep.core.context import Context
    from agentkeep.core.trashcan import compress_trash, restore
    from agentkeep.paths import Env
    from agentkeep.trash import packing

    what, k = sys.argv[1], int(sys.argv[2])
    steps = []

    def step(name):
        steps.append(name)
        if len(steps) == k:
            os.kill(os.getpid(), signal.SIGKILL)

    packing._at_step = step
    if what == "compress":
        compress_trash(Path(sys.argv[3]))
    else:
        ctx = Context.open(Env.from_environ())
        restore(ctx, "claude", sys.argv[3])
    print(len(steps))
    """
)


def killed_at(fh: FakeHome, what: str, k: int, arg: str) -> int | None:
    """Run the child; None when it was killed at step k, else its steps."""
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_AT, what, str(k), arg],
        env=fh.environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode == -signal.SIGKILL:
        return None
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


def trashed(fh: FakeHome) -> tuple[str, list[Path], tuple[dict[str, Any], dict[str, str]]]:
    """A small session in the trash, uncompressed (purge in-process):
    its id, its paths and their snapshot."""
    s, paths = session(fh, small=True)
    expected = contents(*paths)
    settle_times(s, paths)
    before = stats(*paths)
    ctx = Context.open(Env.from_environ(fh.environ))
    try:
        purge(ctx, agent="claude", id=s.id)
    finally:
        ctx.index.close()
    return s.id, paths, (before, expected)


def test_a_compression_killed_at_any_step_leaves_an_entry_that_restores_whole(
    fake_home: FakeHome,
) -> None:
    walked = 0
    for k in range(1, 200):
        sid, paths, before = trashed(fake_home)
        steps = killed_at(fake_home, "compress", k, str(fake_home.state))
        if steps is not None:
            assert steps == k - 1, "the child ran past its last step unkilled"
            break
        walked += 1
        restore(fake_home, sid)
        assert differences(snapshot(paths), before) == {}, f"killed at step {k}"
    else:
        pytest.fail("the compression never finished")
    if walked < 10:
        pytest.fail(f"SETUP INVALID: only {walked} steps to kill at")


def test_a_restore_killed_while_unpacking_is_whole_when_run_again(fake_home: FakeHome) -> None:
    walked = 0
    for k in range(1, 200):
        sid, paths, before = trashed(fake_home)
        assert compress_trash(fake_home.state)["compressed"] == 1, "SETUP INVALID"
        steps = killed_at(fake_home, "restore", k, sid)
        if steps is not None:
            assert snapshot(paths) == before
            break
        walked += 1
        restore(fake_home, sid)
        assert snapshot(paths) == before, f"killed at step {k}"
    else:
        pytest.fail("the restore never finished")
    if walked < 10:
        pytest.fail(f"SETUP INVALID: only {walked} steps to kill at")


# -- what stays uncompressed ------------------------------------------------------


def test_a_held_session_is_compressed_once_it_is_let_go(fake_home: FakeHome) -> None:
    sid, paths, before = trashed(fake_home)
    lease = leases.hold_shared(leases.lease_path(fake_home.state, "claude", sid))
    try:
        done = compress_trash(fake_home.state)
    finally:
        lease.release()
    assert done == {"compressed": 0, "bytes": 0, "compressed_bytes": 0, "waiting": 1}
    assert listed(fake_home, sid)["compressed_bytes"] is None
    assert compress_trash(fake_home.state)["compressed"] == 1

    restore(fake_home, sid)
    assert snapshot(paths) == before


def test_an_entry_written_while_it_is_packed_is_not_committed(
    fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every writer of an entry writes entry.json first: a packing that
    finds it written since it began throws its archive away."""
    from agentkeep.trash import packing

    sid, paths, before = trashed(fake_home)
    entry = entry_dir(fake_home.state, "claude", sid)
    written: list[str] = []

    def write_meanwhile(step: str) -> None:
        if step == "synced" and not written:
            write_json(entry / "entry.json", entry_json(fake_home, sid))
            written.append(step)

    monkeypatch.setattr(packing, "_at_step", write_meanwhile)
    assert compress_trash(fake_home.state)["compressed"] == 0
    assert written, "SETUP INVALID: the entry was not written while packed"
    assert sorted(os.listdir(entry)) == ["entry.json", "roots"], "nothing of the packing stays"
    assert compress_trash(fake_home.state)["compressed"] == 1, "the next one packs it"

    restore(fake_home, sid)
    assert snapshot(paths) == before


def test_a_socket_keeps_its_entry_uncompressed(fake_home: FakeHome) -> None:
    s, paths = session(fake_home, small=True)
    where = s.session_dir / "odd"
    here = os.getcwd()
    os.chdir(where)  # a socket's path is short: bound by its name here
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind("agent.sock")
    finally:
        os.chdir(here)
    expected = contents(*paths)
    settle_times(s, paths)
    before = stats(*paths)

    code, _doc, err = cli_json(fake_home, "purge", "claude", s.id)

    assert code == 0, err
    assert listed(fake_home, s.id)["compressed_bytes"] is None
    assert "socket" in entry_json(fake_home, s.id)["unpackable"]
    assert compress_trash(fake_home.state)["waiting"] == 1, "marked, not tried again"
    restore(fake_home, s.id)
    assert snapshot(paths) == (before, expected)


def test_a_removal_into_a_compressed_entry_unpacks_it_first(fake_home: FakeHome) -> None:
    """A removal that goes on into an entry already compressed (a journal's
    retry of a removal stopped half way) unpacks it first: one entry, and
    restore gives back what went in before and after."""
    sid, paths, before = trashed(fake_home)
    assert compress_trash(fake_home.state)["compressed"] == 1, "SETUP INVALID"
    [entry] = list_entries(fake_home.state)
    late = Path(entry.roots[0]) / "late.txt"
    late.write_text("moved in after the entry was compressed")
    os.utime(late, ns=(1_400_000_000_000_000_001, 1_300_000_000_000_000_003))
    late_before = snapshot([late])

    with open_entry(fake_home.state, "claude", sid, parent=None, keep_for=3600, now=0) as writer:
        assert writer.entry.packed is None, "unpacked before anything more goes in"
        r = SessionRemoval("claude", sid, dry_run=False, trash=writer)
        r.remove_path(Artifact(str(late), "t", 0, 0.0, root=entry.roots[0]))
    assert not late.exists() and r.removed == [str(late)], "SETUP INVALID"
    assert compress_trash(fake_home.state)["compressed"] == 1

    restore(fake_home, sid)

    assert snapshot(paths) == before and snapshot([late]) == late_before


def test_the_daemon_compresses_what_its_prune_moved_in(fake_home: FakeHome) -> None:
    s, paths = session(fake_home, small=True)
    settle_times(s, paths)
    daemon = start_daemon(fake_home)

    report = daemon.call("prune", {"older_than": "30d"})

    assert [r["id"] for r in report["removed"]] == [s.id]
    wait_until(
        lambda: entry_json(fake_home, s.id)["packed"] is not None,
        "the daemon compressed the entry",
        30,
    )


def test_a_sessions_rows_are_packed_and_come_back_every_one(fake_home: FakeHome) -> None:
    """An opencode session: its files and its rows in the agent's database,
    purged and restored through the CLI; the entry kept compressed between."""
    from build_opencode import TABLES, build_opencode

    tree = build_opencode(fake_home)
    sid = tree.full_session()
    other = tree.full_session()
    every = {
        t: sorted(tree.rows(f"SELECT * FROM {t}"), key=repr)
        for t in TABLES
        if tree.row_counts(sid).get(t) is not None
    }
    assert sum(tree.row_counts(sid).values()) > 5, "SETUP INVALID: no rows"

    code, doc, err = cli_json(fake_home, "purge", "opencode", sid)
    assert code == 0, err
    assert not any(tree.row_counts(sid).values()), "its rows went"
    assert sum(tree.row_counts(other).values()) > 5, "another's stay"
    entry = entry_dir(fake_home.state, "opencode", sid)
    assert sorted(os.listdir(entry)) == ["entry.json", ARCHIVE], "rows packed with the files"

    proc = fake_home.cli("restore", "opencode", sid)
    assert proc.returncode == 0, proc.stderr
    back = {t: sorted(tree.rows(f"SELECT * FROM {t}"), key=repr) for t in every}
    assert back == every, "every row back as it was"
