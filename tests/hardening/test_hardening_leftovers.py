"""Runtime leftovers and other users (invariant 13).

A file of a leftover's name that another user owns is never touched, even in
a shared tmp dir; a leftover of ours that another user's process maps stays
while it does (every process's maps are read, not only the user's). And
where the user cannot read a process's maps at all, as an ordinary user
cannot read root's, the lease keeps what that process maps: agentkeep runs
here as a second real uid (setpriv), with a root process mapping one of its
leftovers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hardening_util import Processes, cli_argv, discard_home, fast_root, processes

from fakehome import FakeHome, make_fake_home
from waiting import wait_until

__all__ = ["processes"]

OTHER = 54321
HOUR = 3600.0
MAPS = (
    "import mmap, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY);"
    " m = mmap.mmap(fd, 0, prot=mmap.PROT_READ); os.close(fd);"
    " open(sys.argv[2], 'w').close(); time.sleep(600)"
)

pytestmark = pytest.mark.timeout(180)


def setpriv(*argv: str) -> list[str]:
    return ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", "--", *argv]


@pytest.fixture
def walkable(tmp_path: Path) -> Iterator[FakeHome]:
    """A fake user on a path the other user can walk, its system tmp dir
    shared like /tmp (sticky, world-writable)."""
    if os.geteuid() != 0:
        pytest.skip("a second real user needs root here (setpriv --reuid)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is missing")
    root = fast_root(tmp_path)
    os.chmod(root, 0o755)
    fh = make_fake_home(root)
    os.chmod(fh.system_tmp, 0o1777)
    fh.write_config('retention = "30d"\n')
    yield fh
    discard_home(fh)


def aged(path: Path, data: bytes = b"\0" * 65536) -> Path:
    path.write_bytes(data)
    when = time.time() - 2 * HOUR
    os.utime(path, (when, when))
    return path


def prune(fh: FakeHome, *, as_other: bool = False) -> list[str]:
    argv = cli_argv("", "prune", "--json")
    proc = subprocess.run(
        setpriv(*argv) if as_other else argv,
        env=fh.environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return sorted(d["path"] for d in json.loads(proc.stdout)["leftovers"])


def map_file(procs: Processes, fh: FakeHome, path: Path, *, as_other: bool) -> int:
    """A process (the other user's, or root's) mapping `path`; its pid."""
    ready = fh.system_tmp / f"mapped{path.name}"
    argv = [sys.executable, "-c", MAPS, str(path), str(ready)]
    proc = procs.start(setpriv(*argv) if as_other else argv, fh.environ)
    wait_until(ready.exists, f"a process mapping {path}")
    pid = proc.pid
    if as_other:  # setpriv execs the mapper in place
        wait_until(lambda: str(path) in Path(f"/proc/{pid}/maps").read_text(), "the mapping")
    return pid


def test_another_users_file_and_what_another_users_process_maps_stay(
    walkable: FakeHome, processes: Processes
) -> None:
    systmp = walkable.system_tmp
    theirs = systmp / ".00000000000000aa-00000000.so"
    subprocess.run(
        setpriv(
            "sh", "-c", f"head -c 65536 /dev/zero > '{theirs}'; touch -d '-2 hours' '{theirs}'"
        ),
        check=True,
        timeout=30,
    )
    if os.stat(theirs).st_uid != OTHER:
        pytest.fail("SETUP INVALID: the file is not the other user's")
    ours_mapped = aged(systmp / ".00000000000000bb-00000000.so")
    os.chmod(ours_mapped, 0o644)
    map_file(processes, walkable, ours_mapped, as_other=True)
    ours = aged(systmp / ".00000000000000cc-00000000.so")

    assert prune(walkable) == [str(ours)]
    assert theirs.exists() and os.stat(theirs).st_uid == OTHER
    assert ours_mapped.exists()


def test_a_process_whose_maps_the_user_cannot_read_keeps_what_it_maps(
    walkable: FakeHome, processes: Processes
) -> None:
    """agentkeep as the other user; root maps one of its leftovers."""
    for path in [
        walkable.root,
        *walkable.root.rglob("*"),
        Path(walkable.environ["XDG_RUNTIME_DIR"]),
    ]:
        os.lchown(path, OTHER, OTHER)
    tmp = Path(walkable.environ["TMPDIR"])
    held = aged(tmp / ".00000000000000dd-00000000.so")
    free = aged(tmp / ".00000000000000ee-00000000.so")
    for path in (held, free):
        os.lchown(path, OTHER, OTHER)
    pid = map_file(processes, walkable, held, as_other=False)
    unreadable = subprocess.run(
        setpriv("cat", f"/proc/{pid}/maps"), capture_output=True, timeout=30
    )
    if unreadable.returncode == 0:
        pytest.fail("SETUP INVALID: the other user can read root's maps")

    assert prune(walkable, as_other=True) == [str(free)]
    assert held.exists() and not free.exists()
