"""The agentkeep benchmark: one command, results in bench/RESULTS.md.

    .venv/bin/python bench/run.py [--sizes 1000,10000,50000] [--quick] [--huge]
        [--only startup,scan,prune,daemon]

`--huge` adds 200,000 sessions to the sizes (scan, daemon and prune once
each; some 10 GB of tmpfs, checked first).

Every figure is measured against a baseline run in the same process at the
same time (alternating, median of several), because this machine is shared
and noisy: `find` for scan, `rm -rf` of exactly the same paths for prune, a
trivial python echo server for socket round trips, `python -c pass` for a
restart. Every process runs as a fake user inside the bench's own tmp dir
(HOME, XDG_*, TMPDIR, CLAUDE_CONFIG_DIR, CODEX_HOME ...), never the real one.
Trees live on tmpfs (/dev/shm) unless --tmpdir says otherwise: creating
files on this VM's disk costs ~0.5 ms each, and tmpfs makes the baselines
faster, so the ratios are stricter, not kinder.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import homes  # noqa: E402
import measure as m  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "RESULTS.md"
BENCHES = ("startup", "scan", "prune", "daemon")
# --huge adds this many sessions to the sizes, once: a few GB of tmpfs.
HUGE = 200_000
# What one session of the bench's homes takes: on tmpfs (measured: 35 KiB
# mixed, 41 KiB Claude only, plus the index and state), and in memory (the
# same pages, ~17 inodes and dentries, and the processes at work).
HUGE_TMPFS_PER_SESSION = 48 * 1024
HUGE_MEMORY_PER_SESSION = 72 * 1024
# Files and directories a session takes (measured: 14.2 mixed, 17.4 Claude
# only): a tmpfs has a fixed number of inodes (nr_inodes, by default half
# the RAM's pages), which 200,000 sessions may exceed before its bytes.
HUGE_INODES_PER_SESSION = 18


@dataclass
class Figure:
    """One row of the results: a measured value against its baseline."""

    size: int
    name: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    target: str = ""
    met: bool | None = None  # None: informational, no target
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline <= 0:
            return None
        return self.value / self.baseline


@dataclass
class Settings:
    sizes: list[int]
    prune_sizes: list[int]
    quick: bool
    tmpdir: str
    repeats: int
    status_requests: int
    ls_requests: int
    event_samples: int
    idle_seconds: float
    restarts: int
    cold_deadline: float
    only: set[str] = field(default_factory=lambda: set(BENCHES))
    huge: bool = False
    figures: list[Figure] = field(default_factory=list)
    # What each start-up command line imported, by its label.
    imports: dict[str, m.Imports] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, fig: Figure) -> Figure:
        self.figures.append(fig)
        mark = {True: "met", False: "MISSED", None: ""}[fig.met]
        base = (
            f" (baseline {fig.baseline_name} {_fmt(fig.baseline, fig.unit)}"
            if fig.baseline is not None
            else ""
        )
        ratio = f", {fig.ratio:.2f}x)" if fig.ratio is not None else (")" if base else "")
        value = _fmt(fig.value, fig.unit)
        name = f"{fig.name} [{fig.note}]" if fig.note else fig.name
        print(f"  [{fig.size}] {name}: {value}{base}{ratio} {fig.target} {mark}", flush=True)
        return fig

    def problem(self, text: str) -> None:
        self.problems.append(text)
        print(f"  PROBLEM: {text}", flush=True)

    def repeats_at(self, n: int) -> int:
        """Runs of each timed command at `n` sessions: fewer at --huge's
        size, where one scan takes tens of seconds."""
        return min(self.repeats, 3) if n >= HUGE else self.repeats


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "MB":
        return f"{value:.1f} MB"
    if unit == "cpu-s":
        return f"{value:.2f} cpu-s"
    return f"{value:g} {unit}".strip()


# -- scan --------------------------------------------------------------------
def bench_scan(s: Settings, bh: homes.BenchHome, n: int) -> None:
    print(f"scan at {n}", flush=True)
    roots = bh.roots()
    scans, finds, stats = [], [], []
    for k in range(s.repeats_at(n)):
        finds.append(m.run(["find", *roots, "-type", "f"], bh.environ))
        # find -type f reads d_type and stats nothing; scan needs every
        # entry's size and mtime, which this find reads too.
        stats.append(m.run(["find", *roots, "-printf", "%s %T@\\n"], bh.environ))
        env = dict(bh.environ, XDG_STATE_HOME=str(bh.root / f"scan-state-{k}"))
        r = m.run(m.agentkeep("scan", "--json"), env)
        if r.rc != 0:
            s.problem(f"scan at {n} exited {r.rc}: {r.stderr[-500:]}")
            return
        got = r.json()["sessions"]
        if {a: c for a, c in got.items() if c} != bh.counts:
            s.problem(f"scan at {n} counted {got}, the tree holds {bh.counts}")
        scans.append(r)
        shutil.rmtree(bh.root / f"scan-state-{k}", ignore_errors=True)
    files = len(finds[0].stdout.splitlines())
    wall = m.median([r.seconds for r in scans])
    base = m.median([r.seconds for r in finds])
    # At STARTUP_SCAN sessions the wall time is mostly the CLI's start-up.
    targeted = n >= 10_000 or n == STARTUP_SCAN
    s.add(
        Figure(
            n,
            "scan wall (CLI, fresh state)",
            wall,
            "s",
            base,
            f"find -type f ({files} files)",
            "<= 2x find" if targeted else "",
            wall / base <= 2.0 if targeted else None,
        )
    )
    s.add(
        Figure(
            n,
            "scan wall, against a find that stats",
            wall,
            "s",
            m.median([r.seconds for r in stats]),
            "find -printf '%s %T@' (size+mtime of every entry)",
        )
    )
    cpu = m.median([r.cpu_s for r in scans])
    s.add(
        Figure(
            n,
            "scan CPU (user+sys, its worker processes included)",
            cpu,
            "cpu-s",
            m.median([r.cpu_s for r in finds]),
            "find CPU",
        )
    )
    inner = m.median([r.json()["seconds"] for r in scans])
    s.add(Figure(n, "scan's own `seconds` (in-process, no start-up)", inner, "s", base, "find"))
    rss = max(r.maxrss_mb for r in scans)
    s.add(
        Figure(
            n,
            "scan peak RSS (the largest of its processes)",
            rss,
            "MB",
            target="< 100 MB" if n == 10_000 else "",
            met=rss < 100 if n == 10_000 else None,
        )
    )


# -- start-up ----------------------------------------------------------------
# A scan this small is mostly the CLI's start-up.
STARTUP_SCAN = 2_000
# The command lines whose imports are listed, and whether a daemon answers.
IMPORTED: tuple[tuple[tuple[str, ...], bool], ...] = (
    (("--version",), False),
    (("status", "--json"), True),
    (("status",), True),
    (("status",), False),
    (("scan",), False),
)


def bench_startup(s: Settings, scratch: Path) -> None:
    print("start-up", flush=True)
    env = homes.fake_home(scratch / "startup").environ
    passes, versions = [], []
    for _ in range(max(3, s.repeats)):
        passes.append(m.run([sys.executable, "-c", "pass"], env).seconds)
        versions.append(m.run(m.agentkeep("--version"), env).seconds)
    version, base = m.median(versions), m.median(passes)
    s.add(
        Figure(
            0,
            "CLI start (`agentkeep --version`)",
            version,
            "s",
            base,
            "python -c pass",
            "<= 2x python -c pass",
            version / base <= 2.0,
        )
    )
    _startup_imports(s, env, scratch / "startup-logs")
    bh = homes.make_home(scratch / f"startup-{STARTUP_SCAN}", STARTUP_SCAN)
    try:
        bench_scan(s, bh, STARTUP_SCAN)
    finally:
        bh.remove()


def _startup_imports(s: Settings, env: dict[str, str], logdir: Path) -> None:
    """What `python -X importtime` sees each command line of IMPORTED import;
    and `status` answered by the daemon, timed against `python -c pass`."""
    logdir.mkdir()
    d = Daemon(env, logdir)
    try:
        for args, served in IMPORTED:
            if served and d.proc is None:
                d.start()
                _served_status(s, env)
            if not served and d.proc is not None:
                d.stop()
            label = f"agentkeep {' '.join(args)}" + (" (daemon answering)" if served else "")
            found = m.import_times(list(args), env)
            if found.rc not in (0, 1) or not found.modules:
                s.problem(f"{label} under -X importtime exited {found.rc}")
                continue
            s.imports[label] = found
            s.add(
                Figure(
                    0,
                    f"import time of `{label}` (python -X importtime)",
                    found.total,
                    "s",
                    note=f"{len(found.modules)} modules; the top ten are listed below",
                )
            )
    finally:
        if d.proc is not None:
            d.stop()


def _served_status(s: Settings, env: dict[str, str]) -> None:
    passes, status = [], []
    for _ in range(max(3, s.repeats)):
        passes.append(m.run([sys.executable, "-c", "pass"], env).seconds)
        status.append(m.run(m.agentkeep("status", "--json"), env).seconds)
    s.add(
        Figure(
            0,
            "`agentkeep status --json` answered by the daemon",
            m.median(status),
            "s",
            m.median(passes),
            "python -c pass",
        )
    )


# -- prune -------------------------------------------------------------------
PRUNE_CONFIG = 'trash = "0"\nmax_removals = 1000000\n'


def bench_prune(s: Settings, n: int) -> None:
    print(f"prune at {n}", flush=True)
    base = Path(tempfile.mkdtemp(prefix="akb-prune-", dir=s.tmpdir))
    try:
        if n >= HUGE:
            rm, bh = _rm_a_twin_built_alike(s, base, n)
        else:
            bh = _prune_home(base / "a", n)
            # The state dir's parent exists in both trees, so only agentkeep's
            # own files (excluded from the comparison) differ by design.
            twin = base / "b"
            subprocess.run(["cp", "-a", str(bh.root), str(twin)], check=True)
            rm = _rm(base, bh, twin)
        r = m.run(m.agentkeep("prune", "--older-than", "30d", "--json"), bh.environ)
        if r.rc != 0:
            s.problem(f"prune at {n} exited {r.rc}: {r.stderr[-500:]}")
        report = r.json() if r.stdout.strip() else {}
        removed = len(report.get("removed", []))
        if removed != n or report.get("kept") or report.get("failed"):
            kept, failed = report.get("kept", []), report.get("failed", [])
            s.problem(
                f"prune at {n}: removed {removed} of {n}; kept {kept[:3]} failed {failed[:3]}"
            )
        if n >= HUGE:
            left = [p for p in bh.claude_idle_paths if os.path.lexists(p)]
            if left:
                s.problem(f"prune at {n}: {len(left)} idle paths left, {left[:3]}")
        else:
            _compare_after(s, n, bh.root, twin)
        s.add(
            Figure(
                n,
                f"prune {n} idle Claude sessions (CLI, trash=0)",
                r.seconds,
                "s",
                rm.seconds,
                f"rm -rf of the same {len(bh.claude_idle_paths)} paths",
            )
        )
        s.add(Figure(n, "prune CPU (user+sys)", r.cpu_s, "cpu-s", rm.cpu_s, "rm CPU"))
        s.add(Figure(n, "prune peak RSS", r.maxrss_mb, "MB", note=f"{removed} removed"))
        bh.remove()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _prune_home(root: Path, n: int) -> homes.BenchHome:
    bh = homes.make_home(root, n, mix={"claude": 1.0}, idle_share=1.0)
    bh.write_config(PRUNE_CONFIG)
    (bh.fake.state).mkdir(parents=True)
    return bh


def _rm(base: Path, bh: homes.BenchHome, twin: Path) -> m.Run:
    """`rm -rf` of the idle paths of `bh`, as they lie under `twin`."""
    rm_list = base / "rm-list"
    prefix = str(bh.root)
    rm_list.write_bytes(
        b"".join((str(twin) + p[len(prefix) :]).encode() + b"\0" for p in bh.claude_idle_paths)
    )
    return m.run(["xargs", "-0", "-a", str(rm_list), "rm", "-rf"], bh.environ)


def _rm_a_twin_built_alike(s: Settings, base: Path, n: int) -> tuple[m.Run, homes.BenchHome]:
    """At --huge's size two trees would not fit on tmpfs at once: `rm -rf`
    runs on a twin built alike (the same layout and sizes, other ids),
    which is gone before the tree to prune is built."""
    twin = _prune_home(base / "b", n)
    rm = _rm(base, twin, twin.root)
    twin.remove()
    return rm, _prune_home(base / "a", n)


def _compare_after(s: Settings, n: int, pruned: Path, removed: Path) -> None:
    """After prune and rm -rf the two trees should hold the same paths."""

    def listing(root: Path) -> set[str]:
        out = set()
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            if rel.startswith(("home/.local/state/agentkeep", "home/.config")):
                continue
            out.update(os.path.join(rel, x) for x in (*dirnames, *filenames))
        return out

    a, b = listing(pruned), listing(removed)
    if a != b:
        only_a = sorted(a - b)
        only_b = sorted(b - a)
        s.problem(
            f"prune at {n}: after prune vs rm -rf, {len(only_a)} paths left only by prune"
            f" {only_a[:4]}, {len(only_b)} only by rm {only_b[:4]}"
        )


SHARE_NAME = "prune peak RSS, a tenth of the home removed"


def bench_prune_share(s: Settings, n: int) -> None:
    """A prune of a tenth of a home of `n`: against the prune of all of a
    home of `n`, what removing more costs in memory, the home held the same."""
    print(f"prune of a tenth of {n}", flush=True)
    base = Path(tempfile.mkdtemp(prefix="akb-share-", dir=s.tmpdir))
    try:
        bh = homes.make_home(base / "a", n, mix={"claude": 1.0}, idle_share=0.1)
        bh.write_config(PRUNE_CONFIG)
        bh.fake.state.mkdir(parents=True)
        r = m.run(m.agentkeep("prune", "--older-than", "30d", "--json"), bh.environ)
        report = r.json() if r.rc == 0 and r.stdout.strip() else {}
        removed = len(report.get("removed", []))
        if r.rc != 0 or removed != bh.claude_idle:
            s.problem(f"prune of a tenth of {n}: exit {r.rc}, removed {removed}")
        s.add(Figure(n, SHARE_NAME, r.maxrss_mb, "MB", note=f"{removed} removed"))
    finally:
        shutil.rmtree(base, ignore_errors=True)


TRASH_NAME = "prune idle Claude sessions into the trash (CLI, the default trash)"


def bench_prune_trash(s: Settings, n: int) -> None:
    """A prune as the default config runs it, into the trash, against the
    prune of the same home with trash=0 (bench_prune, run before it)."""
    print(f"prune into the trash at {n}", flush=True)
    base = Path(tempfile.mkdtemp(prefix="akb-trash-", dir=s.tmpdir))
    try:
        bh = _prune_home(base / "a", n)
        bh.write_config("max_removals = 1000000\n")
        r = m.run(m.agentkeep("prune", "--older-than", "30d", "--json"), bh.environ)
        report = r.json() if r.rc == 0 and r.stdout.strip() else {}
        removed = len(report.get("removed", []))
        if r.rc != 0 or removed != n or not report.get("trash", {}).get("bytes"):
            s.problem(f"prune into the trash at {n}: exit {r.rc}, removed {removed}")
        bare = [f for f in s.figures if f.size == n and f.name.startswith(f"prune {n} idle")]
        base_s = bare[0].value if bare else None
        with_base = "the same prune with trash=0" if base_s is not None else ""
        s.add(Figure(n, TRASH_NAME, r.seconds, "s", base_s, with_base))
        s.add(
            Figure(
                n, "prune peak RSS, into the trash", r.maxrss_mb, "MB", note=f"{removed} removed"
            )
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def prune_flatness(s: Settings) -> None:
    share = {f.size: f.value for f in s.figures if f.name == SHARE_NAME}
    rss = {f.size: f.value for f in s.figures if f.name == "prune peak RSS"}
    if 10_000 in share and 10_000 in rss:
        s.add(
            Figure(
                10_000,
                "prune RSS growth, 1,000 -> 10,000 removed of 10,000",
                rss[10_000],
                "MB",
                share[10_000],
                "a tenth removed",
                "flat (<= 1.25x)",
                rss[10_000] / share[10_000] <= 1.25,
            )
        )
    # Across homes, not removals: the plan holds what it read of each
    # session listed (README), so this grows with the home; no target.
    if 1000 in rss and 10_000 in rss:
        s.add(
            Figure(
                10_000,
                "prune peak RSS, every session of a 10,000-session home removed",
                rss[10_000],
                "MB",
                rss[1000],
                "of a 1,000-session home",
            )
        )


# -- daemon ------------------------------------------------------------------
class Daemon:
    # The schedule's first prune and trash expiry (60 s after ready by
    # default) would fall inside the idle window at 50,000 sessions: idle
    # means no job due (the issue's "no timer but the watchdog's ping and
    # the schedule"), and the prune's cost is measured by its own figures.
    FIRST_JOB_DELAY = "86400"

    def __init__(self, env: dict[str, str], logdir: Path) -> None:
        self.env = dict(env, AGENTKEEP_FIRST_PRUNE_DELAY=self.FIRST_JOB_DELAY)
        self.sock = os.path.join(env["XDG_RUNTIME_DIR"], "agentkeep", "agentkeep.sock")
        self.logdir = logdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, deadline: float = 600) -> float:
        """Start `agentkeep serve`; seconds until `status` answers."""
        self.starts += 1
        started = time.perf_counter()
        with open(self.logdir / f"serve-{self.starts}.log", "wb") as log:
            self.proc = subprocess.Popen(m.agentkeep("serve"), env=self.env, stdout=log, stderr=log)
        m.wait_answer(
            self.sock, deadline, alive=lambda: self.proc is not None and self.proc.poll() is None
        )
        return time.perf_counter() - started

    def stop(self) -> float:
        assert self.proc is not None
        started = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        return time.perf_counter() - started

    def log_text(self) -> str:
        path = self.logdir / f"serve-{self.starts}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self) -> str:
        return self.log_text()[-1500:]


def bench_daemon(s: Settings, bh: homes.BenchHome, n: int) -> None:
    print(f"daemon at {n}", flush=True)
    env = dict(bh.environ, XDG_STATE_HOME=str(bh.root / "daemon-state"))
    logdir = bh.root / "daemon-logs"
    logdir.mkdir()
    d = Daemon(env, logdir)
    echo = m.EchoServer(env["XDG_RUNTIME_DIR"], env)
    try:
        if not _daemon_cold(s, d, n):
            return
        sessions = m.rpc(d.sock, "status")["sessions"]
        if sessions != n:
            s.problem(f"daemon at {n} indexed {sessions} sessions")
        _daemon_restart(s, d, n)
        _daemon_round_trips(s, d, echo, n)
        _daemon_ls(s, d, n)
        _daemon_events(s, d, bh, n)
        _daemon_idle(s, d, n)
        _daemon_memory(s, d, n, MIXED)
    finally:
        echo.close()
        if d.proc is not None:
            d.stop()


def bench_daemon_memory(s: Settings, n: int, scratch: Path) -> None:
    """The daemon's memory on a home of Claude sessions only (the mixed
    home's figures are bench_daemon's), against the same figures there."""
    print(f"daemon memory at {n}, {CLAUDE_ONLY}", flush=True)
    bh = homes.make_home(scratch / f"claude-{n}", n, mix={"claude": 1.0})
    try:
        env = dict(bh.environ, XDG_STATE_HOME=str(bh.root / "daemon-state"))
        r = m.run(m.agentkeep("scan"), env)
        if r.rc != 0:
            s.problem(f"scan of the {CLAUDE_ONLY} home at {n} exited {r.rc}: {r.stderr[-300:]}")
            return
        logdir = bh.root / "daemon-logs"
        logdir.mkdir()
        d = Daemon(env, logdir)
        d.start()
        try:
            for _ in range(s.ls_requests):
                m.rpc(d.sock, "ls")
            time.sleep(2)
            _daemon_memory(s, d, n, CLAUDE_ONLY)
        finally:
            d.stop()
    finally:
        bh.remove()


MIXED, CLAUDE_ONLY = "mixed home", "Claude-only home"
# The daemon's steady RSS at each size and mix, for the growth figures.
_STEADY: dict[tuple[str, int], float] = {}


def _daemon_memory(s: Settings, d: Daemon, n: int, mix: str) -> None:
    """Steady RSS (after idling) and peak RSS after answering ls (asked
    before this) and du; then the peaks during a scan and during a prune
    (what the scheduled prune would remove: older than 30 days), each
    against the steady RSS."""
    assert d.proc is not None
    pid = d.proc.pid
    for by in ("agent", "workspace"):
        m.rpc(d.sock, "du", {"by": by})
    time.sleep(2)
    mem = m.proc_status(pid)
    steady = _STEADY[(mix, n)] = mem["VmRSS"]
    peak_limit = 60 if n >= 50_000 else None
    s.add(
        Figure(
            n,
            f"daemon peak RSS after ls and du ({mix}, warm-started)",
            mem["VmHWM"],
            "MB",
            target=f"<= {peak_limit} MB" if peak_limit else "",
            met=mem["VmHWM"] <= peak_limit if peak_limit else None,
        )
    )
    s.add(Figure(n, f"daemon steady RSS after ls and du ({mix})", steady, "MB"))
    smallest = min(k for home, k in _STEADY if home == mix)
    if smallest < n:
        grew = steady - _STEADY[(mix, smallest)]
        s.add(
            Figure(
                n,
                f"daemon steady RSS growth from {smallest:,} sessions ({mix})",
                grew,
                "MB",
                target="<= 10 MB",
                met=grew <= 10,
            )
        )
    for what, method, params in (
        ("scan", "scan", {}),
        ("prune (older than 30 days)", "prune", {"older_than": "30d"}),
    ):
        m.reset_peak(pid)
        try:
            m.rpc(d.sock, method, params, timeout=1800)
        except m.RpcFailed as exc:
            s.problem(f"{method} at {n} ({mix}) failed: {exc}")
            continue
        if not m.settle(pid):
            s.problem(f"the daemon at {n} ({mix}) was still busy 120 s after its {method}")
        peak = m.proc_status(pid)["VmHWM"]
        s.add(
            Figure(
                n,
                f"daemon peak RSS during a {what} ({mix})",
                peak,
                "MB",
                steady,
                "steady RSS",
                "<= 1.5x steady",
                peak <= 1.5 * steady,
            )
        )
        _apart_peak(s, d, n, mix, what, method, steady)


def _apart_peak(
    s: Settings, d: Daemon, n: int, mix: str, what: str, method: str, steady: float
) -> None:
    """The daemon runs each scan and prune in a process of its own, which
    logs its peak RSS: beside the daemon's, what the work itself took."""
    done = [line for line in d.log_text().splitlines() if f'"event": "{method} done"' in line]
    peak = json.loads(done[-1]).get("peak_rss_mb") if done else None
    if peak is None:
        s.problem(f"no peak RSS logged by the {method}'s process at {n} ({mix})")
        return
    s.add(
        Figure(
            n,
            f"peak RSS of the daemon's process for a {what} ({mix})",
            peak,
            "MB",
            steady,
            "daemon steady RSS",
        )
    )


