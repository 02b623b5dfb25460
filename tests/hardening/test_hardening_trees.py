"""Hostile trees inside sessions, through the real `agentkeep prune` (issue #7):
a directory swapped for a link while it is removed, a directory on another
file system (the mount-id seam), names with newlines and invalid UTF-8, a
10,000-deep directory, and a hard link to a file outside every root. Whatever
lies outside is byte-identical afterwards, whatever is not the session's stays,
and the session itself is removed completely or not at all.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hardening_util import (
    DAY,
    gone,
    kept_reasons,
    removed_ids,
    report_of,
    run_cli,
    whole,
)

from build_claude import ClaudeSessionPaths, make_session, set_age
from fakehome import FakeHome
from trees import entry_state, paths_state, tree_state

pytestmark = pytest.mark.slow

AGE = 40.0
TRASH = [pytest.param("7d", id="trash"), pytest.param("0", id="no-trash")]

SWAP = """
import os
import agentkeep.rmtree as rmtree

TARGET, VICTIM, AWAY = os.environ["SWAP_TARGET"], os.environ["SWAP_VICTIM"], os.environ["SWAP_AWAY"]

def swap(path):
    # Once, between the removal's look at TARGET and its use: the directory
    # moves away and a link to the victim takes its name.
    if path == TARGET and not os.path.lexists(AWAY):
        os.rename(TARGET, AWAY)
        os.symlink(VICTIM, TARGET)

rmtree._before_leaf = swap
"""

MOUNT = """
import os
import agentkeep.rmtree as rmtree

MOUNT = os.environ["MOUNT"]

def mount_id(path, found):
    # MOUNT and everything below it are on another mount.
    if path == MOUNT or path.startswith(MOUNT + "/"):
        return found + 1
    return found

assert hasattr(rmtree, "_mount_id_override"), "the mount-id seam is gone"
rmtree._mount_id_override = mount_id
"""

# One descriptor per level would run out long before the bottom of the tree.
FEW_DESCRIPTORS = """
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
"""

ODD = [b"new\nline", b"bad\xff\xfe.txt", b"\xc3(", b" lead", b"-rf", b"tab\there"]


def configure(fh: FakeHome, trash: str) -> None:
    fh.write_config(f'trash = "{trash}"\n')


def outside(fh: FakeHome) -> Path:
    """Things that are no session's: they must come out byte-identical."""
    root = fh.root / "outside"
    (root / "victim").mkdir(parents=True)
    (root / "victim" / "keep.txt").write_text("precious\n")
    (root / "precious.txt").write_text("also precious\n")
    for name in ODD:
        with open(os.fsencode(root) + b"/" + name, "wb") as f:
            f.write(b"odd but not ours\n")
    return root


def session(fh: FakeHome, **kw: Any) -> ClaudeSessionPaths:
    return make_session(fh, age_days=kw.pop("age_days", AGE), **kw)


def reage(s: ClaudeSessionPaths, extra: list[Path]) -> None:
    """Back to its age after hostile things were put inside it."""
    set_age([*s.all_paths(), *extra], AGE)


