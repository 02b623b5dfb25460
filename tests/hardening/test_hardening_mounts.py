"""Real mount points inside sessions and the trash (issue #14).

`mount --bind OUTSIDE <session>/mnt` of a directory on the same file system
gives `mnt` the st_dev of its parent; a walk that judged mount points by
st_dev emptied OUTSIDE (trash "0"), or moved the mount into the trash and
emptied it at expiry, and the prune then failed on the busy mount point
every run. Here the mounts are real: a private mount namespace of the
test's own (`unshare -m`, as root), kept alive by a sleeping process, and
the real CLI run inside it with nsenter. Outside the namespace the mount
points are plain empty directories, so nothing escapes the test.
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
from typing import Any

import pytest
from hardening_util import DAY, pending_journal, removed_ids, report_of

from build_agents import make_zero_session, zero_root
from build_claude import make_session, set_age
from fakehome import FakeHome, kill_group, prune_here
from trees import tree_state
from waiting import wait_until

AGE = 40.0
TRASH = [pytest.param("7d", id="trash"), pytest.param("0", id="no-trash")]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class Namespace:
    """A private mount namespace: mounts made in it are seen only by the
    commands run in it, and vanish with its last process."""

    def __init__(self, holder: subprocess.Popen[bytes]) -> None:
        self.holder = holder

    def run(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["nsenter", "-t", str(self.holder.pid), "-m", "--", *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def mount(self, *args: str) -> None:
        proc = self.run(["mount", *args], timeout=30)
        if proc.returncode != 0:
            pytest.skip(f"mount {' '.join(args)} is not allowed here: {proc.stderr.strip()}")

    def bind(self, source: Path, target: Path) -> None:
        self.mount("--bind", str(source), str(target))

    def mount_points(self) -> set[str]:
        """Every mount point the namespace sees."""
        text = Path(f"/proc/{self.holder.pid}/mountinfo").read_text()
        return {_unescape(line.split()[4]) for line in text.splitlines()}

    def cli(self, fh: FakeHome, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run([sys.executable, "-m", "agentkeep", *args], env=fh.environ)


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    if os.geteuid() != 0:
        pytest.skip("a private mount namespace needs root here (unshare -m)")
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.skip("unshare or nsenter is missing")
    holder = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sleep", "600"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    mine = os.readlink("/proc/self/ns/mnt")

    def entered() -> bool:
        if holder.poll() is not None:
            return True
        try:
            return os.readlink(f"/proc/{holder.pid}/ns/mnt") != mine
        except OSError:
            return False

    wait_until(entered, "the private mount namespace")
    if holder.poll() is not None:
        assert holder.stderr is not None
        pytest.skip(f"unshare -m is not allowed here: {holder.stderr.read().decode().strip()}")
    try:
        yield Namespace(holder)
    finally:
        kill_group(holder)
        if holder.stderr is not None:
            holder.stderr.close()


def outside(fh: FakeHome) -> Path:
    """Data that is no session's, on the same file system as every root."""
    root = fh.root / "outside"
    (root / "deep" / "er").mkdir(parents=True)
    (root / "precious.txt").write_text("not agentkeep's to remove\n")
    (root / "deep" / "er" / "big.bin").write_bytes(os.urandom(8192))
    set_age([root, *root.rglob("*")], AGE)
    return root


def prune(ns: Namespace, fh: FakeHome, *extra: str) -> dict[str, Any]:
    proc = ns.cli(fh, "prune", "--older-than", "30d", "--json", *extra)
    doc = report_of(proc)
    assert doc["failed"] == [], doc["failed"]
    assert proc.returncode == 0, proc.stderr
    return doc


def residual_of(doc: dict[str, Any], sid: str) -> set[str]:
    return {r["path"] for r in doc["residual"] if r["id"] == sid}


def assert_residual(doc: dict[str, Any], p: Place) -> None:
    """The mount point is residual, and so is the session dir that holds it
    when its name is the session's (looked for again after the removal)."""
    found = residual_of(doc, p.id)
    assert str(p.mount) in found, doc["residual"]
    assert found <= {str(p.mount), str(p.holder)}, doc["residual"]


class Place:
    """An old session with a mount point planted in it, and what else of it
    must go."""

    def __init__(self, sid: str, mount: Path, rest: list[Path], holder: Path) -> None:
        self.id = sid
        self.mount = mount
        self.rest = rest  # the session's other paths: all must go
        self.holder = holder  # the session dir the mount point stays in


def place(fh: FakeHome, where: str) -> Place:
    if where == "zero":
        s = make_zero_session(zero_root(fh.data), "z-mounted", days=AGE)
        mount = s.dir / "mnt"
        mount.mkdir()
        set_age([mount, s.dir], AGE)
        return Place(s.id, mount, [p for p in s.artifacts if p != s.dir], s.dir)
    c = make_session(fh, age_days=AGE)
    holder = c.session_dir if where == "claude-session-dir" else c.tmp
    mount = holder / "mnt"
    mount.mkdir()
    set_age([mount, holder], AGE)
    rest = [p for p in c.all_paths() if p != holder and holder not in p.parents]
    return Place(c.id, mount, rest, holder)


