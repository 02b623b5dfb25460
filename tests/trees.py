"""What a tree on disk is, to compare before and after: every entry's mode,
size, mtime and content (a hash, or a link's target), links not followed."""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
import time
from collections.abc import Iterable
from pathlib import Path

import zstandard

EntryState = tuple[int, int, int, str]


def entry_state(path: Path) -> EntryState | None:
    """(mode, size, mtime_ns, content hash or link target) of one path, not
    following a link; None when it is missing."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        content = "-> " + os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        content = hashlib.sha256(path.read_bytes()).hexdigest()
    else:
        content = ""
    return (st.st_mode, st.st_size, st.st_mtime_ns, content)


def paths_state(paths: Iterable[Path]) -> dict[str, EntryState | None]:
    return {str(p): entry_state(p) for p in paths}


def tree_state(*roots: Path, skip: Iterable[Path] = ()) -> dict[str, EntryState | None]:
    """entry_state of each root and everything below it (links not
    followed), but not of the directories in `skip` or below them."""
    skipped = set(skip)
    found: list[Path] = list(roots)
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if here / d not in skipped]
            found += [here / name for name in [*dirnames, *filenames]]
    return paths_state(found)


def file_times(root: Path) -> dict[str, tuple[int, int]]:
    """Every file below `root` with (size, mtime_ns), SQLite's -wal/-shm
    aside (a read-only open may create them: the one allowed exception)."""
    found = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if not name.endswith(("-wal", "-shm")):
                st = os.lstat(os.path.join(dirpath, name))
                found[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime_ns)
    return found


def settle(dirs: Iterable[str | os.PathLike[str]]) -> None:
    """Date the directories' last change an hour back, as on a home at rest:
    none is so recently changed that its mtime cannot vouch for it
    (disk.signed), which makes the next look list it again whatever."""
    old = time.time() - 3600
    for d in dirs:
        os.utime(d, (old, old))


def kept_files(entry: Path) -> dict[str, bytes]:
    """What a trash entry keeps, file by file (path in the entry -> bytes):
    in roots/ and rows.sqlite, and in its archive once it is compressed
    (read as a person's tar would read it)."""
    found = {}
    for path, data in _plain_files(entry):
        found[path] = data
    archive = entry / "entry.tar.zst"
    if archive.exists():
        with (
            archive.open("rb") as f,
            zstandard.ZstdDecompressor().stream_reader(f) as stream,
            tarfile.open(fileobj=stream, mode="r|") as tar,
        ):
            for member in tar:
                data = tar.extractfile(member) if member.isreg() else None
                if data is not None:
                    found[member.name] = data.read()
    return found


def _plain_files(entry: Path) -> Iterable[tuple[str, bytes]]:
    for dirpath, _dirs, names in os.walk(entry):
        for name in names:
            path = Path(dirpath) / name
            rel = str(path.relative_to(entry))
            if rel not in ("entry.json", "entry.tar.zst") and stat.S_ISREG(path.lstat().st_mode):
                yield rel, path.read_bytes()
