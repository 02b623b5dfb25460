"""Reading, listing and replacing files safely: each rule kept once, here.

- A read never blocks on a FIFO (O_NONBLOCK) and only a regular file is
  read (checked on the open descriptor, so nothing swapped in counts).
- A read does not follow a link planted at the name unless asked to
  (O_NOFOLLOW), and moves no atime where the kernel allows it (O_NOATIME,
  invariant 10: reading never changes what it reads).
- A read is bounded when its caller gives a limit: past it, TooLarge.
- A listing moves no atime either.
- A file is replaced whole or not at all: a locked temporary file beside
  it, fsynced, renamed over it, and the directory fsynced.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import structlog

log = structlog.get_logger("agentkeep.fsio")

StrPath = str | os.PathLike[str]

# A state, config or settings file bigger than this is not one agentkeep or
# a person wrote.
SMALL_FILE_LIMIT = 64 << 20

_NOATIME = getattr(os, "O_NOATIME", 0)
# Listing a directory without following a link at it (ELOOP instead).
LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def open_noatime(path: StrPath, flags: int, *, dir_fd: int | None = None) -> int:
    """os.open with O_NOATIME where the kernel allows it (the caller owns
    the file, or is privileged), plainly otherwise: with relatime, even a
    listing moves an atime, and reading must not change what it reads."""
    if _NOATIME:
        try:
            return os.open(path, flags | _NOATIME | os.O_CLOEXEC, dir_fd=dir_fd)
        except PermissionError:
            pass  # EPERM: not ours to read without atime; EACCES fails again below
    return os.open(path, flags | os.O_CLOEXEC, dir_fd=dir_fd)


# -- reading ------------------------------------------------------------------


class NotRegularFile(OSError):
    """A FIFO, socket, device, directory or link stands where a file belongs."""


class TooLarge(OSError):
    """A file is bigger than the limit it was read with: not what it should be."""


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words for an error message."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: StrPath, *, follow: bool = False) -> BinaryIO:
    """The regular file at `path`, open for reading (O_NONBLOCK: a FIFO
    cannot hang the open, and is refused once open). Without `follow`, a
    link at the name is refused. Raises FileNotFoundError, NotRegularFile,
    or OSError."""
    return os.fdopen(_regular_fd(path, follow), "rb")


def _regular_fd(path: StrPath, follow: bool) -> int:
    """open_regular()'s descriptor, read bare below (cheaper than a file object)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = open_noatime(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise NotRegularFile(errno.ELOOP, "a link, not a file", os.fspath(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, f"{file_kind(mode)}, not a file", os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


# The most a read asks the kernel for at a time (os.read allocates it).
_CHUNK = 1 << 20


