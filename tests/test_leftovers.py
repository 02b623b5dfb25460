"""Runtime leftovers (invariant 13): the Bun runtime library a Claude Code or
opencode process leaves in a tmp dir is removed by a prune once no process
maps it and it is older than an hour, and nothing else ever is.

Each test lays real files in the fake user's tmp dirs and runs the real
CLI. The processes that map a leftover are real: one loads a real shared
library copied to a leftover's name (ctypes.CDLL, as Bun does), one maps a
file with mmap and closes it (a mapping with no descriptor left).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

from agentkeep import leftovers
from fakehome import FakeHome, Spawn, cli_json

HOUR = 3600.0
# A process that maps argv[1] as Bun does (dlopen), says so and waits.
LOADS = (
    "import ctypes, sys, time; ctypes.CDLL(sys.argv[1]);"
    " print('mapped', flush=True); time.sleep(600)"
)
# A process that maps argv[1], closes its descriptor, says so and waits.
MAPS = (
    "import mmap, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY);"
    " m = mmap.mmap(fd, 0, prot=mmap.PROT_READ); os.close(fd);"
    " print('mapped', flush=True); time.sleep(600)"
)
CONFIG = 'retention = "30d"\n'


def bun_name(n: int) -> str:
    return f".{n:016x}-00000000.so"


def leftover(directory: Path, name: str, *, age: float = 2 * HOUR, size: int = 64 << 10) -> Path:
    path = directory / name
    path.write_bytes(os.urandom(size))
    when = time.time() - age
    os.utime(path, (when, when))
    return path


def real_library() -> Path:
    """A real shared library: this Python's own ctypes module."""
    spec = importlib.util.find_spec("_ctypes")
    if spec is None or not (spec.origin or "").endswith(".so"):
        pytest.fail("SETUP INVALID: this Python has no _ctypes library to load")
    return Path(str(spec.origin))


def state(paths: list[Path]) -> dict[Path, tuple[bytes, float] | str]:
    """Each path's content and mtime (a link: where it points)."""
    out: dict[Path, tuple[bytes, float] | str] = {}
    for p in paths:
        out[p] = os.readlink(p) if p.is_symlink() else (p.read_bytes(), p.stat().st_mtime)
    return out


def mapped_by(pid: int, path: Path) -> bool:
    return str(path) in Path(f"/proc/{pid}/maps").read_text()


def test_a_prune_removes_the_leftovers_no_process_uses_and_nothing_else(
    fake_home: FakeHome, spawn: Spawn
) -> None:
    tmp, systmp = Path(fake_home.environ["TMPDIR"]), fake_home.system_tmp
    garbage = [leftover(tmp, bun_name(1)), leftover(systmp, bun_name(2), age=30 * 86400)]
    loaded = tmp / bun_name(3)
    loaded.write_bytes(real_library().read_bytes())
    os.utime(loaded, (time.time() - 2 * HOUR,) * 2)
    mmapped = leftover(tmp, bun_name(4))
    loader = spawn([sys.executable, "-c", LOADS, str(loaded)], ready=True)
    mapper = spawn([sys.executable, "-c", MAPS, str(mmapped)], ready=True)
    if not (mapped_by(loader.pid, loaded) and mapped_by(mapper.pid, mmapped)):
        pytest.fail("SETUP INVALID: the leftovers are not mapped")
    young = leftover(tmp, bun_name(5), age=HOUR - 120)
    target = leftover(fake_home.home, "elsewhere.so")
    link = tmp / bun_name(6)
    link.symlink_to(target)
    twice = leftover(tmp, bun_name(7))
    os.link(twice, tmp / "a-second-name")
    others = [
        leftover(tmp, ".0123456789ABCDEF-00000000.so"),  # not Bun's lowercase hex
        leftover(tmp, ".0123456789abcdef-00000001.so"),
        leftover(tmp, ".0123456789abcde-00000000.so"),
        leftover(tmp, "x.0123456789abcdef-00000000.so"),
        leftover(tmp, "0123456789abcdef-00000000.so"),
    ]
    (tmp / bun_name(8)).mkdir()
    stays = [loaded, mmapped, young, link, target, twice, tmp / "a-second-name", *others]
    before = state(stays)
    fake_home.write_config(CONFIG)

    code, dry, _ = cli_json(fake_home, "prune", "--dry-run")
    assert code == 0
    assert sorted((d["path"], d["bytes"], d["kind"]) for d in dry["leftovers"]) == sorted(
        (str(p), 64 << 10, "bun-runtime") for p in garbage
    )
    assert all(p.exists() for p in garbage), "a dry run removed a leftover"

    code, doc, err = cli_json(fake_home, "prune")
    assert code == 0, err
    assert sorted((d["path"], d["bytes"], d["kind"]) for d in doc["leftovers"]) == sorted(
        (str(p), 64 << 10, "bun-runtime") for p in garbage
    )
    assert not any(p.exists() for p in garbage)
    assert state(stays) == before, "something that was not garbage changed"
    assert (tmp / bun_name(8)).is_dir()

    # Once the processes are gone, what they mapped is garbage too.
    for proc in (loader, mapper):
        proc.kill()
        proc.wait(10)
    code, doc, err = cli_json(fake_home, "prune")
    assert code == 0, err
    assert sorted(d["path"] for d in doc["leftovers"]) == sorted(map(str, [loaded, mmapped]))
    assert not loaded.exists() and not mmapped.exists()
    assert young.exists() and link.is_symlink() and target.exists() and twice.exists()


