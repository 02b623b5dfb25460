"""The real daemon keeping a real Claude tree indexed and pruned: watch events
reach the index, the scheduler prunes by itself, a lease keeps a session
through a prune, a warm start re-lists only what changed, SIGTERM in the
middle of a prune finishes one session and leaves the rest (and so does a
prune whose daemon was killed), and the CLI prints the same whether the
daemon or the CLI itself answers."""

from __future__ import annotations

import json
import shutil
import signal
import time
from datetime import UTC, datetime
from typing import Any

import psutil
import pytest

from agentkeep import client, leases
from agentkeep.core.context import Context
from agentkeep.paths import Env
from build_claude import make_session, set_age
from build_codex import build_codex, new_id
from test_daemon_serve import ask, start_daemon, stop_daemons
from waiting import wait_until

pytestmark = pytest.mark.slow

# Imported for its effect: every daemon a test here starts is killed after it.
__all__ = ["stop_daemons"]


def ls(daemon: Any) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in daemon.call("ls")}


def startup_lines(daemon: Any) -> list[dict[str, Any]]:
    lines = []
    for line in daemon.stderr().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines


def relisted_at_start(daemon: Any) -> int:
    for line in startup_lines(daemon):
        if line.get("event") == "index up to date":
            return int(line["relisted"])
    raise AssertionError(f"no start-up reconcile logged:\n{daemon.stderr()}")


def remove_session(session: Any) -> None:
    for path in session.files:
        path.unlink(missing_ok=True)
    for path in sorted(session.dirs, key=lambda p: len(p.parts), reverse=True):
        shutil.rmtree(path, ignore_errors=True)


def test_ls_is_the_same_from_the_daemon_and_in_process(fake_home) -> None:
    old = make_session(fake_home, age_days=40)
    make_session(fake_home, age_days=3, cwd="/home/user/other")
    daemon = start_daemon(fake_home)
    # The CLI's own view is the daemon's: it is answered, not sent away (-32001).
    view = Context.open(Env.from_environ(fake_home.environ)).fingerprint()
    assert client.call(daemon.env, "status", {"env": view})["pid"] == daemon.proc.pid
    served = fake_home.cli("ls", "--json")
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout) == daemon.call("ls")
    shown = fake_home.cli("show", "claude", old.id, "--json")
    assert daemon.stop() == 0
    local = fake_home.cli("ls", "--json")
    assert local.returncode == 0, local.stderr
    assert local.stdout == served.stdout
    assert fake_home.cli("show", "claude", old.id, "--json").stdout == shown.stdout
    assert [r["id"] for r in json.loads(local.stdout)][0] == old.id  # oldest first


def test_the_watcher_keeps_the_index_current(fake_home) -> None:
    # Nothing of Claude's exists yet: its roots appear after the daemon starts.
    daemon = start_daemon(fake_home)
    assert daemon.status()["sessions"] == 0
    s = make_session(fake_home, age_days=5)
    row = daemon.wait(lambda: ls(daemon).get(s.id), 5, "a new session to be indexed")
    assert row["workspace"] == "/home/user/project"
    before = row["last_activity"]
    with s.transcript.open("a") as f:
        f.write(json.dumps({"type": "user", "sessionId": s.id, "cwd": "/home/user/project"}) + "\n")
    appended = time.monotonic()
    daemon.wait(lambda: ls(daemon)[s.id]["last_activity"] > before, 5, "newer activity")
    assert time.monotonic() - appended < 2
    remove_session(s)
    daemon.wait(lambda: s.id not in ls(daemon), 5, "the removed session to leave the index")


def test_a_tmp_root_made_after_start_is_watched(fake_home) -> None:
    daemon = start_daemon(fake_home)
    s = make_session(fake_home, age_days=2, kinds=["tmp"])
    row = daemon.wait(lambda: ls(daemon).get(s.id), 5, "a tmp-only session to be indexed")
    assert row["artifacts"] >= 1
    roots = {r["path"]: r for r in daemon.status()["watch"]["roots"]}
    assert roots[str(s.layout.tmp_root)]["mode"] == "inotify"


def test_a_new_codex_date_dir_is_watched(fake_home) -> None:
    codex = build_codex(fake_home)
    first = new_id()
    codex.rollout(first, started=datetime(2026, 1, 5, 9, 30, tzinfo=UTC))
    daemon = start_daemon(fake_home)
    assert set(ls(daemon)) == {first}
    later = new_id()
    # A new year, month and day: three directories that did not exist at start.
    codex.rollout(later, started=datetime(2027, 2, 1, 8, 0, tzinfo=UTC))
    daemon.wait(lambda: later in ls(daemon), 5, "a rollout in a new date dir")


def test_roots_over_the_budget_are_kept_current_by_polling(fake_home) -> None:
    seam = "from agentkeep.daemon import schedule\nschedule.POLL_INTERVAL = 0.5"
    daemon = start_daemon(fake_home, seams=seam, extra={"AGENTKEEP_INOTIFY_MAX": "0"})
    assert daemon.status()["watch"]["mode"] == "polling"
    s = make_session(fake_home, age_days=3)
    daemon.wait(lambda: s.id in ls(daemon), 10, "a polled root's new session")
    remove_session(s)
    daemon.wait(lambda: s.id not in ls(daemon), 10, "a polled root's removed session")