def _read_fd(fd: int, limit: int | None) -> bytes:
    """Up to `limit` bytes (None: all) from `fd`, closed after."""
    chunks: list[bytes] = []
    try:
        while limit is None or limit > 0:
            chunk = os.read(fd, _CHUNK if limit is None else min(limit, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            limit = None if limit is None else limit - len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)  # one chunk is returned as it is, not copied


def read_regular(path: StrPath, *, limit: int | None = None, follow: bool = False) -> bytes:
    """The whole regular file at `path` (open_regular()); TooLarge past
    `limit` bytes, which are never all read."""
    data = _read_fd(_regular_fd(path, follow), None if limit is None else limit + 1)
    if limit is not None and len(data) > limit:
        raise TooLarge(errno.EFBIG, f"over {limit} bytes", os.fspath(path))
    return data


def open_quietly(path: StrPath) -> BinaryIO | None:
    """open_regular(path), or None when it cannot be opened."""
    try:
        return open_regular(path)
    except OSError:
        return None


def read_head(path: StrPath, limit: int) -> bytes | None:
    """Up to `limit` bytes from the start of the regular file at `path`
    (open_regular()); None when it cannot be read."""
    try:
        return _read_fd(_regular_fd(path, False), limit)
    except OSError:
        return None


def load_json(path: StrPath, limit: int) -> object:
    """The value of the JSON file at `path` (read_regular()): OSError when it
    cannot be read whole, ValueError when it is not JSON."""
    data = read_regular(path, limit=limit)
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc


def read_small_json(path: StrPath, limit: int) -> object:
    """load_json(), or None when it is missing, unreadable, bigger or
    malformed (logged when malformed)."""
    try:
        return load_json(path, limit)
    except OSError:
        return None
    except ValueError:
        log.info("malformed json skipped", path=os.fspath(path))
        return None


def denied(path: StrPath) -> OSError | None:
    """Why the file at `path` cannot be read when a permission (not its
    absence, not a link) stands in the way: what it says is then unknown."""
    try:
        open_regular(path).close()
    except (FileNotFoundError, NotADirectoryError, NotRegularFile):
        return None
    except OSError as exc:
        return exc
    return None


# -- listing ------------------------------------------------------------------


@contextmanager
def scandir(path: StrPath, *, follow: bool = False) -> Iterator[Iterator[os.DirEntry[str]]]:
    """os.scandir without moving the directory's atime, used inside the
    block. Entries' `path` is only their name (the listing is relative to a
    descriptor). Without `follow` a link at `path` fails (ELOOP)."""
    fd = open_noatime(path, (LIST_FLAGS & ~os.O_NOFOLLOW) if follow else LIST_FLAGS)
    try:
        with os.scandir(fd) as entries:
            yield entries
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry: `link` when it is a symbolic link, `dir` when a
    directory (for a link, only when listed with resolve_links: following a
    link moves its atime)."""

    name: str
    path: str
    link: bool
    dir: bool


def entries(
    directory: StrPath,
    *,
    resolve_links: bool = False,
    keep: Callable[[str], bool] | None = None,
    sort: bool = False,
) -> list[Entry]:
    """The entries of `directory` (listed()) whose names `keep` keeps; with
    `resolve_links` a link's `dir` is where it leads. OSError when
    `directory` cannot be listed."""
    prefix = os.fspath(directory).rstrip("/") + "/"
    found = [
        Entry(name, prefix + name, link, is_dir)
        for name, link, is_dir in listed(directory)
        if keep is None or keep(name)
    ]
    if sort:
        found.sort(key=lambda e: e.name)
    return [_resolved(e) for e in found] if resolve_links else found


def listed(directory: StrPath) -> Iterator[tuple[str, bool, bool]]:
    """(name, link, dir) of each entry of `directory`, listed through a link
    at it (what lies behind is reported as linked) without moving its atime
    or a stat (d_type). OSError when it cannot be listed."""
    with scandir(directory, follow=True) as listing:
        for item in listing:
            try:
                link, is_dir = item.is_symlink(), item.is_dir(follow_symlinks=False)
            except OSError:
                continue  # vanished while listed
            # One string per name, however many listings hold it.
            yield sys.intern(item.name), link, is_dir


def _resolved(entry: Entry) -> Entry:
    if not entry.link:
        return entry
    try:
        is_dir = stat.S_ISDIR(os.stat(entry.path).st_mode)
    except OSError:
        is_dir = False  # a dangling link
    return Entry(entry.name, entry.path, True, is_dir)


def entry_at(directory: StrPath, name: str) -> Entry | None:
    """The entry `name` of `directory` (lstat); None when there is none,
    OSError when it cannot be looked up."""
    path = os.path.join(directory, name)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return Entry(name, path, stat.S_ISLNK(st.st_mode), stat.S_ISDIR(st.st_mode))


def listed_names(directory: StrPath) -> list[str]:
    """The name of every entry of `directory` (listed through a link at it,
    without moving its atime); OSError when it cannot be listed."""
    fd = open_noatime(directory, LIST_FLAGS & ~os.O_NOFOLLOW)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def entry_names(directory: StrPath) -> list[str]:
    """listed_names(), none when `directory` cannot be listed."""
    try:
        return listed_names(directory)
    except OSError:
        return []


def entry_paths(directory: StrPath) -> list[str]:
    """The path of every entry of `directory` (entry_names())."""
    return [os.path.join(directory, name) for name in entry_names(directory)]


def list_problem(directory: StrPath) -> str | None:
    """Why `directory` (through a link at it) cannot be listed and looked
    into, or None when it can, is missing, or is no directory. Opening it
    checks read permission; a lookup of "." in it, search permission."""
    try:
        fd = open_noatime(directory, LIST_FLAGS & ~os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        os.stat(".", dir_fd=fd)
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        os.close(fd)
    return None


def unlisted(dirs: Iterable[StrPath]) -> dict[str, str]:
    """The directories of `dirs` that cannot be listed (path -> why), none
    below another of them (which is that one's doing)."""
    found: dict[str, str] = {}
    for path in sorted({os.fspath(d) for d in dirs}):
        if any(path.startswith(above.rstrip("/") + "/") for above in found):
            continue
        problem = list_problem(path)
        if problem is not None:
            found[path] = problem
    return found


def first_unlisted(path: StrPath) -> str | None:
    """The first directory at or below `path` (walked without following a
    link) that cannot be listed, or None."""
    stack = [os.fspath(path)]
    while stack:
        current = stack.pop()
        if list_problem(current) is not None:
            return current
        try:
            with scandir(current) as listing:
                stack += sorted(
                    (f"{current}/{e.name}" for e in listing if e.is_dir(follow_symlinks=False)),
                    reverse=True,
                )
        except OSError:
            continue  # gone meanwhile, or a link
    return None


# -- replacing ----------------------------------------------------------------

# The temporary names temporary() makes: `.<name>.<8 random>.tmp`.
TEMPORARY = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def replace(
    path: Path,
    data: bytes,
    mode: int = 0o600,
    *,
    before_rename: Callable[[Path], None] | None = None,
) -> None:
    """Put `data` at `path` whole or not at all, with permissions `mode`: a
    temporary file beside it (temporary()), fsynced, renamed over it, the
    directory fsynced; on a failure `path` stays as it was. `before_rename`
    is a test seam, called with the temporary file once it holds the data."""
    fd, tmp = temporary(path)
    try:
        # Renamed while still open, so still locked: statefiles.clear_stale()
        # never takes a temporary file whose writer is alive.
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            if before_rename is not None:
                before_rename(tmp)
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)  # the rename itself made durable
    finally:
        os.close(dfd)


def temporary(path: Path) -> tuple[int, Path]:
    """A new temporary file beside `path` (0600, TEMPORARY), open for
    writing and locked while open: its writer renames it over `path`
    before closing it, or removes it."""
    while True:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink:
                return fd, Path(name)
        except BaseException:
            os.close(fd)
            raise
        # statefiles.clear_stale() took it before our lock: another one.
        os.close(fd)