def test_du_counts_the_leftovers_and_what_a_prune_would_take(
    fake_home: FakeHome, spawn: Spawn
) -> None:
    tmp = Path(fake_home.environ["TMPDIR"])
    old = leftover(tmp, bun_name(1), size=1 << 20)
    young = leftover(tmp, bun_name(2), age=60, size=1 << 20)
    mapped = leftover(tmp, bun_name(3), size=1 << 20)
    spawn([sys.executable, "-c", MAPS, str(mapped)], ready=True)
    leftover(tmp, "not-a-leftover.so", size=1 << 20)
    fake_home.write_config(CONFIG)

    code, doc, _ = cli_json(fake_home, "du", "--by", "kind")
    assert code == 0
    [group] = [g for g in doc["groups"] if g["key"] == "runtime-leftovers"]
    allocated = sum(p.stat().st_blocks * 512 for p in (old, young, mapped))
    assert group["bytes"] == 3 << 20 and group["disk_bytes"] == allocated
    assert group["reclaimable_bytes"] == 1 << 20
    assert group["reclaimable_disk_bytes"] == old.stat().st_blocks * 512
    assert group["sessions"] == 0


def test_a_purge_and_a_prune_of_other_agents_leave_the_leftovers(fake_home: FakeHome) -> None:
    from build_claude import make_session

    tmp = Path(fake_home.environ["TMPDIR"])
    old = leftover(tmp, bun_name(1))
    fake_home.write_config(CONFIG)
    s = make_session(fake_home, age_days=40)

    code, doc, err = cli_json(fake_home, "purge", "claude", s.id)
    assert code == 0, err
    assert doc["leftovers"] == [] and old.exists()
    code, doc, err = cli_json(fake_home, "prune", "--agent", "codex")
    assert code == 0, err
    assert doc["leftovers"] == [] and old.exists()
    code, doc, err = cli_json(fake_home, "prune", "--agent", "opencode")
    assert code == 0, err
    assert [d["path"] for d in doc["leftovers"]] == [str(old)] and not old.exists()


def test_a_tmp_dir_others_can_write_to_without_the_sticky_bit_is_not_looked_in(
    fake_home: FakeHome,
) -> None:
    systmp = fake_home.system_tmp
    old = leftover(systmp, bun_name(1))
    os.chmod(systmp, 0o777)
    fake_home.write_config(CONFIG)
    code, doc, err = cli_json(fake_home, "prune")
    assert code == 0, err
    assert doc["leftovers"] == [] and old.exists()
    os.chmod(systmp, 0o1777)  # as /tmp is
    code, doc, err = cli_json(fake_home, "prune")
    assert code == 0, err
    assert [d["path"] for d in doc["leftovers"]] == [str(old)] and not old.exists()


# -- the pure decision ------------------------------------------------------------


def found(tmp_path: Path, name: str, age: float = 2 * HOUR) -> leftovers.Found:
    path = leftover(tmp_path, name, age=age)
    kind = next(k for k in leftovers.KINDS if k.pattern.fullmatch(name))
    return leftovers.Found(str(tmp_path), name, kind, os.lstat(path))


def test_the_decision_keeps_a_young_a_mapped_and_a_named_file(tmp_path: Path) -> None:
    old, young = found(tmp_path, bun_name(1)), found(tmp_path, bun_name(2), age=HOUR - 1)
    mapped, named = found(tmp_path, bun_name(3)), found(tmp_path, "pi-bash-0123456789abcdef.log")
    free_log = found(tmp_path, "pi-bash-fedcba9876543210.log")
    now = time.time()
    kept = {
        f.name: leftovers.why_kept(
            f, uid=os.getuid(), now=now, mapped={mapped.path: 42}, named={named.path}
        )
        for f in (old, young, mapped, named, free_log)
    }
    assert kept == {
        old.name: None,
        young.name: "written within the last hour",
        mapped.name: "mapped by pid 42",
        named.name: "a session names it",
        free_log.name: None,
    }
    assert leftovers.why_kept(old, uid=os.getuid() + 1, now=now, mapped={}, named=set()) == (
        f"belongs to uid {os.getuid()}"
    )


def test_a_kind_named_by_sessions_stays_unless_its_agent_says_otherwise(tmp_path: Path) -> None:
    log = found(tmp_path, "pi-bash-0123456789abcdef.log")
    # No adapter for the agent (not enabled): every file counts as named.
    assert leftovers.named_paths([log], leftovers.asking({})) == {log.path}
    assert leftovers.kinds_for(["claude"]) == [leftovers.KINDS[0]]
    assert leftovers.kinds_for(["pi"]) == [leftovers.KINDS[1]]


def test_the_maps_of_every_process_are_read(tmp_path: Path, spawn: Spawn) -> None:
    path = leftover(tmp_path, bun_name(1))
    f = leftovers.Found(str(tmp_path), path.name, leftovers.KINDS[0], os.lstat(path))
    assert leftovers.mapped([f]) == {}
    proc = spawn([sys.executable, "-c", MAPS, str(path)], ready=True)
    assert leftovers.mapped([f]) == {f.path: proc.pid}
    path.unlink()  # a mapped file unlinked shows as "(deleted)"; its inode still names it
    assert leftovers.mapped([f]) == {f.path: proc.pid}
