"""A real `systemd --user` for the fake user, fenced off from the machine.

The manager runs with the fake user's environment (its units come from the
fake `$XDG_CONFIG_HOME/systemd/user`, its private socket is the fake
`$XDG_RUNTIME_DIR/systemd/private`, which `systemctl --user` outside finds
on its own), in a mount namespace of its own with

- a tmpfs on /run/systemd holding /run/systemd/system, which is how
  systemd tells it was booted with systemd (it refuses to start otherwise);
- a cgroup namespace rooted at a fresh, empty child of this process's
  cgroup2 cgroup, and cgroup2 mounted over /sys/fs/cgroup, so the manager
  sees that child as the whole hierarchy and the machine's v1 hierarchies
  not at all.

Why the fence matters: a user manager that finds itself at the root of a
hierarchy moves *every* process in that root into its own `init.scope`.
`start.sh` therefore checks, before it executes systemd, that /sys/fs/cgroup
is the private cgroup2 mount and that the only processes in its root are
its own; otherwise it exits and the manager never runs.

Needs Linux, systemd, unshare(1), and the right to mount and to create a
cgroup (root, as on the test machine). `start` skips the test with the
precise reason when any of it is missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakehome import FakeHome

SYSTEMD = Path("/usr/lib/systemd/systemd")

_START = r"""#!/bin/sh
# Inside `unshare -m -C`: this process's cgroup is the namespace's root.
set -eu
mount -t tmpfs -o mode=0755 tmpfs /run/systemd
mkdir /run/systemd/system
mount -t cgroup2 cgroup2 /sys/fs/cgroup
[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] || { echo "FENCE: not cgroup2" >&2; exit 90; }
[ "$(grep '^0::' /proc/self/cgroup)" = "0::/" ] || { echo "FENCE: not at the root" >&2; exit 91; }
for pid in $(cat /sys/fs/cgroup/cgroup.procs); do
    [ "$pid" = $$ ] && continue
    parent=$(sed 's/.*) [A-Z] \([0-9]*\) .*/\1/' /proc/"$pid"/stat 2>/dev/null || echo gone)
    [ "$parent" = $$ ] || [ "$parent" = gone ] ||
        { echo "FENCE: pid $pid is not ours" >&2; exit 92; }
done
[ -z "$(find /sys/fs/cgroup -mindepth 1 -maxdepth 1 -type d)" ] ||
    { echo "FENCE: not empty" >&2; exit 93; }
exec "$SYSTEMD" --user
"""


@dataclass
class UserManager:
    """A running user manager; `environ` is the fake user's environment,
    in which `systemctl --user` talks to it."""

    environ: dict[str, str]
    proc: subprocess.Popen[bytes]
    cgroup: Path
    log: Path

    def systemctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["systemctl", "--user", *args],
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def show(self, unit: str, *props: str) -> dict[str, str]:
        done = self.systemctl("show", unit, "-p", ",".join(props))
        pairs = (line.partition("=") for line in done.stdout.splitlines())
        return {key: value for key, _, value in pairs}


def why_not() -> str | None:
    """Why a fenced user manager cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "a systemd user manager needs Linux"
    for program in ("systemctl", "unshare", "mount"):
        if shutil.which(program) is None:
            return f"{program} is not installed"
    if not os.access(SYSTEMD, os.X_OK):
        return f"{SYSTEMD} is not installed"
    if os.geteuid() != 0:
        return "mounting /run/systemd and cgroup2 in a namespace of its own needs root"
    if _cgroup2_dir() is None:
        return "no cgroup2 hierarchy is mounted (needed for the manager's own cgroup)"
    return None


def _cgroup2_dir() -> Path | None:
    """This process's cgroup in the cgroup2 hierarchy, as a directory."""
    mount = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" - ", 1)
        if len(fields) == 2 and fields[1].startswith("cgroup2 "):
            mount = line.split()[4]
            break
    own = next(
        (
            ln[3:]
            for ln in Path("/proc/self/cgroup").read_text().splitlines()
            if ln.startswith("0::")
        ),
        None,
    )
    if mount is None or own is None:
        return None
    path = Path(mount) / own.lstrip("/")
    return path if path.is_dir() else None


def _remove_cgroup(top: Path) -> None:
    """Kill whatever is left in the manager's cgroup tree, then remove it."""
    if not top.exists():
        return
    kill = top / "cgroup.kill"
    if kill.exists():
        kill.write_text("1")
    deadline = time.monotonic() + 10
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        _rmdir(d, deadline)
    _rmdir(top, deadline)


def _rmdir(d: Path, deadline: float) -> None:
    while True:
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def user_manager(fh: FakeHome) -> Iterator[UserManager]:
    """Start a fenced `systemd --user` for `fh` (see the module's doc), or skip."""
    why = why_not()
    if why is not None:
        pytest.skip(f"no real systemd --user here: {why}")
    parent = _cgroup2_dir()
    assert parent is not None
    cgroup = parent / f"agentkeep-test-{os.getpid()}-{time.monotonic_ns()}"
    cgroup.mkdir()
    script = fh.root / "start-user-manager.sh"
    script.write_text(_START)
    log = fh.root / "user-manager.log"
    # The manager's own units only: not the machine's enabled user sockets (gpg-agent...).
    unit_path = f"{fh.environ['XDG_CONFIG_HOME']}/systemd/user:/usr/lib/systemd/user"
    environ = dict(fh.environ, SYSTEMD=str(SYSTEMD), SYSTEMD_UNIT_PATH=unit_path)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec unshare -m -C sh "$2"', "sh"]
            + [str(cgroup), str(script)],
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    manager = UserManager(fh.environ, proc, cgroup, log)
    try:
        deadline = time.monotonic() + 30
        while manager.systemctl("show-environment").returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")
                if "FENCE:" in text:
                    pytest.fail(f"SETUP INVALID: the manager was not fenced off: {text}")
                pytest.skip(f"no real systemd --user here: it did not come up: {text[-2000:]}")
            time.sleep(0.05)
        yield manager
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        _remove_cgroup(cgroup)
