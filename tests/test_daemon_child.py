"""The daemon's prunes and scans run in its child (daemon.child):
the report comes back whole through the daemon, a refusal comes back as
the same error, with its report, that the CLI gives in-process, and the
watcher's events wait for it (or, past PENDING_MAX, a reconcile after it)."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentkeep import client
from agentkeep.errors import Failure
from agentkeep.paths import Env
from agentkeep.protocol import INVALID_PARAMS
from agentkeep.prune.lock import PrunerLock
from build_claude import make_session
from hardening.hardening_util import events_named, log_events, pending_journal
from test_daemon_serve import start_daemon, stop_daemons
from waiting import wait_until

pytestmark = pytest.mark.slow

# Imported for its effect: every daemon a test here starts is killed after it.
__all__ = ["stop_daemons"]


def _noting(var: str, module: str, name: str, then: str = "") -> str:
    """A seam: each process that calls `module.name` appends its pid to
    $var (then runs the statement `then`)."""
    fn = f"_noted_{var.lower()}"
    return f"""
import os, sys, time
import {module}
{fn}_was = {module}.{name}
def {fn}(*args, **kwargs):
    with open(os.environ["{var}"], "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    {then or "pass"}
    return {fn}_was(*args, **kwargs)
{module}.{name} = {fn}
"""


_PRUNED_BY = _noting("PRUNED_BY", "agentkeep.prune.run", "Pruner.run")
_RECONCILED_BY = _noting("RECONCILED_BY", "agentkeep.core.indexing", "reconcile")
# A scan in the daemon's child then waits $SCAN_SLEEP seconds (the daemon's own start-up
# scans do not).
_SCANNED_BY = _noting(
    "SCANNED_BY",
    "agentkeep.core.indexing",
    "_scan",
    'sys.argv[0].endswith("child.py") and time.sleep(float(os.environ.get("SCAN_SLEEP", "0")))',
)


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_a_prune_runs_in_a_process_of_its_own_and_its_report_comes_back(fake_home) -> None:
    old = [make_session(fake_home, age_days=40 + n) for n in range(3)]
    fresh = make_session(fake_home, age_days=0)
    noted = fake_home.root / "pruned-by"
    daemon = start_daemon(fake_home, everywhere=_PRUNED_BY, extra={"PRUNED_BY": str(noted)})

    report = daemon.call("prune", {"older_than": "30d"})

    assert sorted(r["id"] for r in report["removed"]) == sorted(s.id for s in old)
    assert all(r["paths"] for r in report["removed"])
    assert not any(s.transcript.exists() for s in old) and fresh.transcript.exists()
    [pid] = _pids(noted)
    assert pid != daemon.proc.pid, "the prune ran in the daemon's own process"
    assert {row["id"] for row in daemon.call("ls")} == {fresh.id}
    last = daemon.status()["last_prune"]
    assert last["removed"] == 3 and last["scheduled"] is False


def test_a_refused_purge_ends_as_it_does_in_process(fake_home) -> None:
    """The child's Failure comes back as data: the same exit code, words
    and report from the daemon as from the CLI alone."""
    s = make_session(fake_home, age_days=0.1)
    assert fake_home.cli("pin", "claude", s.id).returncode == 0
    alone = fake_home.cli("purge", "claude", s.id, "--json")
    daemon = start_daemon(fake_home)
    served = fake_home.cli("purge", "claude", s.id, "--json")
    assert daemon.proc.poll() is None
    assert served.returncode == alone.returncode == 4, served.stderr
    assert served.stderr == alone.stderr
    assert _timeless(served.stdout) == _timeless(alone.stdout)
    assert [k["reason"] for k in json.loads(served.stdout)["kept"]] == ["pinned"]
    assert s.transcript.exists()


def _timeless(report: str) -> dict[str, Any]:
    """A report without what depends on when it ran."""
    doc: dict[str, Any] = json.loads(report)
    del doc["trash"]["until"]
    return doc


@pytest.mark.parametrize(
    ("method", "params", "named"),
    [
        ("prune", {"older_than": "soon"}, "--older-than"),
        ("prune", {"agent": "nosuch"}, "nosuch"),
        ("purge", {"agent": "claude", "id": "not-an-id"}, "not-an-id"),
    ],
)
def test_bad_parameters_come_back_named(
    fake_home, method: str, params: dict[str, Any], named: str
) -> None:
    make_session(fake_home, age_days=40)
    daemon = start_daemon(fake_home)
    with pytest.raises(Failure) as raised:
        daemon.call(method, params)
    assert named in raised.value.message
    if method == "prune":
        assert raised.value.code == INVALID_PARAMS and raised.value.exit == 2
    else:
        assert raised.value.exit == 5
    assert daemon.status()["last_prune"] is None


def test_what_changed_while_a_prune_ran_reaches_the_index_after_it(fake_home) -> None:
    """The watcher holds its events while the daemon prunes, and past
    PENDING_MAX leaves them to a reconcile in a process of its own: a
    session made meanwhile is listed once the prune ends."""
    old = [make_session(fake_home, age_days=40 + n) for n in range(3)]
    make_session(fake_home, age_days=0)
    few = "from agentkeep.daemon import watch\nwatch.PENDING_MAX = 5"
    slow = (
        "import time\nfrom agentkeep.prune import remove\n"
        "remove._after_lease = lambda agent, sid: time.sleep(1)\n"
    ) + _RECONCILED_BY
    noted = fake_home.root / "reconciled-by"
    daemon = start_daemon(
        fake_home, seams=few, everywhere=slow, extra={"RECONCILED_BY": str(noted)}
    )
    at_start = _pids(noted)
    answers: list[Any] = []
    pruning = threading.Thread(
        target=lambda: answers.append(daemon.call("prune", {"older_than": "30d"}, timeout=60))
    )
    pruning.start()
    try:
        daemon.wait(lambda: not old[0].transcript.exists(), 20, "the first removal")
        new = make_session(fake_home, age_days=0)
    finally:
        pruning.join(60)
    assert answers and len(answers[0]["removed"]) == 3
    if not events_named(daemon.log, "a flood of events: a reconcile will look instead"):
        pytest.fail("SETUP INVALID: no flood of events while the prune ran")
    daemon.wait(
        lambda: new.id in {row["id"] for row in daemon.call("ls")}, 15, "the new session listed"
    )
    assert at_start == [daemon.proc.pid], "SETUP INVALID: the start-up reconcile not noted"
    after = _pids(noted)[1:]
    assert after and daemon.proc.pid not in after, "the flood's reconcile ran in the daemon"


def test_a_scan_runs_in_a_process_of_its_own_and_its_answer_comes_back(fake_home) -> None:
    sessions = [make_session(fake_home, age_days=n) for n in range(3)]
    noted = fake_home.root / "scanned-by"
    daemon = start_daemon(fake_home, everywhere=_SCANNED_BY, extra={"SCANNED_BY": str(noted)})
    before = _pids(noted)

    answer = daemon.call("scan")

    assert answer["sessions"]["claude"] == 3 and answer["artifacts"] > 0
    [pid] = _pids(noted)[len(before) :]
    assert pid != daemon.proc.pid, "the scan ran in the daemon's own process"
    assert {row["id"] for row in daemon.call("ls")} == {s.id for s in sessions}


@pytest.mark.parametrize("end", ["stopped", "killed"])
def test_a_scan_ends_with_its_daemon(fake_home, end: str) -> None:
    """A scan has no session to finish: its process ends at once when the
    daemon stops (SIGTERM passed on) or is killed (its stdin closes), and
    leaves no write to the index running."""
    make_session(fake_home, age_days=1)
    noted = fake_home.root / "scanned-by"
    extra = {"SCANNED_BY": str(noted), "SCAN_SLEEP": "60"}
    daemon = start_daemon(fake_home, everywhere=_SCANNED_BY, extra=extra)
    before = len(_pids(noted))
    asking = threading.Thread(target=_ask_quietly, args=(daemon, "scan"), daemon=True)
    asking.start()
    daemon.wait(lambda: len(_pids(noted)) > before, 20, "the scan's process scanning")
    scanning = [p for p in psutil.Process(daemon.proc.pid).children() if p.pid == _pids(noted)[-1]]
    if not scanning:
        pytest.fail("SETUP INVALID: the scan runs in no process of the daemon's own")

    if end == "stopped":
        assert daemon.stop(signal.SIGTERM) == 0, daemon.stderr()
    else:
        daemon.proc.kill()
        daemon.proc.wait(10)
    _, alive = psutil.wait_procs(scanning, timeout=10)

    assert alive == [], f"the scan went on after its daemon was {end}"


def _ask_quietly(daemon: Any, method: str, params: dict[str, Any] | None = None) -> None:
    """Ask, and let the daemon's end answer it however it does."""
    try:
        daemon.call(method, params, timeout=60)
    except (Failure, client.NoDaemon, OSError):
        pass


def _asking(daemon: Any, method: str, params: dict[str, Any] | None = None) -> None:
    threading.Thread(target=_ask_quietly, args=(daemon, method, params), daemon=True).start()


# In the daemon's child, listing an agent for a prune waits a minute first
# (noting the child's pid in $PLANNING): a big home's listing and plan.
_SLOW_PLANNING = """
import os, sys, time
from agentkeep.adapters import claude
_listing = claude.ClaudeAdapter.sessions
def _slowly(self, names=None, known=None):
    if names is None and sys.argv[0].endswith("child.py"):
        with open(os.environ["PLANNING"], "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(60)
    yield from _listing(self, names, known)
claude.ClaudeAdapter.sessions = _slowly
"""
# A child watches its parent as it does where the kernel does not tell it.
_BY_POLLING = "import agentkeep.children\nagentkeep.children.KERNEL_TELLS = False\n"


def _child_events(daemon: Any) -> list[dict[str, Any]]:
    return [e for e in log_events(daemon.log) if e.get("logger") == "agentkeep.daemon.child"]


def _prune_lock_free(daemon: Any) -> bool:
    lock = PrunerLock(daemon.env.state_dir)
    if not lock.acquire(wait=False):
        return False
    lock.release()
    return True


@pytest.mark.parametrize("watching", ["kernel", "polling"])
@pytest.mark.parametrize("end", ["killed", "stopped"])
def test_a_prune_still_planning_ends_with_its_daemon(fake_home, end: str, watching: str) -> None:
    """Listing and planning leave nothing half done: the prune's child ends
    at once when its daemon is killed (the kernel tells it, or it sees its
    parent change) or stops, and the prune lock is free again."""
    for n in range(3):
        make_session(fake_home, age_days=40 + n)
    planning = fake_home.root / "planning"
    seams = _SLOW_PLANNING + (_BY_POLLING if watching == "polling" else "")
    daemon = start_daemon(fake_home, everywhere=seams, extra={"PLANNING": str(planning)})
    _asking(daemon, "prune", {"older_than": "30d"})
    wait_until(lambda: _pids(planning), "the prune's child planning")
    [pid] = _pids(planning)
    child = psutil.Process(pid)
    if child.ppid() != daemon.proc.pid:
        pytest.fail("SETUP INVALID: the prune plans in no child of the daemon")

    if end == "stopped":
        assert daemon.stop(signal.SIGTERM) == 0, daemon.stderr()
    else:
        daemon.proc.kill()
        daemon.proc.wait(10)
    _, alive = psutil.wait_procs([child], timeout=5)

    assert alive == [], f"the prune went on planning after its daemon was {end}"
    assert _prune_lock_free(daemon), "the prune lock is still held"
    said = _child_events(daemon)
    assert [e["event"] for e in said] == ["stopped: nothing was being removed"], said
    assert "Traceback" not in daemon.stderr()


# The prune's second removed file waits for $GATE/go (noting the child's pid
# in $GATE/removing first): a session half removed.
_GATED_REMOVAL = """
import os, pathlib, time
import agentkeep.rmtree as rmtree
gate = pathlib.Path(os.environ["GATE"])
leaves = []
def _at_leaf(path):
    leaves.append(path)
    if len(leaves) == 2:
        (gate / "removing").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while not (gate / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
rmtree._before_leaf = _at_leaf
"""


@pytest.mark.parametrize("watching", ["kernel", "polling"])
def test_a_prune_removing_when_its_daemon_dies_finishes_that_session_only(
    fake_home, watching: str
) -> None:
    old = [make_session(fake_home, age_days=40 + n) for n in range(4)]
    make_session(fake_home, age_days=1)
    gate = fake_home.root / "gate"
    gate.mkdir()
    seams = _GATED_REMOVAL + (_BY_POLLING if watching == "polling" else "")
    daemon = start_daemon(fake_home, everywhere=seams, extra={"GATE": str(gate)})
    _asking(daemon, "prune", {"older_than": "30d"})
    removing = gate / "removing"
    # write_text creates the file before it writes the pid: wait for both.
    wait_until(lambda: removing.exists() and removing.read_text(), "the prune's child removing")
    child = psutil.Process(int(removing.read_text()))

    daemon.proc.kill()
    daemon.proc.wait(10)
    daemon.wait(
        lambda: any(
            e["event"] == "stopping after the session being removed" for e in _child_events(daemon)
        ),
        5,
        "the child told its daemon is gone",
    )
    (gate / "go").touch()
    _, alive = psutil.wait_procs([child], timeout=10)

    assert alive == [], "the prune went on after the session it was removing"
    assert sum(not s.transcript.exists() for s in old) == 1, "not one session removed, whole"
    assert pending_journal(fake_home) == set()
    assert "Traceback" not in daemon.stderr()


# The daemon's child binds itself to the daemon only once the daemon is
# gone (noting its pid, then "gone", in $BINDING): the race a kernel's
# notice set too late would lose.
_BOUND_LATE = """
import os, time
import agentkeep.children as children
_bind = children.end_with_parent
def _late(parent):
    with open(os.environ["BINDING"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    while os.getppid() == parent:
        time.sleep(0.01)
    with open(os.environ["BINDING"], "a") as f:
        f.write("gone\\n")
    _bind(parent)
children.end_with_parent = _late
"""


def test_a_child_whose_daemon_died_before_it_was_bound_ends(fake_home) -> None:
    for n in range(3):
        make_session(fake_home, age_days=40 + n)
    binding, planning = fake_home.root / "binding", fake_home.root / "planning"
    daemon = start_daemon(
        fake_home,
        everywhere=_BOUND_LATE + _SLOW_PLANNING,
        extra={"BINDING": str(binding), "PLANNING": str(planning)},
    )
    _asking(daemon, "prune", {"older_than": "30d"})
    wait_until(binding.exists, "the prune's child binding itself to its daemon")
    child = psutil.Process(int(binding.read_text().split()[0]))

    daemon.proc.kill()
    daemon.proc.wait(10)
    wait_until(lambda: "gone" in binding.read_text(), "the child seeing its daemon gone")
    _, alive = psutil.wait_procs([child], timeout=5)

    assert alive == [], "the child went on: its daemon died before it was bound"
    assert not _pids(planning), "the child started a prune for a daemon already gone"


# The daemon is killed as soon as its child is started, before it can ask
# it anything (the child's pid goes to $CHILD).
_KILLED_BEFORE_ASKING = """
import os, signal, subprocess
_start = subprocess.Popen.__init__
def _started(self, args, *rest, **kwargs):
    _start(self, args, *rest, **kwargs)
    if "agentkeep.daemon.child" in args:
        with open(os.environ["CHILD"], "w") as f:
            f.write(str(self.pid))
        os.kill(os.getpid(), signal.SIGKILL)
subprocess.Popen.__init__ = _started
"""


def test_a_daemon_killed_before_it_asks_its_child_leaves_one_quiet_line(fake_home) -> None:
    make_session(fake_home, age_days=1)
    pid_file = fake_home.root / "child"
    daemon = start_daemon(fake_home, seams=_KILLED_BEFORE_ASKING, extra={"CHILD": str(pid_file)})
    _asking(daemon, "scan")
    assert daemon.proc.wait(20) == -signal.SIGKILL, "SETUP INVALID: the daemon was not killed"
    try:
        child = psutil.Process(int(pid_file.read_text()))
    except psutil.NoSuchProcess:
        child = None
    if child is not None:
        _, alive = psutil.wait_procs([child], timeout=10)
        assert alive == [], "the child went on without its daemon"

    said = _child_events(daemon)
    assert len(said) == 1 and said[0]["level"] in ("info", "warning"), said
    assert "Traceback" not in daemon.stderr(), daemon.stderr()


# After the prune, every write to a file fails in the daemon's child, as
# on a state disk with no room left (EFBIG: a file size limit of 0).
_FULL_AFTER_THE_PRUNE = """
import resource, signal, sys
import agentkeep.core.pruning as pruning
_prune = pruning.prune
def _then_full(*args, **kwargs):
    report = _prune(*args, **kwargs)
    if sys.argv[0].endswith("child.py"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    return report
pruning.prune = _then_full
"""


def test_a_prune_that_finished_on_a_full_state_disk_is_answered(fake_home) -> None:
    old = [make_session(fake_home, age_days=40 + n) for n in range(3)]
    daemon = start_daemon(fake_home, everywhere=_FULL_AFTER_THE_PRUNE)

    report = daemon.call("prune", {"older_than": "30d"})

    assert sorted(r["id"] for r in report["removed"]) == sorted(s.id for s in old)
    assert not any(s.transcript.exists() for s in old)
    assert daemon.status()["last_prune"]["removed"] == 3


def test_a_scheduled_prune_the_prune_lock_kept_runs_once_it_is_free(fake_home) -> None:
    """A daemon restarted while its killed predecessor's prune still ends
    (or while the CLI prunes) finds the prune lock held: its turn waits for
    the lock, not for the next prune_interval."""
    fake_home.write_config('retention = "30d"\n', seen=True)
    old = [make_session(fake_home, age_days=40 + n) for n in range(3)]
    make_session(fake_home, age_days=1)  # or the prune pauses: everything idle?
    lock = PrunerLock(Env.from_environ(fake_home.environ).state_dir)
    assert lock.acquire(wait=False)
    try:
        daemon = start_daemon(fake_home, extra={"AGENTKEEP_FIRST_PRUNE_DELAY": "0.2"})
        wait_until(
            lambda: events_named(daemon.log, _WAITS), "the scheduled prune finding the lock held"
        )
        assert all(s.transcript.exists() for s in old)
    finally:
        lock.release()

    daemon.wait(lambda: events_named(daemon.log, "scheduled prune done"), 15, "the turn after")
    assert not any(s.transcript.exists() for s in old)
    assert daemon.status()["last_prune"]["removed"] == 3


_WAITS = "another prune holds the prune lock: the scheduled prune waits for it"
