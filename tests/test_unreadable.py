"""A directory that cannot be listed keeps the sessions that may have
entries there, and says so.

`chmod 000` on a Claude project dir left a session listed from its side
files alone (899 B, no workspace), and a prune moved its file history and
every other side file to the trash while the transcript stayed: Claude then
listed a session whose history was gone. Nothing said anything.

Now, for every agent, the real CLI run as a user whom permissions bind
(root here has CAP_DAC_OVERRIDE: it runs without it, and without
CAP_DAC_READ_SEARCH) keeps such a session `unsafe` with the directory named
in the report, moves nothing of it, names the directory in `ls --json`,
`scan --json`, `status --json` and `doctor`, and after `chmod 755` the next
reconcile (every in-process command runs one) lists it whole again. The
daemon catches up by itself too, though no watch sees a permission change.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentkeep.adapters import base
from agentkeep.adapters.claude import ClaudeAdapter
from agentkeep.adapters.codex import CodexAdapter
from agentkeep.adapters.opencode import OpencodeAdapter
from agentkeep.paths import Env
from build_agents import (
    gemini_root,
    grok_root,
    make_gemini_session,
    make_grok_session,
    make_store_session,
    make_zero_session,
    zero_root,
)
from build_claude import make_session
from build_codex import build_codex
from build_opencode import build_opencode
from fakehome import FakeHome
from test_daemon_serve import start_daemon, stop_daemons

pytestmark = pytest.mark.slow

__all__ = ["stop_daemons"]

DAY = 86400.0
# Without these a process of root's reads any directory whatever its mode.
DROPPED = "-dac_override,-dac_read_search"


def bound() -> list[str]:
    """The command prefix that runs a program as a user whom permissions
    bind: nothing for an ordinary user; for root, setpriv dropping the
    capabilities that override them."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root overrides permissions here, and setpriv is missing to drop that")
    return ["setpriv", f"--bounding-set={DROPPED}", "--"]


def cli(fh: FakeHome, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*bound(), sys.executable, "-m", "agentkeep", *args],
        env=fh.environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def cli_json(fh: FakeHome, *args: str) -> Any:
    proc = cli(fh, *args, "--json")
    assert proc.stdout.strip(), f"agentkeep {' '.join(args)} printed nothing:\n{proc.stderr}"
    return json.loads(proc.stdout)


@contextmanager
def unlistable(place: Path) -> Iterator[None]:
    """`place` at mode 000 (its own mode again afterwards); SETUP INVALID
    when a bound process can still list it."""
    mode = place.stat().st_mode & 0o7777
    os.chmod(place, 0)
    try:
        probe = subprocess.run(
            [*bound(), sys.executable, "-c", "import os, sys; os.listdir(sys.argv[1])", place],
            capture_output=True,
            timeout=30,
        )
        if probe.returncode == 0:
            pytest.fail(f"SETUP INVALID: {place} at mode 000 can still be listed")
        yield
    finally:
        os.chmod(place, mode)


def fingerprint(roots: list[Path]) -> set[str]:
    """Every path under `roots` (SQLite's own -wal and -shm aside, which a
    read may make beside a database)."""
    found = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames]:
                if not name.endswith(("-wal", "-shm")):
                    found.add(os.path.join(dirpath, name))
    return found


@dataclass
class Case:
    """A home whose `place` will not be listable, and the session (`agent`,
    `id`) that may have entries there, all of it under `roots`."""

    agent: str
    id: str
    place: Path
    roots: list[Path]


def claude_project(fh: FakeHome) -> Case:
    """The report's own case: the session's project dir."""
    s = make_session(fh, age_days=40)
    return Case("claude", s.id, fh.claude / "projects" / s.key, [fh.claude, s.layout.tmp_root])


def claude_shared(fh: FakeHome) -> Case:
    """A shared dir named by session (file-history/): every session may
    have an entry there, whatever its project."""
    s = make_session(fh, age_days=40, cwd="/home/user/other")
    return Case("claude", s.id, fh.claude / "file-history", [fh.claude, s.layout.tmp_root])


def claude_tmp_key(fh: FakeHome) -> Case:
    """The project's scratch dir under the tmp root."""
    s = make_session(fh, age_days=40)
    return Case("claude", s.id, s.layout.tmp_root / s.key, [fh.claude, s.layout.tmp_root])


def claude_job(fh: FakeHome) -> Case:
    """A job dir whose state.json cannot be read: whose it is, is unknown."""
    s = make_session(fh, age_days=40)
    return Case("claude", s.id, s.job, [fh.claude, s.layout.tmp_root])


def codex_date_dir(fh: FakeHome) -> Case:
    """A date dir: the session known from its threads row."""
    codex = build_codex(fh)
    sid = codex.full_session(mtime=time.time() - 40 * DAY)
    return Case("codex", sid, fh.codex / "sessions" / "2026" / "01" / "05", [fh.codex])