def test_the_scheduler_prunes_an_idle_session_by_itself(fake_home) -> None:
    fake_home.write_config('retention = "2d"\n', seen=True)
    old = make_session(fake_home, age_days=40)
    fresh = make_session(fake_home, age_days=0)
    daemon = start_daemon(fake_home, extra={"AGENTKEEP_FIRST_PRUNE_DELAY": "1"})
    assert daemon.status()["next_prune"] is not None
    daemon.wait(lambda: not old.transcript.exists(), 15, "the scheduled prune")
    last = daemon.wait(lambda: daemon.status()["last_prune"], 5, "last_prune in status")
    assert last["scheduled"] is True and last["removed"] == 1
    assert fresh.transcript.exists()
    assert set(ls(daemon)) == {fresh.id}


def test_a_lease_keeps_a_session_through_a_prune(fake_home) -> None:
    old = make_session(fake_home, age_days=40)
    daemon = start_daemon(fake_home)
    lease_file = leases.lease_path(fake_home.state, "claude", old.id)
    with daemon.connect() as sock:
        hold = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "hold",
            "params": {"agent": "claude", "id": old.id},
        }
        assert "lease" in ask(sock, json.dumps(hold).encode())["result"]
        result = fake_home.cli("prune", "--older-than", "2d", "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["removed"] == []
        assert [(k["id"], k["reason"]) for k in report["kept"]] == [(old.id, "held")]
        assert old.transcript.exists()
    wait_until(
        lambda: not leases.is_held(lease_file),
        "the lease to end with its connection",
        5,
        setup=False,
    )
    report = daemon.call("prune", {"older_than": "2d"})
    assert [r["id"] for r in report["removed"]] == [old.id]
    assert not old.transcript.exists()


def test_a_warm_start_relists_only_what_changed(fake_home) -> None:
    sessions = [make_session(fake_home, age_days=10 + n) for n in range(3)]
    first = start_daemon(fake_home, name="cold")
    assert relisted_at_start(first) == 3
    assert first.stop() == 0
    warm = start_daemon(fake_home, name="warm")
    assert relisted_at_start(warm) == 0
    assert set(ls(warm)) == {s.id for s in sessions}
    assert warm.stop() == 0
    with sessions[1].transcript.open("a") as f:
        f.write('{"type": "user"}\n')
    set_age([sessions[1].transcript], 1)
    again = start_daemon(fake_home, name="again")
    assert relisted_at_start(again) == 1


def pruning_slowly(fake_home) -> tuple[Any, list[Any]]:
    """A daemon whose scheduled prune of four old sessions is removing one
    (each file it removes waits 0.1 s first), and those four."""
    fake_home.write_config('retention = "2d"\n', seen=True)
    old = [make_session(fake_home, age_days=40 + n) for n in range(4)]
    make_session(fake_home, age_days=0)  # a recent session: the prune does not pause
    # The prune runs in the daemon's child (daemon.child): the seam must
    # reach it.
    removing = fake_home.root / "removing"
    seam = (
        "import os, pathlib, time\nimport agentkeep.rmtree as rmtree\n"
        "def _slowly(path):\n"
        "    pathlib.Path(os.environ['REMOVING']).touch()\n"
        "    time.sleep(0.1)\n"
        "rmtree._before_leaf = _slowly\n"
    )
    extra = {"AGENTKEEP_FIRST_PRUNE_DELAY": "0.5", "REMOVING": str(removing)}
    daemon = start_daemon(fake_home, everywhere=seam, extra=extra)
    daemon.wait(removing.exists, 15, "a removal in progress")
    return daemon, old


def test_sigterm_mid_prune_finishes_one_session_and_leaves_the_rest(fake_home) -> None:
    daemon, old = pruning_slowly(fake_home)
    stopped = time.monotonic()
    assert daemon.stop(signal.SIGTERM) == 0, daemon.stderr()
    assert time.monotonic() - stopped < 5
    gone = [s for s in old if not s.transcript.exists()]
    assert len(gone) == 1, "exactly the session being removed went"
    last = json.loads((fake_home.state / "last_prune.json").read_text())
    assert last["removed"] == 1 and last["kept"] >= 3
    assert not fake_home.socket.exists()


def test_a_prune_whose_daemon_is_killed_stops_after_the_session_in_flight(fake_home) -> None:
    daemon, old = pruning_slowly(fake_home)
    pruning = psutil.Process(daemon.proc.pid).children()
    if not pruning:
        pytest.fail("SETUP INVALID: the daemon's prune runs in no process of its own")

    daemon.proc.kill()
    daemon.proc.wait(10)
    _, alive = psutil.wait_procs(pruning, timeout=15)

    assert alive == [], "the prune went on without its daemon"
    assert len([s for s in old if not s.transcript.exists()]) == 1
    last = json.loads((fake_home.state / "last_prune.json").read_text())
    assert last["removed"] == 1 and last["kept"] >= 3
    assert "stopping after the session being removed" in daemon.stderr()
