"""A full state disk (issue #7): the journal's write seam raises ENOSPC, the
index is held at its size by SQLite's own page limit (SQLITE_FULL, what a full
disk gives it: the index has no write seam), or every write fails (a file size
limit of 0). A clear error in the report, status and the logs; no removal
without its journal entry; and once there is room again, the next prune
recovers and removes what it should.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hardening_util import (
    events_named,
    gone,
    pending_journal,
    removed_ids,
    report_of,
    run_cli,
    whole,
)

from agentkeep import journal
from agentkeep.core.context import Context
from agentkeep.core.indexing import scan
from agentkeep.core.pruning import prune
from agentkeep.core.status import status_fields
from agentkeep.errors import Failure
from agentkeep.paths import Env
from build_claude import ClaudeSessionPaths, make_session
from fakehome import FakeHome
from test_daemon_serve import start_daemon, stop_daemons
from trees import tree_state
from waiting import wait_until

pytestmark = pytest.mark.slow

__all__ = ["stop_daemons"]

ENOSPC_TEXT = os.strerror(errno.ENOSPC)  # "No space left on device"

# In the CLI or daemon process: every journal write fails while the marker
# file exists (the disk is full), and works again once it is gone.
FULL_JOURNAL = """
import errno, os, pathlib
import agentkeep.journal as journal

MARKER = pathlib.Path(os.environ["DISK_FULL"])
WHICH = os.environ.get("FAIL_WRITE", "any")