def opencode_project(fh: FakeHome) -> Case:
    """A legacy project dir of session files: the session known from its rows."""
    tree = build_opencode(fh)
    tree.create_db()
    sid = tree.full_session(updated_ms=int((time.time() - 40 * DAY) * 1000))
    return Case("opencode", sid, tree.storage / "session" / "global", [tree.data])


def gemini_chats(fh: FakeHome) -> Case:
    """A project's chats/: the session known from its log and outputs."""
    root = gemini_root(fh.home)
    s = make_gemini_session(root, str(uuid.uuid4()), days=40)
    return Case("gemini", s.id, s.project / "chats", [root])


def grok_workspace(fh: FakeHome) -> Case:
    """Another workspace's dir: it may hold a dir of any session."""
    root = grok_root(fh.home)
    hidden = make_grok_session(root, "hidden", workspace="/work/a", days=40)
    seen = make_grok_session(root, "seen", workspace="/work/b", days=40)
    return Case("grok", seen.id, hidden.dir.parent, [root])


def zero_session_dir(fh: FakeHome) -> Case:
    """The session's own dir."""
    root = zero_root(fh.data)
    z = make_zero_session(root, "z1", days=40)
    return Case("zero", z.id, z.dir, [root])


def store_inner_dir(fh: FakeHome) -> Case:
    """A directory inside a store's session dir."""
    root = fh.home / "stores"
    session = make_store_session(root, "org/issue-1", days=40)
    fh.write_config(f'[[stores]]\nname = "issues"\nroot = "{root}"\ndepth = 2\n')
    return Case("issues", "org/issue-1", session / "work", [root])


CASES: list[Callable[[FakeHome], Case]] = [
    claude_project,
    claude_shared,
    claude_tmp_key,
    claude_job,
    codex_date_dir,
    opencode_project,
    gemini_chats,
    grok_workspace,
    zero_session_dir,
    store_inner_dir,
]


def row_of(rows: list[dict[str, Any]], case: Case) -> dict[str, Any]:
    found = [r for r in rows if (r["agent"], r["id"]) == (case.agent, case.id)]
    assert len(found) == 1, f"{case.agent} {case.id} not listed once: {rows}"
    return found[0]


@pytest.mark.parametrize("build", CASES, ids=[c.__name__ for c in CASES])
def test_a_session_that_may_have_entries_where_nothing_can_be_listed_is_kept(
    fake_home: FakeHome, build: Callable[[FakeHome], Case]
) -> None:
    case = build(fake_home)
    place = str(case.place)
    with unlistable(case.place):
        before = fingerprint(case.roots)
        scanned = cli_json(fake_home, "scan")
        assert place in scanned["unreadable"][case.agent], scanned
        row = row_of(cli_json(fake_home, "ls"), case)
        assert row["unreadable"] == [place]
        assert row["last_activity"] is None  # never dated from the part that could be read
        report = cli_json(fake_home, "prune", "--older-than", "30d")
        assert report["removed"] == [] and report["failed"] == [], report
        kept = [k for k in report["kept"] if (k["agent"], k["id"]) == (case.agent, case.id)]
        assert [k["reason"] for k in kept] == ["unsafe"], report
        assert place in kept[0]["detail"]
        assert fingerprint(case.roots) == before  # nothing of it moved
        assert place in cli_json(fake_home, "status")["unreadable"][case.agent]
        doctor = cli(fake_home, "doctor")
        assert doctor.returncode == 1
        assert any(
            line.startswith("PROBLEM  listing:") and place in line
            for line in doctor.stdout.splitlines()
        ), doctor.stdout
    # No mtime moved: the next reconcile (ls runs one first) sees it all the same.
    whole = row_of(cli_json(fake_home, "ls"), case)
    assert "unreadable" not in whole and whole["last_activity"] is not None, whole
    report = cli_json(fake_home, "prune", "--older-than", "30d", "--dry-run")
    assert (case.agent, case.id) in {(r["agent"], r["id"]) for r in report["removed"]}


def test_a_session_of_another_project_is_not_kept_for_it(fake_home: FakeHome) -> None:
    """Only the sessions that may have entries where nothing can be listed
    stay: one whose transcript lies in another project's dir goes."""
    case = claude_project(fake_home)
    other = make_session(fake_home, age_days=40, cwd="/home/user/other")
    with unlistable(case.place):
        rows = {r["id"]: r for r in cli_json(fake_home, "ls")}
        assert rows[case.id]["unreadable"] == [str(case.place)]
        assert "unreadable" not in rows[other.id]
        report = cli_json(fake_home, "prune", "--older-than", "30d")
        assert [r["id"] for r in report["removed"]] == [other.id], report
        assert [(k["id"], k["reason"]) for k in report["kept"]] == [(case.id, "unsafe")]


