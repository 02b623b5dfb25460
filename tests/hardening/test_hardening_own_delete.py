"""A prune SIGKILLed while the agent's own delete command runs (Codex's
`codex delete --force`), then a prune to its end.

The command is not transactional: killed half way, it has taken part of the
session. Had it outlived the prune, it went on changing the session while
the next prune listed it, and named the id on its command line: the next
prune kept the session `held` and forgot its journal entry, and what the
command leaves (the TUI reference) stayed, the session half removed with
nothing to finish it. The fake `codex` stops after its first database until
told to go (a seam), so the kill always lands there.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import psutil
import pytest
from hardening_util import cli_argv, discard_home, fast_root, report_of, run_cli

from agentkeep.journal import Journal
from build_codex import CodexTree, build_codex, install_fake_codex
from fakehome import FakeHome, kill_group, make_fake_home
from waiting import wait_until

pytestmark = pytest.mark.slow

DAY = 86400.0


@pytest.fixture
def fh(tmp_path: Path) -> Iterator[FakeHome]:
    home = make_fake_home(fast_root(tmp_path))
    yield home
    discard_home(home)


def left(fh: FakeHome, sid: str) -> list[str]:
    files = [str(p) for p in fh.codex.rglob(f"*{sid}*")]
    return files + sorted(CodexTree(fh.codex).naming(sid))


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextmanager
def killed_in_codex_delete(fh: FakeHome) -> Iterator[tuple[str, Path, int]]:
    """An old Codex session, and a prune SIGKILLed while its `codex delete`
    (stopped by the fake's seam after its first database) had taken part of
    it: the session's id, the fake's calls file and the command's pid."""
    tree = build_codex(fh)
    when = time.time() - 60 * DAY
    sid = tree.full_session(updated_at=int(when), mtime=when)
    calls = install_fake_codex(fh)
    fh.write_config('retention = "30d"\ntrash = "7d"\n', seen=True)
    (calls.parent / "codex.pause").touch()
    paused = calls.parent / "codex.paused"
    cli = subprocess.Popen(
        cli_argv("", "prune", "--json"),
        env=fh.environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: paused.exists() and paused.read_text(), "codex delete half way")
        os.kill(cli.pid, signal.SIGKILL)
        if cli.wait(10) != -signal.SIGKILL:
            pytest.fail("SETUP INVALID: the prune ended before it was killed")
        yield sid, calls, int(paused.read_text())
    finally:
        kill_group(cli)


def test_a_prune_killed_during_codex_delete_is_finished_by_the_next(fh: FakeHome) -> None:
    with killed_in_codex_delete(fh) as (sid, calls, command):
        # Given its time to end with the prune (not a failure yet: the next
        # prune must cope either way).
        deadline = time.monotonic() + 5
        while alive(command) and time.monotonic() < deadline:
            time.sleep(0.05)

        again = run_cli(fh, "prune", "--json")
        (calls.parent / "codex.go").touch()
        wait_until(lambda: not alive(command), "the interrupted codex delete ended", setup=False)

        doc = report_of(again)
        assert again.returncode == 0 and doc["failed"] == [], doc["failed"]
        assert left(fh, sid) == [], f"half removed after the next prune: {doc['kept']}"
        assert Journal(fh.state).pending() == []


def test_rows_a_killed_delete_left_wait_for_the_live_process_then_go(fh: FakeHome) -> None:
    """Killed half way, `codex delete` has taken the rollout, the record a
    listing finds the session by: only rows are left, and only the journal
    still names them. A process naming the session keeps it `live` at the
    next prune; the entry must wait for it, or nothing finishes the rows."""
    holder: subprocess.Popen[bytes] | None = None
    with killed_in_codex_delete(fh) as (sid, _, command):
        if alive(command):
            os.kill(command, signal.SIGKILL)
        wait_until(lambda: not alive(command), "the interrupted codex delete ended")
        # Rows alone, no record a listing finds the session by: the TUI
        # reference and the threads row gone too (a Codex that takes its
        # threads row before the other tables leaves this when killed).
        for ref in (fh.codex / "tui-thread-reference-capabilities").glob(sid):
            ref.unlink()
        for db in fh.codex.glob("state_*.sqlite"):
            with closing(sqlite3.connect(db)) as conn, conn:
                conn.execute("DELETE FROM threads WHERE id = ?", (sid,))
        rows = left(fh, sid)
        if not rows or any("#" not in r or r.endswith("#threads") for r in rows):
            pytest.fail(f"SETUP INVALID: not rows alone left: {rows}")

        try:
            holder = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(600)", "resume", sid],
                env=fh.environ,
                start_new_session=True,
            )
            held = report_of(run_cli(fh, "prune", "--json"))
            kept = {k["id"]: k["reason"] for k in held["kept"]}
            if kept.get(sid) != "live":
                pytest.fail(f"SETUP INVALID: the process did not keep it live: {held['kept']}")
            assert left(fh, sid), "removed while a process names it"
            assert [e.id for e in Journal(fh.state).pending()] == [sid], "the journal forgot it"

            kill_group(holder)
            again = run_cli(fh, "prune", "--json")
            doc = report_of(again)
            assert again.returncode == 0 and doc["failed"] == [], doc["failed"]
            assert left(fh, sid) == [], f"half removed for good: {doc['kept']}"
            assert Journal(fh.state).pending() == []
        finally:
            if holder is not None:
                kill_group(holder)