def _daemon_cold(s: Settings, d: Daemon, n: int) -> bool:
    """Start on an empty index. Past the deadline the figure is recorded as
    missed, and the index is built by `agentkeep scan` instead so that the
    other daemon figures can still be taken."""
    name = "daemon cold start to ready (empty index)"
    try:
        cold = d.start(s.cold_deadline)
    except m.RpcFailed as exc:
        alive = d.proc is not None and d.proc.poll() is None
        if not alive:
            s.problem(f"daemon at {n} did not come up: {exc}\n{d.log_tail()}")
            d.proc = None
            return False
        d.stop()
        note = f"not ready after {s.cold_deadline:.0f} s; stopped, index built by `scan` instead"
        s.add(Figure(n, name, s.cold_deadline, "s", note=note))
        s.problem(f"daemon at {n}: cold start not ready after {s.cold_deadline:.0f} s")
        r = m.run(m.agentkeep("scan"), d.env)
        if r.rc != 0:
            s.problem(f"scan for the daemon at {n} exited {r.rc}: {r.stderr[-300:]}")
            return False
        try:
            d.start()
        except m.RpcFailed as exc:
            s.problem(f"daemon at {n} did not come up on a scanned index: {exc}")
            return False
        return True
    s.add(Figure(n, name, cold, "s"))
    return True