def test_a_root_that_cannot_be_listed_is_named_though_no_session_shows(
    fake_home: FakeHome,
) -> None:
    """Nothing of zero's sessions can be seen, so none is listed: the root
    is named all the same, and once it can be listed its sessions come."""
    root = zero_root(fake_home.data)
    z = make_zero_session(root, "z1", days=40)
    with unlistable(root):
        assert cli_json(fake_home, "scan")["unreadable"] == {"zero": [str(root)]}
        assert [r for r in cli_json(fake_home, "ls") if r["agent"] == "zero"] == []
        assert f"zero: {root} (Permission denied)" in cli(fake_home, "doctor").stdout
    assert [r["id"] for r in cli_json(fake_home, "ls") if r["agent"] == "zero"] == [z.id]


def test_the_report_case_moves_nothing_and_names_the_dir_in_text(fake_home: FakeHome) -> None:
    """The text a person reads: scan, ls and status say what cannot be
    listed, and stop saying it once it can."""
    case = claude_project(fake_home)
    place = str(case.place)
    with unlistable(case.place):
        scan = cli(fake_home, "scan")
        assert f"cannot list {place} (claude)" in scan.stdout, scan.stdout
        ls = cli(fake_home, "ls")
        assert "1 session not listed whole" in ls.stdout, ls.stdout
        status = cli(fake_home, "status")
        assert place in status.stdout, status.stdout
    cli(fake_home, "ls")  # a reconcile: status shows the index as it left it
    assert "unreadable" not in cli_json(fake_home, "status")
    assert "PROBLEM  listing" not in cli(fake_home, "doctor").stdout


def test_a_session_made_unlistable_after_the_scan_is_kept_by_the_prune(
    fake_home: FakeHome,
) -> None:
    """The index listed it whole; the prune lists it again from the disk
    under its lease, sees the directory it cannot list, and keeps it."""
    case = claude_project(fake_home)
    assert "unreadable" not in cli_json(fake_home, "scan")
    with unlistable(case.place):
        before = fingerprint(case.roots)
        report = cli_json(fake_home, "prune", "--older-than", "30d")
        assert report["removed"] == [], report
        assert [(k["id"], k["reason"]) for k in report["kept"]] == [(case.id, "unsafe")]
        assert fingerprint(case.roots) == before


def test_a_session_listed_again_for_a_change_is_still_kept(fake_home: FakeHome) -> None:
    """A reconcile lists again only what changed, sparing the directories
    whose mtimes held: a directory that cannot be listed is never spared
    (a chmod moves no mtime), so the session stays unsafe."""
    s = make_session(fake_home, age_days=40)
    place = fake_home.claude / "projects" / s.key
    old = time.time() - 40 * DAY
    os.utime(place, (old, old))  # an mtime old enough to vouch for what is listed
    case = Case("claude", s.id, place, [fake_home.claude])
    with unlistable(place):
        assert row_of(cli_json(fake_home, "ls"), case)["unreadable"] == [str(place)]
        log = s.debug_log
        when = time.time() - 39 * DAY
        os.utime(log, (when, when))
        row = row_of(cli_json(fake_home, "ls"), case)
        assert row["unreadable"] == [str(place)], row


def test_the_daemon_lists_a_session_whole_again_once_its_dir_can_be_listed(
    fake_home: FakeHome,
) -> None:
    """No watch sees a permission change. A directory the daemon cannot
    list cannot be watched either, so its root is reconciled by polling
    (every POLL_INTERVAL, here 0.5 s), and a reconcile scans the agent
    again when what can be listed changed."""
    case = claude_project(fake_home)
    seam = "from agentkeep.daemon import schedule\nschedule.POLL_INTERVAL = 0.5"
    with unlistable(case.place):
        daemon = start_daemon(fake_home, seams=seam, prefix=bound())

        def listed() -> dict[str, Any]:
            return row_of(daemon.call("ls"), case)

        assert listed()["unreadable"] == [str(case.place)]
        assert str(case.place) in daemon.status()["unreadable"]["claude"]
    daemon.wait(lambda: "unreadable" not in listed(), 20, "the session listed whole")
    assert listed()["last_activity"] is not None
    assert "unreadable" not in daemon.status()


@pytest.mark.parametrize(
    "agent, rel",
    [
        ("opencode", "opencode/tool-output"),
        ("opencode", "opencode/storage/part"),
        ("codex", "tui-thread-reference-capabilities"),
        ("claude", "usage-data"),
    ],
)
def test_a_dir_a_listing_reads_unwatched_is_named_when_it_cannot_be_listed(
    fake_home: FakeHome, agent: str, rel: str
) -> None:
    """Directories a listing reads without watching them (opencode's tool
    outputs and storage folders, Codex's TUI references, Claude's
    usage-data/) are checked too: a permission change there moves no mtime,
    so only this tells the reconcile to list the agent again."""
    classes = {"opencode": OpencodeAdapter, "codex": CodexAdapter, "claude": ClaudeAdapter}
    parents = {"opencode": fake_home.data, "codex": fake_home.codex, "claude": fake_home.claude}
    place = parents[agent] / rel
    place.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(place.name, place)  # a link to itself: listing it fails (ELOOP), as root too
    adapter = classes[agent](Env.from_environ(fake_home.environ))
    assert str(place) in base.unlisted(adapter)
