"""Link-safe removal on real trees: links, swaps, mounts, depth, odd names."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep import rmtree
from agentkeep.errors import RemovalError
from agentkeep.model import Artifact
from agentkeep.removal import SessionRemoval
from agentkeep.rmtree import remove_tree_at
from trees import tree_state


@pytest.fixture
def root(fake_home) -> Path:
    path = fake_home.claude / "projects" / "-home-u-proj"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def outside(fake_home) -> Path:
    """Something that is not the session's: it must survive every test."""
    path = fake_home.root / "outside"
    (path / "victim").mkdir(parents=True)
    (path / "victim" / "keep.txt").write_text("precious\n")
    (path / "file.txt").write_text("also precious\n")
    return path


def art(root: Path | str, rel: str | bytes) -> Artifact:
    rel_text = os.fsdecode(rel)
    return Artifact(
        path=os.path.join(os.fspath(root), rel_text), kind="t", bytes=0, mtime=0.0, root=str(root)
    )


def remover(dry_run: bool = False) -> SessionRemoval:
    return SessionRemoval("claude", "s", dry_run=dry_run, trash=None)


def make_tree(base: Path) -> int:
    """A session directory with files and subdirectories; its byte count."""
    (base / "sub" / "deeper").mkdir(parents=True)
    (base / "a.jsonl").write_text("x" * 100)
    (base / "sub" / "b.txt").write_text("y" * 20)
    (base / "sub" / "deeper" / "c.bin").write_bytes(b"\0" * 7)
    (base / "empty").mkdir()
    return 127


def test_files_and_directories_are_removed(root: Path) -> None:
    nbytes = make_tree(root / "sess")
    (root / "sess.jsonl").write_text("12345")
    r = remover()
    r.remove_path(art(root, "sess.jsonl"))
    r.remove_path(art(root, "sess"))
    assert not (root / "sess").exists() and not (root / "sess.jsonl").exists()
    assert r.removed == [str(root / "sess.jsonl"), str(root / "sess")]
    assert r.bytes == nbytes + 5
    assert r.residuals == [] and not r.partial
    assert root.is_dir(), "the root itself stays"


def test_a_missing_leaf_is_already_gone(root: Path) -> None:
    r = remover()
    r.remove_path(art(root, "never-was"))
    r.remove_path(art(root / "no-such-root", "x"))
    assert r.removed == [] and r.residuals == [] and r.bytes == 0


@pytest.mark.parametrize(
    "bad",
    [
        Artifact("/x/y", "t", 0, 0.0, root=None),
        Artifact("/elsewhere/f", "t", 0, 0.0, root="/x"),
        Artifact("/x/a/../../etc/passwd", "t", 0, 0.0, root="/x"),
        Artifact("/x", "t", 0, 0.0, root="/x"),
        Artifact("/xy/f", "t", 0, 0.0, root="/x"),
    ],
)
def test_artifacts_not_below_their_root_are_refused(bad: Artifact) -> None:
    with pytest.raises(RemovalError):
        remover().remove_path(bad)


def test_a_linked_artifact_is_reported_not_removed(root: Path, outside: Path) -> None:
    os.symlink(outside / "victim", root / "sess")
    r = remover()
    r.remove_path(Artifact(str(root / "sess"), "t", 0, 0.0, root=str(root), linked=True))
    assert (root / "sess").is_symlink()
    assert r.residuals == [str(root / "sess")]


def test_a_link_leaf_is_removed_as_the_link_alone(root: Path, outside: Path) -> None:
    before = tree_state(outside)
    os.symlink(outside / "file.txt", root / "file-link")
    os.symlink(outside / "victim", root / "dir-link")
    r = remover()
    r.remove_path(art(root, "file-link"))
    r.remove_path(art(root, "dir-link"))
    assert not os.path.lexists(root / "file-link") and not os.path.lexists(root / "dir-link")
    assert tree_state(outside) == before, "a link's target was changed"
    assert r.removed == [str(root / "file-link"), str(root / "dir-link")]


def test_links_inside_a_tree_are_unlinked_never_followed(root: Path, outside: Path) -> None:
    before = tree_state(outside)
    make_tree(root / "sess")
    os.symlink(outside / "victim", root / "sess" / "sub" / "to-dir")
    os.symlink(outside / "file.txt", root / "sess" / "to-file")
    os.symlink("/", root / "sess" / "to-slash")
    remover().remove_path(art(root, "sess"))
    assert not (root / "sess").exists()
    assert tree_state(outside) == before