def _daemon_restart(s: Settings, d: Daemon, n: int) -> None:
    passes, warm, stops = [], [], []
    for _ in range(s.restarts):
        passes.append(m.run([sys.executable, "-c", "pass"], d.env).seconds)
        stops.append(d.stop())
        warm.append(d.start())
    t = m.median(warm)
    target = {10_000: 2.0}.get(n)
    s.add(
        Figure(
            n,
            "daemon warm restart to ready (status answers)",
            t,
            "s",
            m.median(passes),
            "python -c pass",
            "<= 2 s" if target else "",
            t <= target if target else None,
        )
    )
    s.add(Figure(n, "daemon stop (SIGTERM to exit)", m.median(stops), "s"))


def _daemon_round_trips(s: Settings, d: Daemon, echo: m.EchoServer, n: int) -> None:
    status, base = [], []
    for _ in range(s.status_requests):
        base.append(echo.round_trip())
        status.append(m.timed_rpc(d.sock, "status")[0])
    for p in (50, 99):
        v, b = m.percentile(status, p), m.percentile(base, p)
        met = v <= 0.010 if p == 99 else None
        s.add(
            Figure(
                n,
                f"status round trip p{p} (raw socket, {len(status)} req)",
                v,
                "s",
                b,
                f"echo server p{p}",
                "<= 10 ms" if p == 99 else "",
                met,
            )
        )


