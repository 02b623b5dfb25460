"""State folders that are not the user's alone (issue #14).

A state dir another user created was chmodded to 0700 and used, still theirs;
they then rewrote pins.json and a pinned session was pruned. Now the state
dir, and its trash, journal and leases folders (with their per-agent
folders), are used only under the rule the socket's folder and every agent
root follow: the user's own, writable by nobody else, no link on the way
that another user owns. Anything else is refused with the path named (the
CLI exits 1, the daemon does not start and says so in one line), and a
folder found is never chmodded. The other user is real: a second uid made
with `setpriv --reuid --regid --clear-groups` (as root).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hardening_util import discard_home, events_named, fast_root, run_cli

from build_claude import make_session
from fakehome import FakeHome, make_fake_home
from test_daemon_serve import start_daemon, stop_daemons

__all__ = ["stop_daemons"]

# A uid and gid no account on the machine has.
OTHER = 54321
DEADLINE = 60.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def as_other(*argv: str) -> None:
    """Run `argv` as the other user; the test is SETUP INVALID when it fails."""
    proc = subprocess.run(
        ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", "--", *argv],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0:
        pytest.fail(f"SETUP INVALID: {' '.join(argv)} as uid {OTHER}: {proc.stderr.strip()}")


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[FakeHome]:
    """A fake user whose XDG_STATE_HOME is a shared place other users may
    create in (sticky and world-writable, like /tmp), on a path the other
    user can walk."""
    if os.geteuid() != 0:
        pytest.skip("a second real user needs root here (setpriv --reuid)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is missing")
    root = fast_root(tmp_path)
    os.chmod(root, 0o755)
    fh = make_fake_home(root)
    xdg_state = Path(fh.environ["XDG_STATE_HOME"])
    xdg_state.mkdir(parents=True)
    for path in (fh.home, xdg_state.parent):
        os.chmod(path, 0o755)
    os.chmod(xdg_state, 0o1777)
    yield fh
    discard_home(fh)


def cli(fh: FakeHome, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(fh, *args, timeout=DEADLINE)


def mode_and_owner(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid


def assert_refused(fh: FakeHome, path: Path, why: str) -> None:
    """Every command that uses the state dir refuses, naming `path`."""
    s = make_session(fh, age_days=40)
    for args in (("ls", "--json"), ("pin", "claude", s.id), ("prune", "--older-than", "30d")):
        proc = cli(fh, *args)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert f"refusing the state dir: {path}" in proc.stderr and why in proc.stderr, (
            args,
            proc.stderr,
        )
        assert "Traceback" not in proc.stderr
    assert s.transcript.exists()


def test_a_state_dir_another_user_made_is_refused_never_chmodded(shared: FakeHome) -> None:
    state = shared.state
    as_other("mkdir", "-m", "0755", str(state))
    as_other("sh", "-c", f"echo '[]' > '{state}/pins.json'")
    before = mode_and_owner(state)
    if before[1] != OTHER:
        pytest.fail("SETUP INVALID: the state dir is not the other user's")

    assert_refused(shared, state, f"belongs to uid {OTHER}")

    assert mode_and_owner(state) == before, "the other user's folder was chmodded"
    assert os.listdir(state) == ["pins.json"], "nothing of ours is written into it"


def test_the_daemon_refuses_another_users_state_dir_in_one_line(shared: FakeHome) -> None:
    as_other("mkdir", "-m", "0700", str(shared.state))
    daemon = start_daemon(shared, ready=False)
    try:
        code = daemon.proc.wait(DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail("the daemon started on another user's state dir")
    assert code == 1
    [line] = events_named(daemon.log, "refusing the state dir; not starting")
    assert str(shared.state) in line["error"] and f"uid {OTHER}" in line["error"]
    assert [e for e in events_named(daemon.log, "start-up failed")] == []
    assert "Traceback" not in daemon.stderr()
    assert not shared.socket.exists()
    assert mode_and_owner(shared.state) == (0o700, OTHER)


@pytest.mark.parametrize("folder", ["trash", "journal", "leases", "leases/claude"])
def test_a_folder_another_user_made_in_the_state_dir_is_refused(
    shared: FakeHome, folder: str
) -> None:
    """Made by them while its parent was open to everyone (as an earlier
    release's chmod left it), and the parent closed again since."""
    assert cli(shared, "ls").returncode == 0  # our own state dir, 0700
    path = shared.state / folder
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    opened = [p for p in path.parents if p == shared.state or shared.state in p.parents]
    for p in opened:
        os.chmod(p, 0o777)
    as_other("mkdir", "-m", "0755", str(path))
    for p in opened:
        os.chmod(p, 0o700)
    before = mode_and_owner(path)

    assert_refused(shared, path, f"belongs to uid {OTHER}")

    assert mode_and_owner(path) == before


@pytest.mark.parametrize("folder", ["", "trash", "journal", "leases"])
def test_a_folder_of_ours_that_others_can_write_is_refused(shared: FakeHome, folder: str) -> None:
    shared.state.mkdir(mode=0o700)
    path = shared.state / folder if folder else shared.state
    path.mkdir(exist_ok=True)
    os.chmod(path, 0o777)

    assert_refused(shared, path, "can be written by other users")

    assert mode_and_owner(path) == (0o777, os.getuid()), "it was chmodded"


def test_a_state_dir_that_is_another_users_link_is_refused(shared: FakeHome) -> None:
    ours = shared.root / "ours"
    ours.mkdir(mode=0o700)
    as_other("ln", "-s", str(ours), str(shared.state))
    if not shared.state.is_symlink() or os.lstat(shared.state).st_uid != OTHER:
        pytest.fail("SETUP INVALID: no link of the other user's")

    assert_refused(shared, shared.state, f"is a link owned by uid {OTHER}")

    assert os.listdir(ours) == []