@pytest.mark.parametrize("level", [0, 1, 2])
def test_a_link_on_the_way_makes_the_artifact_residual(
    root: Path, outside: Path, level: int
) -> None:
    # root/a/b/c/target.jsonl with component `level` replaced by a link to a
    # directory outside that holds the rest of the path.
    components = ["a", "b", "c"]
    real = outside / "behind"
    real.joinpath(*components[level + 1 :]).mkdir(parents=True)
    real.joinpath(*components[level + 1 :], "target.jsonl").write_text("not ours")
    link_parent = root.joinpath(*components[:level])
    link_parent.mkdir(parents=True, exist_ok=True)
    os.symlink(real, link_parent / components[level])
    before = tree_state(outside)

    path = "a/b/c/target.jsonl"
    assert (root / path).read_text() == "not ours", "SETUP INVALID: the link does not lead there"
    r = remover()
    r.remove_path(art(root, path))
    assert r.residuals == [str(root / path)]
    assert r.removed == [] and r.bytes == 0
    assert tree_state(outside) == before
    assert (link_parent / components[level]).is_symlink()
    assert remove_tree_at(root, path) == [str(root / path)]
    assert tree_state(outside) == before


@pytest.mark.parametrize("which", ["sess", "sess/sub"])
def test_a_directory_swapped_for_a_link_mid_removal_is_not_followed(
    root: Path, outside: Path, fake_home, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    make_tree(root / "sess")
    before = tree_state(outside)
    target = root / which
    moved_away = fake_home.root / "moved-away"
    swaps: list[str] = []

    def swap(path: str) -> None:
        # Between the removal's look at the directory and its open: the
        # directory is renamed away and a link to a victim takes its place.
        if path == str(target) and not swaps:
            os.rename(target, moved_away)
            os.symlink(outside / "victim", target)
            swaps.append(path)

    monkeypatch.setattr(rmtree, "_before_leaf", swap)
    r = remover()
    r.remove_path(art(root, "sess"))
    assert swaps, "SETUP INVALID: the swap never happened"
    assert tree_state(outside) == before, "the removal followed the swapped-in link"
    assert not os.path.lexists(target), "the link should go as a link"
    assert (moved_away / "b.txt").exists() or (moved_away / "a.jsonl").exists()


def test_a_kept_parent_swapped_for_a_link_between_removals_is_not_used(
    fake_home, outside: Path
) -> None:
    """A batch's removals keep their parents' cursors open (rmtree.Parents):
    a parent moved away and replaced by a link after one removal must not be
    used for the next, neither the kept cursor (it now holds a directory no
    path of the session names) nor the link."""
    area = fake_home.claude / "file-history"
    (area / "one").mkdir(parents=True)
    (area / "two").mkdir()
    (area / "two" / "f.txt").write_text("the session's")
    (outside / "victim" / "two").mkdir()
    (outside / "victim" / "two" / "g.txt").write_text("precious\n")
    before = tree_state(outside)
    config = fake_home.claude
    parents = rmtree.Parents()
    try:
        first = SessionRemoval("claude", "a", dry_run=False, trash=None, parents=parents)
        first.remove_path(art(config, "file-history/one"))
        assert not (area / "one").exists() and first.removed == [str(area / "one")]
        moved = fake_home.root / "moved-away"
        os.rename(area, moved)
        os.symlink(outside / "victim", area)
        second = SessionRemoval("claude", "b", dry_run=False, trash=None, parents=parents)
        second.remove_path(art(config, "file-history/two"))
    finally:
        parents.close()
    assert (moved / "two" / "f.txt").exists(), "the kept cursor of a moved parent was used"
    assert tree_state(outside) == before, "the removal followed the swapped-in link"
    assert second.residuals == [str(area / "two")] and second.removed == []


def test_a_directory_replaced_by_another_mid_removal_is_left_for_next_run(
    root: Path, fake_home, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tree(root / "sess")
    target = root / "sess" / "sub"
    swaps: list[str] = []

    def replace(path: str) -> None:
        if path == str(target) and not swaps:
            os.rename(target, fake_home.root / "moved-away")
            target.mkdir()
            (target / "appeared.txt").write_text("not what was looked at")
            swaps.append(path)

    monkeypatch.setattr(rmtree, "_before_leaf", replace)
    with pytest.raises(RemovalError, match="replaced while being walked"):
        remover().remove_path(art(root, "sess"))
    assert swaps, "SETUP INVALID: the swap never happened"
    assert (target / "appeared.txt").exists()
    assert sorted(os.listdir(root / "sess")) == ["sub"]


def test_a_directory_moved_away_mid_walk_stops_the_way_back_up(
    root: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tree(root / "sess")
    before = tree_state(outside)
    moved: list[str] = []

    def move_ancestor(path: str) -> None:
        # Deep inside, the directory above is moved out of the root: going
        # back up by ".." now leads elsewhere, and the walk must stop.
        if path == str(root / "sess" / "sub" / "deeper" / "c.bin") and not moved:
            os.rename(root / "sess" / "sub", outside / "sub")
            moved.append(path)

    monkeypatch.setattr(rmtree, "_before_leaf", move_ancestor)
    with pytest.raises(RemovalError, match="moved while being walked"):
        remover().remove_path(art(root, "sess"))
    assert moved, "SETUP INVALID: nothing was moved"
    assert (root / "sess").is_dir()
    # Everything that was outside is as it was; `outside` itself and what
    # the seam moved into it aside.
    moved_in = str(outside / "sub")

    def untouched(state: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in state.items() if k != str(outside) and not k.startswith(moved_in)}

    assert untouched(tree_state(outside)) == untouched(before) and len(before) > 1


def test_a_directory_on_another_file_system_is_left_and_reported(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tree(root / "sess")
    mount = root / "sess" / "sub"
    faked: list[str] = []

    def fake_mount(path: str, mount_id: int) -> int:
        if path == str(mount) or path.startswith(str(mount) + "/"):
            faked.append(path)
            return mount_id + 1
        return mount_id

    monkeypatch.setattr(rmtree, "_mount_id_override", fake_mount)
    r = remover()
    r.remove_path(art(root, "sess"))
    assert faked, "SETUP INVALID: the mount was never looked at"
    assert r.residuals == [str(mount)]
    assert (mount / "b.txt").read_text() == "y" * 20 and (mount / "deeper" / "c.bin").exists()
    assert not (root / "sess" / "a.jsonl").exists(), "the rest of the session goes"
    assert str(root / "sess") not in r.removed

    # On the way to a leaf, another file system also means residual.
    r2 = remover()
    r2.remove_path(art(root, "sess/sub/b.txt"))
    assert r2.residuals == [str(mount / "b.txt")]
    assert (mount / "b.txt").exists()


@pytest.fixture
def bind_mount(outside: Path) -> Iterator[Callable[[Path], None]]:
    """Bind-mounts `outside/file.txt` over a path (unmounted afterwards):
    a real mount point, which the mount-id seam cannot make one of a file."""
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    mounted: list[Path] = []

    def mount(over: Path) -> None:
        done = subprocess.run(
            ["mount", "--bind", str(outside / "file.txt"), str(over)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
        mounted.append(over)

    yield mount
    for over in reversed(mounted):
        subprocess.run(["umount", "-l", str(over)], check=False)


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_file_that_is_a_mount_point_is_left_and_reported(
    root: Path, outside: Path, bind_mount: Callable[[Path], None], dry_run: bool
) -> None:
    """A real removal unlinks a file without looking at its mount (the
    kernel refuses a mount point); a dry run looks, and says the same."""
    make_tree(root / "sess")
    over = root / "sess" / "sub" / "b.txt"
    bind_mount(over)
    leaf = root / "leaf.txt"
    leaf.write_text("a leaf of its own")
    bind_mount(leaf)
    r = remover(dry_run=dry_run)
    r.remove_path(art(root, "sess"))
    r.remove_path(art(root, "leaf.txt"))
    assert r.residuals == [str(over), str(leaf)]
    assert over.read_text() == leaf.read_text() == "also precious\n"
    assert (outside / "file.txt").read_text() == "also precious\n"
    assert r.removed == [], "a session dir holding a mount point stays"
    if dry_run:
        assert (root / "sess" / "a.jsonl").exists()
    else:
        assert not (root / "sess" / "a.jsonl").exists(), "the rest of the session goes"
        assert sorted(os.listdir(root / "sess")) == ["sub"]
        assert os.listdir(root / "sess" / "sub") == ["b.txt"]


def test_a_directory_mounted_over_after_it_was_listed_is_left(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a mount id check on entry alone would miss: `sub` is on the
    root's mount when listed, and on another once the walk stands in it (a
    directory bound onto itself keeps its (st_dev, st_ino))."""
    make_tree(root / "sess")
    mount = str(root / "sess" / "sub")
    looks: list[str] = []

    def mounted_after_listing(path: str, mount_id: int) -> int:
        if path == mount:
            looks.append(path)
            return mount_id if len(looks) == 1 else mount_id + 1
        return mount_id

    monkeypatch.setattr(rmtree, "_mount_id_override", mounted_after_listing)
    r = remover()
    r.remove_path(art(root, "sess"))
    if len(looks) < 2:
        pytest.fail("SETUP INVALID: the walk never looked at the directory it stood in")
    assert r.residuals == [mount]
    assert (root / "sess" / "sub" / "b.txt").exists() and (
        root / "sess" / "sub" / "deeper"
    ).is_dir()
    assert sorted(os.listdir(root / "sess")) == ["sub"]


def test_mount_ids_tell_mounts_apart_where_st_dev_may_not() -> None:
    """statx's mount id and /proc's agree; a mount point is on its own
    mount, seen by name from its parent or by a descriptor in it."""
    from agentkeep import mounts

    dev = os.open("/dev", os.O_RDONLY | os.O_DIRECTORY)
    try:
        shm = mounts.mount_id("shm", dir_fd=dev, follow_symlinks=False)
        assert shm == mounts._by_fdinfo("shm", dev, False) == mounts.mount_id("/dev/shm")
        assert mounts.mount_id(dev) == mounts._by_fdinfo(dev, None, True) != shm
    finally:
        os.close(dev)
    assert mounts.mount_id("/proc") != mounts.mount_id("/")
    with pytest.raises(FileNotFoundError):
        mounts.mount_id("/nonexistent-agentkeep-test")


def test_a_ten_thousand_deep_tree_with_bounded_descriptors(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    depth = 10_000
    (root / "deep").mkdir()
    fd = os.open(root / "deep", os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    leaf = os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(leaf, b"12345")
    os.close(leaf)
    os.close(fd)

    baseline = len(os.listdir("/proc/self/fd"))
    counts: list[int] = []

    def count_fds(path: str) -> None:
        counts.append(len(os.listdir("/proc/self/fd")))

    monkeypatch.setattr(rmtree, "_before_leaf", count_fds)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # With one descriptor per level this would run out long before the bottom.
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(baseline + 64, hard), hard))
    try:
        r = remover()
        r.remove_path(art(root, "deep"))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert len(counts) >= depth, "SETUP INVALID: the walk did not visit every level"
    assert not (root / "deep").exists()
    assert r.bytes == 5
    assert max(counts) - baseline <= 8, f"{max(counts) - baseline} descriptors open at once"


def test_a_hard_link_to_an_outside_file_leaves_that_file_alone(root: Path, outside: Path) -> None:
    (root / "sess").mkdir()
    os.link(outside / "file.txt", root / "sess" / "hard")
    before = tree_state(outside)
    assert os.stat(outside / "file.txt").st_nlink == 2
    remover().remove_path(art(root, "sess"))
    assert not (root / "sess").exists()
    assert os.stat(outside / "file.txt").st_nlink == 1
    assert tree_state(outside) == before


def test_names_with_newlines_and_invalid_utf8(root: Path) -> None:
    broot = os.fsencode(root)
    odd_dir = b"sess\n\xff\xfe"
    os.mkdir(broot + b"/" + odd_dir)
    for name in (b"new\nline", b"bad\xff\xfe.jsonl", b"-rf", b" lead"):
        with open(broot + b"/" + odd_dir + b"/" + name, "wb") as f:
            f.write(b"abc")
    os.mkdir(broot + b"/" + odd_dir + b"/\xc3(")
    with open(broot + b"/odd\xfffile\n", "wb") as f:
        f.write(b"z")
    r = remover()
    r.remove_path(art(root, odd_dir))
    r.remove_path(art(root, b"odd\xfffile\n"))
    assert os.listdir(broot) == []
    assert r.bytes == 13
    assert [os.fsencode(p) for p in r.removed] == [
        broot + b"/" + odd_dir,
        broot + b"/odd\xfffile\n",
    ]


def test_a_failure_half_way_removes_the_rest_and_a_second_run_finishes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tree(root / "sess")
    blocked = root / "sess" / "sub" / "b.txt"
    hits: list[str] = []

    def deny(path: str) -> None:
        if path == str(blocked):
            hits.append(path)
            # Root is not stopped by modes, so the refusal is forced here.
            raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(rmtree, "_before_leaf", deny)
    r = remover()
    with pytest.raises(RemovalError) as raised:
        r.remove_path(art(root, "sess"))
    assert hits, "SETUP INVALID: the refused path was never reached"
    assert str(blocked) in str(raised.value) and "PermissionError" in str(raised.value)
    assert blocked.exists()
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert left == ["sess", "sess/sub", "sess/sub/b.txt"], "everything else should be gone"
    assert r.removed == []

    monkeypatch.setattr(rmtree, "_before_leaf", None)
    again = remover()
    again.remove_path(art(root, "sess"))
    assert not (root / "sess").exists()
    assert again.removed == [str(root / "sess")]


def test_a_dry_run_changes_nothing_and_counts_bytes(root: Path) -> None:
    nbytes = make_tree(root / "sess")
    os.link(root / "sess" / "a.jsonl", root / "sess" / "sub" / "same-inode")
    os.symlink("/etc/passwd", root / "sess" / "link")
    (root / "sess" / "ro").mkdir(mode=0o500)
    before = tree_state(root)
    r = remover(dry_run=True)
    r.remove_path(art(root, "sess"))
    assert tree_state(root) == before
    assert r.bytes == nbytes + len("/etc/passwd"), "each inode once, a link as its own size"
    assert r.removed == [str(root / "sess")]


def remove_as(user: int | None, root: Path, leaf: Path) -> str:
    """Remove `leaf` in a forked child running as `user` (the interpreter
    cannot be exec'd as another user here: it lies under /root)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read)
            if user is not None:
                os.setgroups([])
                os.setgid(user)
                os.setuid(user)
            r = SessionRemoval("claude", "s", dry_run=False, trash=None)
            try:
                r.remove_path(art(root, leaf.name))
                message = "removed"
            except RemovalError as exc:
                message = f"RemovalError: {exc}"
            os.write(write, message.encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        out = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return out


def test_modes_as_an_ordinary_user(fake_home) -> None:
    """As an ordinary user (nobody, when the tests run as root, since modes
    do not stop root): a read-only directory of the user's own is emptied; a
    directory of another user's stops the removal with a real PermissionError
    after everything else went."""
    as_root = os.geteuid() == 0
    user = 65534 if as_root else None
    base = Path(tempfile.mkdtemp(prefix="ak-modes-", dir="/tmp"))
    try:
        readonly = base / "ro-sess"
        (readonly / "sub").mkdir(parents=True)
        (readonly / "sub" / "f").write_text("x")
        (readonly / "g").write_text("y")
        mixed = base / "mixed-sess"
        (mixed / "theirs").mkdir(parents=True)
        (mixed / "theirs" / "t").write_text("not yours")
        (mixed / "a.txt").write_text("a")
        (mixed / "z.txt").write_text("z")
        if as_root:
            for dirpath, dirnames, filenames in os.walk(base):
                for name in [*dirnames, *filenames, ""]:
                    path = os.path.join(dirpath, name)
                    if "theirs" not in path:
                        os.chown(path, 65534, 65534)
        else:
            (mixed / "theirs").chmod(0o500)
        (readonly / "sub").chmod(0o500)
        readonly.chmod(0o555)

        assert remove_as(user, base, readonly) == "removed"
        assert not readonly.exists()
        out = remove_as(user, base, mixed)
        assert out.startswith("RemovalError:") and "PermissionError" in out, out
        assert str(mixed / "theirs" / "t") in out
        assert (mixed / "theirs" / "t").read_text() == "not yours"
        assert sorted(os.listdir(mixed)) == ["theirs"]
    finally:
        if (base / "mixed-sess" / "theirs").exists():
            (base / "mixed-sess" / "theirs").chmod(0o700)
        shutil.rmtree(base)


def test_remove_tree_at(root: Path, outside: Path) -> None:
    make_tree(root / "sess")
    os.symlink(outside / "victim", root / "sess" / "link")
    before = tree_state(outside)
    assert remove_tree_at(root, "sess") == []
    assert not (root / "sess").exists()
    assert tree_state(outside) == before
    with pytest.raises(RemovalError):
        remove_tree_at(root, "../outside")
