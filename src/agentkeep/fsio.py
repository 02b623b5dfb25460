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
    """os.open with O_NOATIME where the kernel allows it (the caller owns the
    file, or is privileged), plainly otherwise: with relatime, even listing a
    directory moves its atime, and reading must not change what it reads."""
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


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words for an error message."""
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a link"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def open_regular(path: StrPath, *, follow: bool = False) -> BinaryIO:
    """The regular file at `path`, open for reading. O_NONBLOCK: a FIFO at
    the name cannot hang the open (and is refused once open). Without
    `follow`, a link at the name is refused (ELOOP becomes NotRegularFile).
    Raises FileNotFoundError, NotRegularFile, or OSError."""
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
    return os.fdopen(fd, "rb")


def read_regular(path: StrPath, *, limit: int | None = None, follow: bool = False) -> bytes:
    """The whole regular file at `path` (open_regular()); TooLarge when it
    holds more than `limit` bytes, which are never all read."""
    with open_regular(path, follow=follow) as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise TooLarge(errno.EFBIG, f"over {limit} bytes", os.fspath(path))
    return data


def open_quietly(path: StrPath) -> BinaryIO | None:
    """open_regular(path), or None when it is missing, a link, not a
    regular file, or cannot be opened."""
    try:
        return open_regular(path)
    except OSError:
        return None


def read_head(path: StrPath, limit: int) -> bytes | None:
    """Up to `limit` bytes from the start of the regular file at `path`
    (open_regular()); None when it cannot be read."""
    try:
        with open_regular(path) as f:
            return f.read(limit)
    except OSError:
        return None


def load_json(path: StrPath, limit: int) -> object:
    """The value of the JSON file at `path` (read_regular()). Raises OSError
    when it cannot be read whole (TooLarge past `limit` bytes), ValueError
    when it is not JSON."""
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
    """Why the file at `path` cannot be opened for reading, when something
    stands in the way (a permission) rather than its being missing or a
    link (which open_quietly never reads): what it says is then unknown."""
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
    """os.scandir without moving the directory's atime. Entries' `path` is
    only their name (the listing is relative to a descriptor): join it to
    `path` yourself. With follow=False a link at `path` fails (ELOOP) rather
    than being listed through. Entries must be used inside the block."""
    fd = open_noatime(path, (LIST_FLAGS & ~os.O_NOFOLLOW) if follow else LIST_FLAGS)
    try:
        with os.scandir(fd) as entries:
            yield entries
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry: `link` when the entry itself is a symbolic link,
    `dir` when it is a directory (for a link, only when listed with
    resolve_links: finding out where a link leads follows it, which moves
    the link's atime)."""

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
    """The entries of `directory` (listed()), only those whose names `keep`
    keeps (filtered as they are read); with `resolve_links` a link is
    stat'ed, its `dir` where it leads. Raises OSError when `directory`
    cannot be listed."""
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
    at it (so what lies behind it can be reported as linked) without moving
    its atime; the entry's own type (d_type) tells links and directories
    apart without a stat. Raises OSError when it cannot be listed."""
    with scandir(directory, follow=True) as listing:
        for item in listing:
            try:
                link, is_dir = item.is_symlink(), item.is_dir(follow_symlinks=False)
            except OSError:
                continue  # vanished while listed
            # One string for each name, however many listings of its
            # directory (made again as it changes) and indexes hold it.
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
    """The entry `name` of `directory`, looked up alone (lstat); None when
    there is none. Raises OSError when it cannot be looked up."""
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
    """Why `directory` cannot be listed and looked into (listed through a
    link at it), or None when it can, is missing, or is not a directory.
    Opening it to read its names takes read permission; looking up an
    entry takes search permission, which a lookup of "." relative to it
    checks (nothing is read: a big directory costs no more)."""
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
    """The directories of `dirs` that cannot be listed (path -> why), but
    none below another of them: what cannot be listed beneath one that
    cannot is that one's doing."""
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
    temporary file beside it (temporary()), fsynced, renamed over it, and the
    directory fsynced, so a reader or a crash sees the old file or the new
    one. The directory must exist. `before_rename` is a test seam (None in
    production), called with the temporary file once it holds the data.
    Nothing but the temporary file goes on a failure: a file already at
    `path` stays as it was."""
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
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)  # the rename itself made durable
    finally:
        os.close(dfd)


def temporary(path: Path) -> tuple[int, Path]:
    """A new temporary file beside `path` (mode 0600, named
    `.<name>.<8 random>.tmp`) for its next content, open for writing and
    locked for as long as the descriptor is open. Its writer renames it
    over `path` before closing it, or removes it."""
    while True:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink:
                return fd, Path(name)
        except BaseException:
            os.close(fd)
            raise
        # statefiles.clear_stale() took it between its making and its lock
        # (it locks before it removes): another one.
        os.close(fd)