def _daemon_ls(s: Settings, d: Daemon, n: int) -> None:
    assert d.proc is not None
    raw, cli, size = [], [], 0
    raw_cpu = cli_cpu = 0.0
    for _ in range(s.ls_requests):
        before = m.cpu_seconds(d.proc.pid)
        t, rows = m.timed_rpc(d.sock, "ls")
        raw_cpu += m.cpu_seconds(d.proc.pid) - before
        raw.append(t)
        size = len(rows)
    for _ in range(s.repeats):
        before = m.cpu_seconds(d.proc.pid)
        cli.append(m.run(m.agentkeep("ls", "--json"), d.env))
        cli_cpu += m.cpu_seconds(d.proc.pid) - before
    # The CLI falls back to working in-process when the daemon does not
    # answer for its view: the daemon's own CPU time per call tells which.
    if cli_cpu / len(cli) < 0.5 * raw_cpu / len(raw):
        s.problem(
            f"ls --json at {n} seems answered in-process, not by the daemon "
            f"(daemon CPU {cli_cpu:.2f} s for the CLI's calls, {raw_cpu:.2f} s for raw ones)"
        )
    if size != n:
        s.problem(f"ls over the socket at {n} listed {size} sessions")
    bad = [r for r in cli if r.rc != 0]
    if bad:
        s.problem(f"ls --json at {n} exited {bad[0].rc}: {bad[0].stderr[-300:]}")
    limit = {10_000: 0.5, 50_000: 1.0}.get(n)
    tgt = f"<= {limit * 1000:.0f} ms" if limit else ""
    for p in (50, 99):
        t = m.percentile(raw, p)
        met = t <= limit if limit and p == 50 else None
        what = f"ls round trip p{p} (raw socket, {len(raw)} req)"
        s.add(Figure(n, what, t, "s", target=tgt if p == 50 else "", met=met))
    t = m.median([r.seconds for r in cli])
    s.add(
        Figure(
            n,
            "ls --json via the CLI (served by the daemon)",
            t,
            "s",
            target=tgt,
            met=t <= limit if limit else None,
        )
    )
    t, doc = m.timed_rpc(d.sock, "show", {"agent": "claude", "id": _some_claude(d)})
    s.add(Figure(n, "show round trip (raw socket)", t, "s"))