def prune(fh: FakeHome, seams: str = "", env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = run_cli(fh, "prune", "--older-than", "30d", "--json", seams=seams, env=env)
    doc = report_of(proc)
    assert proc.returncode == (1 if doc["failed"] else 0), proc.stderr
    return doc


def odd_tree(base: Path) -> list[Path]:
    """Files and a directory with odd names inside `base`; every path made."""
    raw = os.fsencode(base)
    made = []
    for name in ODD:
        with open(raw + b"/" + name, "wb") as f:
            f.write(b"abc")
        made.append(Path(os.fsdecode(raw + b"/" + name)))
    os.mkfifo(raw + b"/fifo\n")
    made.append(Path(os.fsdecode(raw + b"/fifo\n")))
    sub = raw + b"/sub\n\xff"
    os.mkdir(sub)
    with open(sub + b"/\xfe\nx", "wb") as f:
        f.write(b"deeper")
    made += [Path(os.fsdecode(sub)), Path(os.fsdecode(sub + b"/\xfe\nx"))]
    return made


# -- a link swapped in mid-removal ------------------------------------------------------------


@pytest.mark.parametrize("trash", TRASH)
@pytest.mark.parametrize("where", ["inside", "artifact"])
def test_a_directory_swapped_for_a_link_mid_prune_is_not_followed(
    fake_home: FakeHome, trash: str, where: str
) -> None:
    configure(fake_home, trash)
    out = outside(fake_home)
    s = session(fake_home)
    recent = session(fake_home, age_days=2, cwd="/home/user/other")
    target = s.tmp / "tasks" if where == "inside" else s.tmp
    away = fake_home.root / "moved-away"
    before, recent_before = tree_state(out), paths_state(recent.all_paths())
    env = {"SWAP_TARGET": str(target), "SWAP_VICTIM": str(out / "victim"), "SWAP_AWAY": str(away)}

    doc = prune(fake_home, SWAP, env)

    if not away.exists():
        pytest.fail("SETUP INVALID: the directory was never swapped")
    assert tree_state(out) == before, "the prune followed the swapped-in link"
    assert removed_ids(doc) == [s.id] and doc["failed"] == []
    assert gone(s), [p for p in s.all_paths() if os.path.lexists(p)]
    assert not os.path.lexists(target), "the link goes, as a link"
    assert (away / ("bwdin25xx.output" if where == "inside" else "tasks")).exists()
    assert paths_state(recent.all_paths()) == recent_before


ON_THE_WAY = """
import os
import agentkeep.rmtree as rmtree

TARGET, KEY, DECOY, AWAY = (os.environ[k] for k in ("SWAP_TARGET", "KEY", "DECOY", "SWAP_AWAY"))

def swap(path):
    # While the transcript is removed, the workspace key dir above the
    # session's other artifacts is swapped for a link to a decoy.
    if path == TARGET and not os.path.lexists(AWAY):
        os.rename(KEY, AWAY)
        os.symlink(DECOY, KEY)

rmtree._before_leaf = swap
"""


@pytest.mark.parametrize("trash", TRASH)
def test_a_link_swapped_in_on_the_way_to_an_artifact_is_not_followed(
    fake_home: FakeHome, trash: str
) -> None:
    configure(fake_home, trash)
    s = session(fake_home)
    key = s.transcript.parent
    decoy = outside(fake_home) / "decoy"
    (decoy / s.id / "subagents").mkdir(parents=True)
    (decoy / s.id / "subagents" / "x.jsonl").write_text("a decoy\n")
    (decoy / f"{s.id}.jsonl").write_text("a decoy transcript\n")
    before = tree_state(fake_home.root / "outside")
    away = fake_home.root / "moved-away"
    env = {"SWAP_TARGET": str(s.transcript), "KEY": str(key), "DECOY": str(decoy)}

    doc = prune(fake_home, ON_THE_WAY, {**env, "SWAP_AWAY": str(away)})

    if not key.is_symlink():
        pytest.fail("SETUP INVALID: the key dir was never swapped")
    assert tree_state(fake_home.root / "outside") == before, "the prune followed the link"
    assert removed_ids(doc) == [s.id] and doc["failed"] == []
    # What lay beside the transcript is behind the link now, and so is the
    # decoy named like the transcript, which looking again finds.
    beside = {str(p) for _, p in s.artifact_set() if Path(p).parent == key} - {str(s.transcript)}
    assert {r["path"] for r in doc["residual"]} == beside | {str(s.transcript)}
    assert not (away / f"{s.id}.jsonl").exists(), "the transcript itself went"
    assert (away / s.id / "subagents").is_dir(), "what moved away with the key dir stays"
    assert not s.file_history.exists() and not s.tmp.exists()


# -- another file system inside a session ------------------------------------------------------


@pytest.mark.parametrize("trash", TRASH)
def test_a_directory_on_another_file_system_stays_and_is_reported(
    fake_home: FakeHome, trash: str
) -> None:
    configure(fake_home, trash)
    s = session(fake_home)
    mount = s.session_dir / "mnt"
    (mount / "data").mkdir(parents=True)
    (mount / "data" / "big.bin").write_bytes(os.urandom(4096))
    (mount / "notes.txt").write_text("on another file system\n")
    reage(s, [mount, mount / "data", mount / "data" / "big.bin", mount / "notes.txt"])
    before = tree_state(mount)

    doc = prune(fake_home, MOUNT, {"MOUNT": str(mount)})

    assert removed_ids(doc) == [s.id] and doc["failed"] == []
    assert tree_state(mount) == before, "something on the other file system was touched"
    # The session dir stays around the mount, and looking again finds it.
    residual = {(r["id"], r["path"]) for r in doc["residual"]}
    assert residual == {(s.id, str(mount)), (s.id, str(s.session_dir))}
    assert not s.transcript.exists() and not s.tmp.exists() and not s.file_history.exists()
    assert os.listdir(s.session_dir) == ["mnt"], "the rest of the session dir goes"


# -- odd names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("trash", TRASH)
def test_names_with_newlines_and_invalid_utf8(fake_home: FakeHome, trash: str) -> None:
    configure(fake_home, trash)
    out = outside(fake_home)
    s = session(fake_home)
    inside = odd_tree(s.tmp) + odd_tree(s.session_dir / "tool-results")
    reage(s, inside)
    before = paths_state([*s.all_paths(), *inside])
    # Beside the session, never its: odd names in its key dirs that are no session id.
    strangers = [
        Path(os.fsdecode(os.fsencode(s.transcript.parent) + b"/odd\n\xff.jsonl")),
        Path(os.fsdecode(os.fsencode(s.tmp.parent) + b"/\xff\n" + s.id.encode())),
    ]
    for path in strangers:
        path.write_bytes(b"not a session\n")
    set_age(strangers, AGE)
    out_before, strangers_before = tree_state(out), paths_state(strangers)
    listed = run_cli(fake_home, "ls", "--json")
    assert listed.returncode == 0, listed.stderr

    doc = prune(fake_home)

    assert removed_ids(doc) == [s.id] and doc["failed"] == []
    assert gone(s) and not any(os.path.lexists(p) for p in inside)
    assert paths_state(strangers) == strangers_before
    assert tree_state(out) == out_before
    if trash != "0":
        restored = run_cli(fake_home, "restore", "claude", s.id)
        assert restored.returncode == 0, restored.stderr
        assert paths_state([*s.all_paths(), *inside]) == before


# -- a hard link to a file outside ---------------------------------------------------------------


@pytest.mark.parametrize("trash", TRASH)
def test_a_hard_link_to_an_outside_file_never_changes_that_file(
    fake_home: FakeHome, trash: str
) -> None:
    configure(fake_home, trash)
    out = outside(fake_home)
    s = session(fake_home)
    hard = s.tmp / "tasks" / "hard"
    os.link(out / "precious.txt", hard)
    soft = s.session_dir / "soft"
    soft.symlink_to(out / "precious.txt")
    reage(s, [hard, soft])
    if os.stat(out / "precious.txt").st_nlink != 2:
        pytest.fail("SETUP INVALID: no hard link")
    before = tree_state(out)

    doc = prune(fake_home)

    assert removed_ids(doc) == [s.id] and doc["failed"] == []
    assert gone(s) and not os.path.lexists(hard) and not os.path.lexists(soft)
    assert tree_state(out) == before
    assert entry_state(out / "precious.txt") == before[str(out / "precious.txt")]


# -- 10,000 levels deep ------------------------------------------------------------------------


def deep_tree(base: Path, depth: int, when: float) -> None:
    """`base/d/d/.../d/bottom.txt`, `depth` levels, every level aged `when`;
    built through descriptors (the path is far longer than PATH_MAX)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    leaf = os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(leaf, b"12345")
    os.close(leaf)
    os.utime("bottom.txt", (when, when), dir_fd=fd)
    for _ in range(depth):
        parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.utime("d", (when, when), dir_fd=parent)
        os.close(fd)
        fd = parent
    os.close(fd)


DEPTH = 10_000


@pytest.fixture
def deep_session(fake_home: FakeHome) -> Iterator[ClaudeSessionPaths]:
    """An old session whose tmp dir holds a tree DEPTH levels deep; the tree is
    removed afterwards whatever happened (pytest's own clean-up of old tmp dirs
    recurses, and a tree this deep would break it for every later run)."""
    s = session(fake_home)
    deep_tree(s.tmp, DEPTH, time.time() - AGE * DAY)
    reage(s, [])
    yield s
    for leftover in (s.tmp, fake_home.state / "trash"):
        subprocess.run(["rm", "-rf", "--", str(leftover)], check=False)


def test_a_ten_thousand_deep_directory_never_leaves_a_session_half_removed(
    fake_home: FakeHome, deep_session: ClaudeSessionPaths
) -> None:
    configure(fake_home, "0")
    s = deep_session
    plain = session(fake_home, cwd="/home/user/plain")
    recent = session(fake_home, age_days=2, cwd="/home/user/other")
    recent_before = paths_state(recent.all_paths())

    doc = prune(fake_home, FEW_DESCRIPTORS)

    assert doc["failed"] == []
    assert plain.id in removed_ids(doc) and gone(plain)
    assert whole(s) or gone(s), "the deep session is half removed"
    assert paths_state(recent.all_paths()) == recent_before
    for args in (("scan", "--json"), ("ls", "--json")):
        proc = run_cli(fake_home, *args)
        assert proc.returncode == 0, proc.stderr


def test_a_ten_thousand_deep_directory_inside_an_old_session_is_removed(
    fake_home: FakeHome, deep_session: ClaudeSessionPaths
) -> None:
    configure(fake_home, "0")
    s = deep_session

    doc = prune(fake_home, FEW_DESCRIPTORS)

    assert kept_reasons(doc).get(s.id) is None, kept_reasons(doc)
    assert removed_ids(doc) == [s.id] and doc["failed"] == []
    assert gone(s)