def full(path):
    if not MARKER.exists():
        return
    if WHICH == "any" or (WHICH == "rename") == path.name.endswith(".json"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

journal._write_hook = full
"""

# Every write fails, as on a disk with no room left at all (EFBIG instead of
# ENOSPC: a file size limit of 0 is the one way to refuse every write here).
NO_ROOM_AT_ALL = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
"""


def world(fh: FakeHome) -> tuple[list[ClaudeSessionPaths], ClaudeSessionPaths]:
    fh.write_config('retention = "30d"\n', seen=True)
    old = [make_session(fh, cwd=f"/home/user/p{i}", age_days=40 + i) for i in range(4)]
    recent = make_session(fh, cwd="/home/user/new", age_days=3)
    return old, recent


def disk(fh: FakeHome) -> dict[str, Any]:
    """Everything of the fake user but agentkeep's own state (made first, so
    that making it changes no parent's mtime later)."""
    fh.state.mkdir(parents=True, exist_ok=True, mode=0o700)
    found = tree_state(fh.root / "home") | tree_state(fh.root / "tmp")
    return {k: v for k, v in found.items() if not k.startswith(str(fh.state))}


def journal_dir_files(fh: FakeHome) -> list[str]:
    directory = fh.state / "journal"
    return sorted(str(p) for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def trash_entries(fh: FakeHome) -> list[str]:
    directory = fh.state / "trash" / "claude"
    return sorted(os.listdir(directory)) if directory.is_dir() else []


# -- the journal ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["temporary", "rename"])
def test_a_full_journal_fails_each_session_removes_nothing_and_recovers(
    fake_home: FakeHome, which: str
) -> None:
    old, recent = world(fake_home)
    marker = fake_home.root / "disk-full"
    marker.write_text("")
    before = disk(fake_home)
    env = {"DISK_FULL": str(marker), "FAIL_WRITE": which}

    proc = run_cli(fake_home, "prune", "--json", seams=FULL_JOURNAL, env=env)

    doc = report_of(proc)
    assert proc.returncode == 1, proc.stderr
    assert doc["removed"] == []
    assert sorted(f["id"] for f in doc["failed"]) == sorted(s.id for s in old)
    for failed in doc["failed"]:
        assert "cannot write the journal" in failed["reason"]
        assert ENOSPC_TEXT in failed["reason"]
    assert "journal write failed; this batch removes nothing" in proc.stderr
    assert ENOSPC_TEXT in proc.stderr
    assert disk(fake_home) == before, "something was removed without its journal entry"
    assert journal_dir_files(fake_home) == [], "a journal file was left behind"
    assert trash_entries(fake_home) == []

    marker.unlink()  # room again
    again = run_cli(fake_home, "prune", "--json", seams=FULL_JOURNAL, env=env)

    assert again.returncode == 0, again.stderr
    assert sorted(removed_ids(report_of(again))) == sorted(s.id for s in old)
    assert all(gone(s) for s in old) and whole(recent)
    assert pending_journal(fake_home) == set()


def test_the_daemon_logs_a_full_journal_and_recovers(fake_home: FakeHome) -> None:
    old, recent = world(fake_home)
    marker = fake_home.root / "disk-full"
    marker.write_text("")
    before = disk(fake_home)
    daemon = start_daemon(
        fake_home,
        everywhere=FULL_JOURNAL,
        extra={"DISK_FULL": str(marker), "AGENTKEEP_FIRST_PRUNE_DELAY": "0.5"},
    )

    done = daemon.wait(
        lambda: events_named(daemon.log, "scheduled prune done"), 20, "the scheduled prune"
    )
    assert done[0]["removed"] == 0 and done[0]["failed"] == len(old)
    errors = events_named(daemon.log, "journal write failed; this batch removes nothing")
    assert errors, "the full journal is logged"
    assert all(e["level"] == "error" and ENOSPC_TEXT in e["error"] for e in errors)
    status = daemon.status()
    assert status["last_prune"]["failed"] == len(old) and status["last_prune"]["removed"] == 0
    assert daemon.proc.poll() is None
    assert disk(fake_home) == before

    marker.unlink()
    real = run_cli(fake_home, "prune", "--json")  # answered by the daemon
    assert real.returncode == 0, real.stderr
    assert sorted(removed_ids(report_of(real))) == sorted(s.id for s in old)
    assert all(gone(s) for s in old) and whole(recent)
    wait_until(
        lambda: daemon.status()["last_prune"]["failed"] == 0,
        "status to show recovery",
        5,
        setup=False,
    )
    assert daemon.stop() == 0, daemon.stderr()


def test_status_says_the_disk_is_full(fake_home: FakeHome, monkeypatch: pytest.MonkeyPatch) -> None:
    world(fake_home)

    def full(path: Path) -> None:
        raise OSError(errno.ENOSPC, ENOSPC_TEXT, str(path))

    monkeypatch.setattr(journal, "_write_hook", full)
    ctx = Context.open(Env.from_environ(fake_home.environ))
    report = prune(ctx, scheduled=True)
    if report is None or not report.failed:
        pytest.fail("SETUP INVALID: nothing failed")

    assert ENOSPC_TEXT in json.dumps(status_fields(ctx))


# -- the index --------------------------------------------------------------------------


def full_index(fh: FakeHome) -> Context:
    """A context whose index cannot grow any more: SQLite's page limit set to
    the size it has, so that writing more rows fails with SQLITE_FULL
    ("database or disk is full"), as on a full disk."""
    ctx = Context.open(Env.from_environ(fh.environ))
    scan(ctx)
    db = ctx.index._db()
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")
    return ctx


def more_sessions(fh: FakeHome, n: int = 30) -> list[ClaudeSessionPaths]:
    # Long workspaces: rows the full index has no room for.
    return [make_session(fh, cwd="/home/user/" + "w" * 180 + str(i), age_days=45) for i in range(n)]


def test_a_full_index_removes_nothing_half_and_recovers(fake_home: FakeHome) -> None:
    old, recent = world(fake_home)
    ctx = full_index(fake_home)
    old += more_sessions(fake_home)

    try:
        prune(ctx)
    except (sqlite3.Error, Failure):
        pass  # how it is reported is the next test's business
    assert all(whole(s) or gone(s) for s in old), "a session was left half removed"
    assert pending_journal(fake_home) == set()
    assert whole(recent)

    ctx.index._db().execute("PRAGMA max_page_count = 1073741823")  # room again
    report = prune(ctx)
    assert report is not None and report.failed == []
    assert all(gone(s) for s in old) and whole(recent)
    assert pending_journal(fake_home) == set()


def test_a_full_index_is_reported_as_a_full_disk(fake_home: FakeHome) -> None:
    world(fake_home)
    ctx = full_index(fake_home)
    more_sessions(fake_home)

    try:
        doc = prune(ctx)
    except Exception as exc:
        message = exc.message if isinstance(exc, Failure) else str(exc)
        assert "full" in message, f"{type(exc).__name__}: {message}"
    else:
        assert doc is not None


# -- no room at all -----------------------------------------------------------------------


def test_with_no_room_at_all_nothing_is_touched(fake_home: FakeHome) -> None:
    old, recent = world(fake_home)
    assert fake_home.cli("scan").returncode == 0
    before = disk(fake_home)

    proc = run_cli(fake_home, "prune", "--json", seams=NO_ROOM_AT_ALL)

    assert proc.returncode not in (0, -signal.SIGXFSZ), proc.stderr
    assert disk(fake_home) == before
    again = run_cli(fake_home, "prune", "--json")
    assert again.returncode == 0, again.stderr
    assert all(gone(s) for s in old) and whole(recent)


def test_with_no_room_at_all_the_error_is_one_clear_line(fake_home: FakeHome) -> None:
    world(fake_home)
    assert fake_home.cli("scan").returncode == 0

    proc = run_cli(fake_home, "prune", "--json", seams=NO_ROOM_AT_ALL)

    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "index" in proc.stderr