def _some_claude(d: Daemon) -> str:
    return str(m.rpc(d.sock, "ls", {"agent": "claude"})[0]["id"])


def _daemon_events(s: Settings, d: Daemon, bh: homes.BenchHome, n: int) -> None:
    lat, missed = [], 0
    for sid, path in bh.claude_transcripts[: s.event_samples]:
        before = m.rpc(d.sock, "show", {"agent": "claude", "id": sid})["last_activity"]
        line = {"type": "user", "sessionId": sid, "message": {"role": "user", "content": "more"}}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
        started = time.perf_counter()
        while time.perf_counter() - started < 30:
            doc = m.rpc(d.sock, "show", {"agent": "claude", "id": sid})
            if doc["last_activity"] != before:
                lat.append(time.perf_counter() - started)
                break
            time.sleep(0.01)
        else:
            missed += 1
    if missed:
        s.problem(
            f"event-to-index at {n}: {missed} of {s.event_samples} appends not seen within 30 s"
        )
    if not lat:
        return
    p50, p99 = m.percentile(lat, 50), m.percentile(lat, 99)
    s.add(
        Figure(
            n,
            f"event-to-index p50 ({len(lat)} appends, show polled every 10 ms)",
            p50,
            "s",
            target="<= 1 s",
            met=p50 <= 1.0 and not missed,
        )
    )
    s.add(Figure(n, "event-to-index p99", p99, "s"))


