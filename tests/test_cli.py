"""The read side of the CLI, run as a real subprocess: scan, ls, show, du,
status, pin, and their JSON shapes and exit codes (CONTRACT.md "Commands",
"JSON shapes").

One fake user with every kind of session (idle, live by command line, live
by registry file, held by a flock, pinned, a fork and its parent, zero
sessions, one undated) is built once for the read-only tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentkeep import leases
from agentkeep.agents import AGENTS
from agentkeep.model import parse_rfc3339, rfc3339
from agentkeep.processes import ProcessTable
from build_agents import make_zero_session, mtimes, zero_root
from build_claude import ClaudeSessionPaths, make_session, new_id, set_age, write_registry
from fakehome import FakeHome, cli_json, kill_group, make_fake_home
from test_daemon_serve import start_daemon, stop_daemons
from waiting import wait_until as wait_for

pytestmark = pytest.mark.slow

# Imported for its effect: every daemon a test here starts is killed after it.
__all__ = ["stop_daemons"]

RFC3339_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
SESSION_KEYS = {
    "agent",
    "id",
    "workspace",
    "parent",
    "last_activity",
    "bytes",
    "artifacts",
    "state",
}
SLEEP = "import time; time.sleep(120)"
ALPHA, BETA = "/home/u/alpha", "/home/u/beta"


def file_bytes(s: ClaudeSessionPaths) -> int:
    """st_size of the session's files, each inode once (Claude hard-links a
    kept command output into its tmp dir)."""
    sizes = {(st.st_dev, st.st_ino): st.st_size for st in map(os.lstat, s.files)}
    return sum(sizes.values())


def top_paths(s: ClaudeSessionPaths) -> set[str]:
    return {str(p) for paths in s.artifacts.values() for p in paths}


@dataclass
class World:
    fh: FakeHome
    big: ClaudeSessionPaths  # idle and old: the only reclaimable one
    parent: ClaudeSessionPaths  # old, the parent of a recent fork
    fork: ClaudeSessionPaths
    live: ClaudeSessionPaths  # a process names it
    by_registry: ClaudeSessionPaths  # a registry file names a live process
    held: ClaudeSessionPaths  # a flock on its lease
    pinned: ClaudeSessionPaths
    live_pid: int
    registry_pid: int
    registry_files: list[Path]
    lease: Path

    @property
    def claude(self) -> list[ClaudeSessionPaths]:
        return [
            self.big,
            self.parent,
            self.fork,
            self.live,
            self.by_registry,
            self.held,
            self.pinned,
        ]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    fh = make_fake_home(tmp_path_factory.mktemp("world"))
    fh.write_config('retention = "30d"\n')
    big = make_session(fh, cwd=ALPHA, age_days=40, pad=400_000)
    parent = make_session(fh, cwd=BETA, age_days=50)
    fork = make_session(fh, cwd=BETA, parent=parent.id, age_days=2)
    live = make_session(fh, cwd=BETA, age_days=60, full=False)
    by_registry = make_session(fh, cwd=BETA, age_days=55, full=False)
    held = make_session(fh, cwd=BETA, age_days=45, full=False)
    pinned = make_session(fh, cwd=ALPHA, age_days=35, full=False)
    zroot = zero_root(fh.data)
    make_zero_session(zroot, "z-recent", days=10)
    make_zero_session(zroot, "z-undated", metadata="{not json", days=40)
    lease = leases.lease_path(fh.state, "claude", held.id)
    lease.parent.mkdir(parents=True, mode=0o700)
    lease.touch()
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, env={**fh.environ, **env}, start_new_session=True)
        procs.append(proc)
        return proc

    try:
        naming = start([sys.executable, "-c", SLEEP, live.id])
        anonymous = start([sys.executable, "-c", SLEEP])
        # flock on a descriptor: the holder's command line names nothing.
        start(["sh", "-c", 'exec 9<"$LEASE"; flock -s 9 && exec sleep 120'], LEASE=str(lease))
        wait_for(lambda: bool(ProcessTable.snapshot().naming(live.id)), "the live process")
        wait_for(lambda: leases.is_held(lease), "the flock on the lease")
        reg, key = write_registry(fh, anonymous.pid, by_registry.id)
        set_age([reg, key], 55)
        assert fh.cli("scan").returncode == 0
        assert fh.cli("pin", "claude", pinned.id).returncode == 0
        yield World(
            fh,
            big,
            parent,
            fork,
            live,
            by_registry,
            held,
            pinned,
            naming.pid,
            anonymous.pid,
            [reg, key],
            lease,
        )
    finally:
        for proc in procs:
            kill_group(proc)
        subprocess.run(["rm", "-rf", fh.environ["XDG_RUNTIME_DIR"]], check=False)


@pytest.fixture(scope="module")
def rows(world: World) -> list[dict[str, Any]]:
    code, doc, err = cli_json(world.fh, "ls")
    assert code == 0, err
    return doc


# -- scan ----------------------------------------------------------------------


def test_scan_json_counts_sessions_artifacts_and_bytes(
    world: World, rows: list[dict[str, Any]]
) -> None:
    code, doc, err = cli_json(world.fh, "scan")

    assert code == 0, err
    assert set(doc) == {"sessions", "artifacts", "bytes", "seconds"}
    assert set(doc["sessions"]) <= set(AGENTS)
    assert {a: n for a, n in doc["sessions"].items() if n} == {"claude": 7, "zero": 2}
    assert doc["artifacts"] == sum(r["artifacts"] for r in rows)
    assert doc["bytes"] == sum(r["bytes"] for r in rows)
    assert isinstance(doc["seconds"], float) and doc["seconds"] >= 0


def test_scan_text_prints_counts_by_agent(world: World) -> None:
    proc = world.fh.cli("scan")

    assert proc.returncode == 0, proc.stderr
    assert re.search(r"claude\s+7\b", proc.stdout) and re.search(r"zero\s+2\b", proc.stdout)


# -- ls ------------------------------------------------------------------------


def test_ls_json_lists_every_session_oldest_first(world: World, rows: list[dict[str, Any]]) -> None:
    assert all(set(r) == SESSION_KEYS for r in rows)
    assert [r["id"] for r in rows[-1:]] == ["z-undated"], "undated sessions come last"
    assert rows[-1]["last_activity"] is None
    times = [parse_rfc3339(r["last_activity"]) for r in rows[:-1]]
    assert times == sorted(times)
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {s.id for s in world.claude} | {"z-recent", "z-undated"}
    for s in world.claude:
        extra = world.registry_files if s is world.by_registry else []
        r = by_id[s.id]
        assert (r["agent"], r["workspace"]) == ("claude", s.cwd)
        assert r["bytes"] == file_bytes(s) + sum(p.stat().st_size for p in extra)
        assert r["artifacts"] == len(top_paths(s)) + len(extra)
        assert RFC3339_Z.fullmatch(r["last_activity"])
    assert by_id[world.big.id]["last_activity"] == rfc3339(world.big.mtime)
    assert by_id[world.fork.id]["parent"] == world.parent.id
    assert by_id[world.parent.id]["parent"] is None


def test_ls_json_states(world: World, rows: list[dict[str, Any]]) -> None:
    states = {r["id"]: r["state"] for r in rows}

    assert states == {
        world.big.id: "idle",
        world.parent.id: "idle",
        world.fork.id: "idle",
        world.live.id: "live",
        world.by_registry.id: "live",
        world.held.id: "held",
        world.pinned.id: "pinned",
        "z-recent": "idle",
        "z-undated": "idle",
    }


def test_ls_agent_and_idle_over_filter(world: World, rows: list[dict[str, Any]]) -> None:
    code, zero, _ = cli_json(world.fh, "ls", "--agent", "zero")
    assert code == 0
    assert [r["id"] for r in zero] == ["z-recent", "z-undated"]

    code, idle, _ = cli_json(world.fh, "ls", "--idle-over", "30d")
    assert code == 0
    old = [world.live, world.by_registry, world.parent, world.held, world.big, world.pinned]
    assert [r["id"] for r in idle] == [s.id for s in old], "oldest first, undated never"
    assert idle == [r for r in rows if r["id"] in {s.id for s in old}]

    code, both, _ = cli_json(world.fh, "ls", "--agent", "claude", "--idle-over", "52d")
    assert code == 0
    assert [r["id"] for r in both] == [world.live.id, world.by_registry.id]


@pytest.mark.parametrize(
    "args",
    [("--agent", "nosuch"), ("--idle-over", "30x"), ("--idle-over", "-3d")],
    ids=["unknown-agent", "bad-age", "negative-age"],
)
def test_ls_refuses_bad_options_with_exit_2(world: World, args: tuple[str, ...]) -> None:
    proc = world.fh.cli("ls", *args, "--json")

    assert proc.returncode == 2
    assert proc.stdout.strip() == ""
    assert args[1] in proc.stderr


# -- show ----------------------------------------------------------------------


def show(world: World, s: ClaudeSessionPaths | str, agent: str = "claude") -> dict[str, Any]:
    code, doc, err = cli_json(world.fh, "show", agent, s if isinstance(s, str) else s.id)
    assert code == 0, err
    return doc


def test_show_json_artifacts_parent_and_children(world: World, rows: list[dict[str, Any]]) -> None:
    doc = show(world, world.parent)

    assert SESSION_KEYS | {"holders", "children"} <= set(doc)
    row = next(r for r in rows if r["id"] == world.parent.id)
    # `show` gives the artifacts themselves where `ls` gives their count.
    assert {k: doc[k] for k in SESSION_KEYS - {"artifacts"}} == {
        k: row[k] for k in SESSION_KEYS - {"artifacts"}
    }
    assert len(doc["artifacts"]) == row["artifacts"]
    assert all(set(a) >= {"path", "kind", "bytes"} for a in doc["artifacts"])
    assert {(a["kind"], a["path"]) for a in doc["artifacts"]} == world.parent.artifact_set()
    assert sum(a["bytes"] for a in doc["artifacts"]) == doc["bytes"]
    assert doc["children"] == [world.fork.id] and doc["parent"] is None
    assert doc["holders"] == []

    fork = show(world, world.fork)
    assert fork["parent"] == world.parent.id and fork["children"] == []


def test_show_json_holders(world: World) -> None:
    live = show(world, world.live)
    assert live["state"] == "live"
    assert {"pid": world.live_pid, "kind": "process"} in [
        {k: h[k] for k in ("pid", "kind")} for h in live["holders"]
    ]

    registry = show(world, world.by_registry)
    assert registry["state"] == "live"
    assert {"pid": world.registry_pid, "kind": "registry"} in [
        {k: h[k] for k in ("pid", "kind")} for h in registry["holders"]
    ]

    held = show(world, world.held)
    assert held["state"] == "held"
    assert [{k: h[k] for k in ("pid", "kind")} for h in held["holders"]] == [
        {"pid": None, "kind": "lease"}
    ]


def test_show_takes_an_id_in_either_case(world: World) -> None:
    assert show(world, world.big.id.upper())["id"] == world.big.id


@pytest.mark.parametrize(
    ("agent", "sid", "code"),
    [
        ("claude", "00000000-0000-4000-8000-000000000000", 5),  # well formed, no such session
        ("claude", "not-a-session-id", 5),
        ("claude", "../../etc/passwd", 5),
        ("zero", "no-such-zero-session", 5),
        ("nosuch", "00000000-0000-4000-8000-000000000000", 2),
    ],
    ids=["unknown", "malformed", "path", "zero-unknown", "unknown-agent"],
)
def test_show_of_no_such_session(world: World, agent: str, sid: str, code: int) -> None:
    proc = world.fh.cli("show", agent, sid, "--json")

    assert proc.returncode == code
    assert proc.stdout.strip() == ""
    assert proc.stderr.strip()


# -- du ------------------------------------------------------------------------


def test_du_json_by_agent_largest_first_with_reclaimable_bytes(
    world: World, rows: list[dict[str, Any]]
) -> None:
    code, doc, err = cli_json(world.fh, "du")
    assert code == 0, err
    code, explicit, _ = cli_json(world.fh, "du", "--by", "agent")
    assert explicit == doc

    assert set(doc) == {"by", "groups"} and doc["by"] == "agent"
    keys = {"key", "bytes", "disk_bytes", "sessions", "reclaimable_bytes", "reclaimable_disk_bytes"}
    assert all(set(g) == keys for g in doc["groups"])
    assert [g["bytes"] for g in doc["groups"]] == sorted(
        (g["bytes"] for g in doc["groups"]), reverse=True
    )
    groups = {g["key"]: g for g in doc["groups"]}
    assert set(groups) == {"claude", "zero"}
    claude = [r for r in rows if r["agent"] == "claude"]
    big = next(r for r in rows if r["id"] == world.big.id)
    # Disk use (allocated blocks) beside the apparent size: test_terminal.py
    # checks it against du(1).
    disk = groups["claude"].pop("disk_bytes"), groups["claude"].pop("reclaimable_disk_bytes")
    assert disk[0] > 0 and 0 < disk[1] < disk[0]
    assert groups["claude"] == {
        "key": "claude",
        "bytes": sum(r["bytes"] for r in claude),
        "sessions": 7,
        # live, held, pinned and the fork's parent stay: only the idle one goes.
        "reclaimable_bytes": big["bytes"],
    }
    assert groups["zero"]["sessions"] == 2 and groups["zero"]["reclaimable_bytes"] == 0


def test_du_json_by_workspace(world: World, rows: list[dict[str, Any]]) -> None:
    code, doc, err = cli_json(world.fh, "du", "--by", "workspace")

    assert code == 0, err
    assert doc["by"] == "workspace"
    assert [g["bytes"] for g in doc["groups"]] == sorted(
        (g["bytes"] for g in doc["groups"]), reverse=True
    )
    groups = {g["key"]: g for g in doc["groups"]}
    for workspace in (ALPHA, BETA):
        mine = [r for r in rows if r["workspace"] == workspace]
        assert groups[workspace]["bytes"] == sum(r["bytes"] for r in mine)
        assert groups[workspace]["sessions"] == len(mine)
    assert groups[ALPHA]["reclaimable_bytes"] == next(
        r["bytes"] for r in rows if r["id"] == world.big.id
    )
    assert groups[BETA]["reclaimable_bytes"] == 0
    assert sum(g["sessions"] for g in doc["groups"]) == len(rows)


def test_du_refuses_an_unknown_grouping(world: World) -> None:
    assert world.fh.cli("du", "--by", "colour").returncode == 2


# -- status --------------------------------------------------------------------


def test_status_without_a_daemon_prints_pid_null_and_exits_1(world: World) -> None:
    code, doc, _ = cli_json(world.fh, "status")

    assert code == 1
    assert set(doc) == {
        "pid",
        "version",
        "uptime_s",
        "sessions",
        "watch",
        "config",
        "last_prune",
        "next_prune",
        "paused",
        "compaction_waiting",
    }
    assert doc["pid"] is None
    assert doc["sessions"] == 9
    assert doc["config"] == {"ok": True, "error": None, "retention": "30d"}
    assert doc["paused"] is None

    text = world.fh.cli("status")
    assert text.returncode == 1
    assert "not running" in text.stdout


def test_status_shows_a_config_error(fake_home: FakeHome) -> None:
    fake_home.write_config('retention = "30x"\n')

    code, doc, _ = cli_json(fake_home, "status")

    # Shown, and exit 2: a bad config is what to fix first.
    assert code == 2 and doc["pid"] is None
    assert doc["config"]["ok"] is False and doc["config"]["retention"] is None
    assert "retention" in doc["config"]["error"] and "30x" in doc["config"]["error"]


# -- text for a person ---------------------------------------------------------


def test_ls_and_du_text_have_human_sizes_and_ages(world: World) -> None:
    wide = FakeHome(world.fh.root, world.fh.home, {**world.fh.environ, "COLUMNS": "200"})
    ls, du = wide.cli("ls"), wide.cli("du")

    assert ls.returncode == 0 and du.returncode == 0
    assert "MB" in ls.stdout and "kB" in ls.stdout
    assert re.search(r"\b40d\b", ls.stdout) and re.search(r"\b2d\b", ls.stdout)
    assert world.big.id in ls.stdout
    assert "MB" in du.stdout and "claude" in du.stdout
    assert "{" not in ls.stdout + du.stdout, "text, not JSON"


def test_piped_ls_keeps_each_session_on_one_line(fake_home: FakeHome) -> None:
    """Text sent to a pipe (grep, cut) is not folded to a terminal's width."""
    deep = "/home/user/" + "/".join(f"a-rather-long-folder-name-{n}" for n in range(6))
    sessions = [make_session(fake_home, cwd=deep, age_days=40 + n, full=False) for n in range(3)]
    environ = {k: v for k, v in fake_home.environ.items() if k != "COLUMNS"}

    ls = fake_home.cli("ls", env=environ)

    assert ls.returncode == 0, ls.stderr
    lines = ls.stdout.splitlines()
    assert len([line for line in lines if "folder-name" in line]) == len(sessions), ls.stdout
    for s in sessions:
        (line,) = [line for line in lines if s.id in line]
        assert deep in line