PLACES = ["claude-session-dir", "claude-tmp", "zero"]


@pytest.mark.parametrize("trash", TRASH)
@pytest.mark.parametrize("where", PLACES)
def test_a_bind_mount_inside_a_session_is_never_crossed(
    fake_home: FakeHome, namespace: Namespace, where: str, trash: str
) -> None:
    fake_home.write_config(f'trash = "{trash}"\n')
    out = outside(fake_home)
    p = place(fake_home, where)
    before = tree_state(out)
    namespace.bind(out, p.mount)
    if os.stat(p.mount).st_dev != os.stat(out).st_dev:
        pytest.fail("SETUP INVALID: the bind mount's file system differs from its parent's")
    if str(p.mount) not in namespace.mount_points():
        pytest.fail("SETUP INVALID: no mount point in the session")

    doc = prune(namespace, fake_home)

    assert tree_state(out) == before, "the prune crossed the bind mount"
    assert p.id in removed_ids(doc)
    assert_residual(doc, p)
    assert not any(os.path.lexists(path) for path in p.rest), "the rest of the session goes"
    assert os.listdir(p.holder) == ["mnt"], "everything beside the mount point goes"
    assert str(p.mount) in namespace.mount_points(), "the mount stays where it was"
    assert pending_journal(fake_home) == set() and not list((fake_home.state).glob("journal/*"))

    # Nothing is left to retry: the next run fails nothing and finds nothing
    # old (the dir the mount point stays in was just written by the removal).
    again = prune(namespace, fake_home)
    assert (again["removed"], again["kept"]) == ([], [])
    assert tree_state(out) == before
    assert str(p.mount) in namespace.mount_points()


@pytest.mark.parametrize("trash", TRASH)
def test_a_tmpfs_inside_a_session_is_left_too(
    fake_home: FakeHome, namespace: Namespace, trash: str
) -> None:
    fake_home.write_config(f'trash = "{trash}"\n')
    p = place(fake_home, "claude-session-dir")
    namespace.mount("-t", "tmpfs", "tmpfs", str(p.mount))
    when = int(time.time() - AGE * DAY)
    script = f'echo on a tmpfs > "$1/note" && touch -d @{when} "$1/note" "$1"'
    note = namespace.run(["sh", "-c", script, "-", str(p.mount)])
    assert note.returncode == 0, note.stderr

    doc = prune(namespace, fake_home)

    assert p.id in removed_ids(doc)
    assert_residual(doc, p)
    kept = namespace.run(["cat", str(p.mount / "note")])
    assert kept.stdout == "on a tmpfs\n", "the tmpfs was emptied"
    assert not any(os.path.lexists(path) for path in p.rest)


def test_a_dry_run_reports_the_mount_point_and_changes_nothing(
    fake_home: FakeHome, namespace: Namespace
) -> None:
    fake_home.write_config('trash = "7d"\n')
    out = outside(fake_home)
    p = place(fake_home, "claude-session-dir")
    namespace.bind(out, p.mount)
    before = tree_state(out)
    own = {d: tree_state(d) for d in (fake_home.claude, fake_home.root / "tmp")}

    doc = prune(namespace, fake_home, "--dry-run")

    assert removed_ids(doc) == [p.id]
    assert_residual(doc, p)
    assert tree_state(out) == before
    assert {d: tree_state(d) for d in own} == own


def test_the_trash_expiry_never_empties_a_mount_in_an_entry(
    fake_home: FakeHome, namespace: Namespace
) -> None:
    """An entry that holds a mount point (one an earlier release moved in
    with its session dir) is removed around it at expiry, never through it."""
    fake_home.write_config('trash = "7d"\n')
    out = outside(fake_home)
    s = make_session(fake_home, age_days=AGE)
    # In-process, so that nothing compresses the entry: as an earlier
    # release left it, its session dir in roots/.
    first = prune_here(fake_home, older_than="30d")
    assert first is not None and [r.id for r in first.removed] == [s.id]
    [entry] = [d for d in (fake_home.state / "trash" / "claude").iterdir()]
    moved = min(p for p in entry.rglob(s.id) if p.is_dir())  # one of its directories
    (moved / "mnt").mkdir()
    namespace.bind(out, moved / "mnt")
    data = json.loads((entry / "entry.json").read_text())
    data["expires_at"] = data["trashed_at"] - DAY
    (entry / "entry.json").write_text(json.dumps(data))
    before = tree_state(out)

    prune(namespace, fake_home)  # every prune expires the trash first

    assert tree_state(out) == before, "the expiry emptied the mount"
    assert not entry.exists(), "the entry stops being an entry"
    listed = namespace.cli(fake_home, "trash", "--json")
    assert listed.returncode == 0, listed.stderr
    assert s.id not in listed.stdout
    assert any(point.endswith("/mnt") for point in namespace.mount_points() if "trash" in point)