def _daemon_idle(s: Settings, d: Daemon, n: int) -> None:
    assert d.proc is not None
    pid = d.proc.pid
    time.sleep(2)  # let the event bench's last refresh settle
    logged = len(d.log_text())
    before = m.cpu_seconds(pid)
    time.sleep(s.idle_seconds)
    used = (m.cpu_seconds(pid) - before) * 60 / s.idle_seconds
    # Whatever the daemon did in the window, it logged: an idle window
    # holds no line.
    worked = d.log_text()[logged:]
    if worked.strip():
        s.problem(f"daemon at {n} was not idle in the idle window: {worked[:300]}")
    note = "" if s.idle_seconds >= 60 else f"measured over {s.idle_seconds:.0f} s, scaled to 60 s"
    s.add(
        Figure(
            n,
            "daemon idle CPU per 60 s",
            used,
            "cpu-s",
            target="<= 0.02",
            met=used <= 0.02,
            note=note,
        )
    )
    mem = m.proc_status(pid)
    limit = {10_000: 100, 50_000: 150}.get(n)
    tgt = f"<= {limit} MB" if limit else ""
    for key, name in (
        ("VmHWM", "daemon peak RSS (VmHWM, warm-started, after all requests)"),
        ("VmRSS", "daemon steady RSS (VmRSS after idling)"),
    ):
        met = mem[key] <= limit if limit else None
        s.add(Figure(n, name, mem[key], "MB", target=tgt, met=met))