# -- pin, and reading changes nothing ----------------------------------------


def test_pin_and_unpin(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=40, full=False)
    assert fake_home.cli("scan").returncode == 0

    code, doc, err = cli_json(fake_home, "pin", "claude", s.id.upper())
    assert code == 0, err
    assert doc == {"agent": "claude", "id": s.id, "pinned": True}
    assert [r["state"] for r in cli_json(fake_home, "ls")[1]] == ["pinned"]

    code, doc, err = cli_json(fake_home, "unpin", "claude", s.id)
    assert code == 0, err
    assert doc == {"agent": "claude", "id": s.id, "pinned": False}
    assert [r["state"] for r in cli_json(fake_home, "ls")[1]] == ["idle"]

    assert fake_home.cli("pin", "claude", new_id()).returncode == 5
    assert fake_home.cli("pin", "claude", "nope").returncode == 5


def test_show_finds_a_session_the_index_has_not_seen_yet(fake_home: FakeHome) -> None:
    assert fake_home.cli("scan").returncode == 0
    s = make_session(fake_home, age_days=3)

    code, doc, err = cli_json(fake_home, "show", "claude", s.id)

    assert code == 0, err
    assert doc["id"] == s.id and doc["workspace"] == s.cwd


def test_reading_commands_change_no_timestamp(fake_home: FakeHome) -> None:
    s = make_session(fake_home, age_days=40)
    make_zero_session(zero_root(fake_home.data), "z1", days=40)
    roots = [fake_home.claude, fake_home.root / "tmp", zero_root(fake_home.data)]
    before = {r: mtimes(r) for r in roots}

    for args in (("scan",), ("ls",), ("show", "claude", s.id), ("du",), ("status",)):
        proc = fake_home.cli(*args, "--json")
        assert proc.returncode in (0, 1), proc.stderr

    assert {r: mtimes(r) for r in roots} == before