# -- report ------------------------------------------------------------------
def machine() -> dict[str, str]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()

    untracked = len(git("ls-files", "--others", "--exclude-standard", "src").splitlines())
    changed = len(git("diff", "--name-only", "HEAD", "--", "src").splitlines())
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "commit": f"{git('rev-parse', 'HEAD')} + working tree"
        f" ({changed} changed, {untracked} untracked files under src/)",
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


ABOUT = """\
Session mix: 70% Claude (full artifact set; a job dir every 10th session, a
stale registry file every 20th), 10% Codex (rollout, threads row, items,
index line, TUI ref), 8% opencode (1.x JSON storage), 4% each Gemini, grok
and zero; 85% idle 31-395 days, the rest active within the last 30 days.
Prune trees are Claude only, every session idle. Wall times are medians of
alternating runs; a ratio is agentkeep over its baseline measured alongside.
"""


def write_results(s: Settings, info: dict[str, str], elapsed: float) -> None:
    run = (
        f"sizes {','.join(map(str, s.sizes))}, prune sizes {','.join(map(str, s.prune_sizes))}"
        f"{' (--quick)' if s.quick else ''}; trees under {s.tmpdir}; {s.repeats} repeats, "
        f"{s.status_requests} status and {s.ls_requests} ls requests, "
        f"{s.event_samples} event samples, "
        f"idle {s.idle_seconds:.0f} s; took {elapsed:.0f} s"
    )
    lines = [
        "# agentkeep benchmark results",
        "",
        "Written by `bench/run.py`; do not edit by hand.",
        "",
        f"- date: {info['date']}",
        f"- commit: {info['commit']}",
        f"- machine: {info['cpu']}; {info['memory']} RAM; {info['kernel']}",
        f"- python: {info['python']}",
        f"- load average at start: {info['load']} (a shared machine: read the ratios)",
        f"- run: {run}",
        "",
        ABOUT,
        "| sessions | figure | agentkeep | baseline | ratio | target | result |",
        "|---:|---|---:|---|---:|---|---|",
    ]
    for f in s.figures:
        base = f"{f.baseline_name}: {_fmt(f.baseline, f.unit)}" if f.baseline is not None else ""
        ratio = f"{f.ratio:.2f}x" if f.ratio is not None else ""
        result = {True: "met", False: "**MISSED**", None: ""}[f.met]
        name = f"{f.name} ({f.note})" if f.note else f.name
        size = f"{f.size:,}" if f.size else "-"
        cells = [size, name, _fmt(f.value, f.unit), base, ratio, f.target, result]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _imports_section(s)
    missed = [f for f in s.figures if f.met is False]
    lines += ["", "## Targets missed", ""]
    lines += [
        f"- {f.size:,}: {f.name}: {_fmt(f.value, f.unit)} (target {f.target})" for f in missed
    ] or ["- none"]
    lines += ["", "## Problems seen", ""]
    lines += [f"- {p}" for p in s.problems] or ["- none"]
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")


def _imports_section(s: Settings) -> list[str]:
    if not s.imports:
        return []
    lines = [
        "",
        "## Start-up imports",
        "",
        "The ten modules of each command line with the largest cumulative import time",
        "(`python -X importtime -m agentkeep ...`, which slows imports a little;",
        "a module loaded by importlib.import_module, as the adapters are, is not",
        "listed itself, only what it imports).",
    ]
    for label, found in s.imports.items():
        lines += [
            "",
            f"`{label}`: {len(found.modules)} modules, {_fmt(found.total, 's')} importing",
            "",
            "| module | cumulative | own |",
            "|---|---:|---:|",
        ]
        lines += [
            f"| {i.name} | {_fmt(i.cumulative, 's')} | {_fmt(i.own, 's')} |" for i in found.top(10)
        ]
    return lines