# -- start-up ------------------------------------------------------------------

# What only in-process work or text output needs: a command the daemon
# answers, and --version or --help, import none of it. (A blocked import
# is listed too: `rich` alone is structlog's attempt, refused by logs.py.)
HEAVY = {"agentkeep.core", "agentkeep.index", "agentkeep.prune", "rich.console"}


def started(
    fh: FakeHome,
    *args: str,
    entry: tuple[str, ...] = ("-m", "agentkeep"),
    env: dict[str, str] | None = None,
    codes: tuple[int, ...] = (0,),
) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """Run `python -X importtime <entry> <args>`: the modules it imported
    (those an import statement loaded), and the finished process."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *entry, *args],
        env=fh.environ if env is None else env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode in codes, proc.stderr[-2000:]
    lines = [line.split("|")[-1].strip() for line in proc.stderr.splitlines()]
    return {name for name in lines if name}, proc


def imported(fh: FakeHome, *args: str) -> set[str]:
    return started(fh, *args)[0]


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("ls", "--help")])
def test_version_and_help_import_nothing_heavy(fake_home: FakeHome, args: tuple[str, ...]) -> None:
    names = imported(fake_home, *args)

    assert "agentkeep" in names, "SETUP INVALID: -X importtime printed no imports"
    assert not {n for n in names if n.split(".")[0] == "structlog" or n in HEAVY}
    assert not {n for n in names if n.startswith("rich.")}


def test_ls_json_answered_by_the_daemon_imports_no_core(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40)
    daemon = start_daemon(fake_home)
    local = fake_home.cli("ls", "--json", env={**fake_home.environ, "AGENTKEEP_SOCKET": "/nx"})

    names = imported(fake_home, "ls", "--json")
    served = fake_home.cli("ls", "--json", check=True)

    assert daemon.call("status")["sessions"] == 1
    assert "agentkeep.client" in names, "SETUP INVALID: the daemon was not asked"
    assert not names & HEAVY
    assert served.stdout == local.stdout
    assert served.stdout == json.dumps(json.loads(served.stdout), indent=2) + "\n"


def test_resolving_the_view_imports_no_adapter(fake_home: FakeHome) -> None:
    """The fingerprint a command sends the daemon comes from the agents'
    roots (agents.roots) alone: no adapter's listing or removal code loads."""
    code = (
        "import json, sys\n"
        "from agentkeep import view\n"
        "from agentkeep.paths import Env\n"
        "roots = view.resolve(Env.from_environ())['roots']\n"
        "print(json.dumps([sorted(roots), sorted(sys.modules)]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=fake_home.environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    agents, names = json.loads(proc.stdout)

    assert agents == sorted(AGENTS), "SETUP INVALID: the view does not enable every agent"
    assert not loaded(set(names), "agentkeep.adapters")


def test_the_view_resolved_names_the_roots_its_adapters_give(fake_home: FakeHome) -> None:
    """What view.resolve() works out without the adapters is what the
    daemon's own adapters give (Context.fingerprint): else it never answers."""
    from agentkeep import adapters, view
    from agentkeep.paths import Env

    store = fake_home.root / "store"
    store.mkdir()
    fake_home.write_config(
        'enabled = ["claude", "qwen", "pi"]\n'
        f'[[stores]]\nname = "runs"\nroot = "{store}"\ndepth = 1\n'
    )
    env = Env.from_environ(
        {**fake_home.environ, "QWEN_RUNTIME_DIR": str(fake_home.root / "qwen-run")}
    )
    config, error = view.load(env, env.state_dir)
    built = view.fingerprint(env, env.state_dir, adapters.build(env, config))

    assert error is None, error
    assert sorted(built["roots"]) == ["claude", "pi", "qwen", "runs"]
    assert len(built["roots"]["qwen"]) == 2, "SETUP INVALID: one qwen root"
    assert view.resolve(env) == built


# Imported, before they were deferred or moved, by commands that never use
# them: asyncio (structlog imports it for async loggers agentkeep never
# uses; logs._import_structlog defers it) and the daemon's own machinery
# (runner.Runner.ask read the method table from agentkeep.daemon.main).
UNUSED = ("asyncio", "agentkeep.daemon", "apscheduler", "watchdog")


def loaded(names: set[str], *packages: str) -> set[str]:
    """Those of `names` that are one of `packages` or in one."""
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in packages)}


def test_version_alone_is_answered_before_click(fake_home: FakeHome) -> None:
    names, fast = started(fake_home, "--version")
    by_click = fake_home.cli("-q", "--version", check=True)

    assert "agentkeep" in names, "SETUP INVALID: -X importtime printed no imports"
    assert fast.stdout == by_click.stdout == "agentkeep, version 0.1.0\n"
    assert not loaded(names, "click", "structlog", *UNUSED)


def test_the_console_script_answers_version_before_click(fake_home: FakeHome) -> None:
    """What the installed `agentkeep` runs: its entry point, called as pip's
    script calls it."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="agentkeep")
    code = (
        f"import sys\nfrom {script.module} import {script.attr}\n"
        f"sys.argv[0] = 'agentkeep'\nsys.exit({script.attr}())"
    )

    names, fast = started(fake_home, "--version", entry=("-c", code))
    usage = started(fake_home, "--help", entry=("-c", code))[1]

    assert fast.stdout == "agentkeep, version 0.1.0\n"
    assert not loaded(names, "click", "structlog", *UNUSED)
    assert usage.stdout.startswith("Usage: agentkeep [OPTIONS] COMMAND [ARGS]...")


def test_a_completion_asking_with_version_is_answered_by_click(fake_home: FakeHome) -> None:
    env = {**fake_home.environ, "_AGENTKEEP_COMPLETE": "bash_source"}

    names, proc = started(fake_home, "--version", env=env)

    assert "_agentkeep_completion()" in proc.stdout
    assert "version" not in proc.stdout
    assert "click" in names


@pytest.mark.parametrize(
    "args", [("scan", "--json"), ("ls", "--json"), ("ls",), ("status", "--json")]
)
def test_in_process_commands_import_nothing_of_the_daemon(
    fake_home: FakeHome, args: tuple[str, ...]
) -> None:
    make_session(fake_home, age_days=40)

    names, _ = started(fake_home, *args, codes=(1,) if args[0] == "status" else (0,))

    assert "agentkeep.core" in names, "SETUP INVALID: not answered in-process"
    assert not loaded(names, *UNUSED)


# What each command answered in-process never calls: the prune's act (its
# leases, journal and removal). Each caller imports a name from the module
# that defines it, never a package that imports them all; a scan does not
# even plan.
NOT_ACTING = (
    "agentkeep.prune.act",
    "agentkeep.prune.run",
    "agentkeep.journal",
    "agentkeep.removal",
    "agentkeep.rmtree",
    "agentkeep.core.pruning",
)


@pytest.mark.parametrize(
    ("args", "answered_by", "unused"),
    [
        (("scan", "--json"), "agentkeep.core.indexing", (*NOT_ACTING, "agentkeep.prune")),
        (("ls", "--json"), "agentkeep.core.sessions", NOT_ACTING),
        (("du", "--json"), "agentkeep.core.reclaim", NOT_ACTING),
        (("status", "--json"), "agentkeep.core.status", NOT_ACTING),
    ],
)
def test_in_process_commands_import_no_prune_they_do_not_run(
    fake_home: FakeHome, args: tuple[str, ...], answered_by: str, unused: tuple[str, ...]
) -> None:
    make_session(fake_home, age_days=40)

    names = modules_at_exit(fake_home, *args, codes=(1,) if args[0] == "status" else (0,))

    assert answered_by in names, "SETUP INVALID: not answered in-process"
    assert not loaded(names, *unused)


def modules_at_exit(fh: FakeHome, *args: str, codes: tuple[int, ...] = (0,)) -> set[str]:
    """Every module `agentkeep <args>` had loaded when it exited, however it
    was imported (-X importtime misses those importlib.import_module loads)."""
    listing = fh.root / "modules.txt"
    code = (
        "import atexit, runpy, sys\n"
        f"atexit.register(lambda: open({str(listing)!r}, 'w').write('\\n'.join(sys.modules)))\n"
        "sys.argv[0] = 'agentkeep'\n"
        "runpy.run_module('agentkeep', run_name='__main__')\n"
    )
    started(fh, *args, entry=("-c", code), codes=codes)
    return set(listing.read_text().split())


@pytest.mark.parametrize("args", [("scan", "--json"), ("ls", "--json"), ("status", "--json")])
def test_commands_the_daemon_answers_import_neither_core_nor_asyncio(
    fake_home: FakeHome, args: tuple[str, ...]
) -> None:
    make_session(fake_home, age_days=40)
    daemon = start_daemon(fake_home)

    names, _ = started(fake_home, *args)

    assert daemon.call("status")["sessions"] == 1
    assert "agentkeep.client" in names, "SETUP INVALID: the daemon was not asked"
    assert not names & HEAVY
    assert not loaded(names, *UNUSED)


def test_json_output_is_json_dumps_indent_2_however_long(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """emit_json() writes its parts in chunks: what reaches stdout is still
    exactly the document, indented, and a line break."""
    from agentkeep.runner import _CHUNK, emit_json

    doc = {"removed": [{"id": f"s{n}", "paths": [f"/h/{n}/\u2603\n"] * 3} for n in range(3000)]}
    text = json.dumps(doc, indent=2)
    assert len(text) > 3 * _CHUNK, "SETUP INVALID: the document fits in one chunk"
    emit_json(doc)
    assert capsys.readouterr().out == text + "\n"