# -- main --------------------------------------------------------------------
def settings(argv: list[str] | None = None) -> Settings:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--sizes", default=None, help="comma-separated session counts (default 1000,10000,50000)"
    )
    p.add_argument(
        "--prune-sizes",
        default=None,
        help="sizes to run the prune bench at (default: the sizes up to 10000)",
    )
    p.add_argument("--quick", action="store_true", help="1,000 sessions, fewer samples (< 2 min)")
    p.add_argument(
        "--tmpdir", default="/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    )
    p.add_argument(
        "--cold-deadline", type=float, default=None, help="give up on a cold daemon start after"
    )
    p.add_argument("--only", default=",".join(BENCHES), help=f"which benches ({','.join(BENCHES)})")
    p.add_argument(
        "--huge",
        action="store_true",
        help=f"add {HUGE:,} sessions to the sizes, once (needs a few GB of tmpfs)",
    )
    a = p.parse_args(argv)
    sizes = [int(x) for x in (a.sizes or ("1000" if a.quick else "1000,10000,50000")).split(",")]
    prune_sizes = (
        [int(x) for x in a.prune_sizes.split(",")]
        if a.prune_sizes
        else [x for x in sizes if x <= 10_000]
    )
    only = set(a.only.split(","))
    if only - set(BENCHES):
        p.error(f"--only: no bench {', '.join(sorted(only - set(BENCHES)))}")
    if a.huge:
        if problem := _no_room_for_huge(a.tmpdir):
            p.error(problem)
        sizes.append(HUGE)
        prune_sizes.append(HUGE)
    q = a.quick
    s = Settings(
        sizes=sizes,
        prune_sizes=prune_sizes if "prune" in only else [],
        quick=q,
        tmpdir=a.tmpdir,
        # Scan and ls wall times are medians of this many alternating runs.
        repeats=3 if q else 5,
        status_requests=50 if q else 200,
        ls_requests=5 if q else 20,
        event_samples=10 if q else 30,
        idle_seconds=10 if q else 60,
        restarts=2 if q else 3,
        cold_deadline=a.cold_deadline or (60 if q else 300),
        only=only,
        huge=a.huge,
    )
    return s


def _no_room_for_huge(tmpdir: str) -> str | None:
    """Why --huge cannot run in `tmpdir` (too little room on it, or too
    little memory when it is tmpfs), or None."""
    gib = 1024**3
    need = HUGE * HUGE_TMPFS_PER_SESSION
    free = shutil.disk_usage(tmpdir).free
    if free < need:
        return (
            f"--huge needs {need / gib:.1f} GiB free in {tmpdir}, which has {free / gib:.1f} GiB:"
            " free some, or give --tmpdir"
        )
    inodes, inodes_free = HUGE * HUGE_INODES_PER_SESSION, os.statvfs(tmpdir).f_favail
    if inodes_free < inodes:
        return (
            f"--huge needs {inodes:,} free inodes in {tmpdir}, which has {inodes_free:,}"
            f" (of {os.statvfs(tmpdir).f_files:,}): give --tmpdir, or remount it with a larger"
            " nr_inodes"
        )
    if _is_tmpfs(tmpdir):
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        available = int(fields["MemAvailable"].split()[0]) * 1024
        need = HUGE * HUGE_MEMORY_PER_SESSION
        if available < need:
            return (
                f"--huge needs {need / gib:.1f} GiB of memory available for {tmpdir} (tmpfs),"
                f" and {available / gib:.1f} GiB is"
            )
    return None


def _is_tmpfs(path: str) -> bool:
    """Whether the innermost mount holding `path` is a tmpfs (/proc/mounts)."""
    real = os.path.realpath(path)
    best, kind = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            _dev, mount, fstype, *_ = line.split()
            inside = real == mount or real.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) > len(best):
                best, kind = mount, fstype
    return kind == "tmpfs"


def main(argv: list[str] | None = None) -> int:
    s = settings(argv)
    only = s.only
    try:
        import agentkeep
    except ImportError:
        print(
            "run with the venv's python (.venv/bin/python): agentkeep is not importable",
            file=sys.stderr,
        )
        return 2
    # An installed package carries its bytecode; without it (an editable
    # install under PYTHONDONTWRITEBYTECODE) every child would compile
    # agentkeep afresh, a cost no installed agentkeep pays.
    compileall.compile_dir(Path(agentkeep.__file__).parent, quiet=1)
    info = machine()
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="akb-", dir=s.tmpdir))
    try:
        if "startup" in only:
            guarded(s, "start-up", bench_startup, s, scratch)
        for n in s.sizes:
            if only & {"scan", "daemon"}:
                t = time.perf_counter()
                bh = homes.make_home(scratch / f"home-{n}", n)
                print(f"built {n} sessions in {time.perf_counter() - t:.1f} s", flush=True)
                try:
                    if "scan" in only:
                        guarded(s, f"scan at {n}", bench_scan, s, bh, n)
                    if "daemon" in only:
                        guarded(s, f"daemon at {n}", bench_daemon, s, bh, n)
                finally:
                    bh.remove()
                if "daemon" in only:
                    guarded(s, f"daemon memory at {n}", bench_daemon_memory, s, n, scratch)
            if n in s.prune_sizes:
                guarded(s, f"prune at {n}", bench_prune, s, n)
            if n == 10_000 and n in s.prune_sizes:
                guarded(s, f"prune of a tenth of {n}", bench_prune_share, s, n)
            if n == 1000 and n in s.prune_sizes:
                guarded(s, f"prune into the trash at {n}", bench_prune_trash, s, n)
        prune_flatness(s)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for d in homes.RUNTIME_DIRS:  # the socket dirs of our fake users
            shutil.rmtree(d, ignore_errors=True)
        write_results(s, info, time.perf_counter() - started)
    return 1 if s.problems else 0


def guarded(s: Settings, what: str, bench: Callable[..., None], *args: Any) -> None:
    """One bench failing is a problem to report, not the end of the run."""
    try:
        bench(*args)
    except Exception as exc:
        s.problem(f"{what} failed: {type(exc).__name__}: {exc}")
        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
