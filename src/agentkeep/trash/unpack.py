"""Unpacking an archive trash.archive wrote back into the entry's directory:
each file is made under a temporary name outside the tree, with its mode
and times, then linked in, so a name in the tree is always a whole file; a
name already there (left by a killed packing or unpacking) is kept.
Directories get their modes and times once everything is back inside.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from typing import IO

import zstandard

from agentkeep.disk import DirCursor, exists_at
from agentkeep.trash.archive import ENCODING, BadArchive

_NS = 1_000_000_000


def _ns_of(text: str) -> int:
    """The nanoseconds of a pax decimal (pax_time's inverse)."""
    sign, text = (-1, text[1:]) if text.startswith("-") else (1, text)
    whole, _, frac = text.partition(".")
    if not whole.isdigit() or (frac and not frac.isdigit()):
        raise BadArchive(f"not a time: {text!r}")
    return sign * (int(whole) * _NS + int(frac[:9].ljust(9, "0")))


def _members(archive: IO[bytes]) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
    """The members of an archive pack() wrote, each with its content's stream
    (files only; read before the next). BadArchive for a damaged one."""
    reader = zstandard.ZstdDecompressor().stream_reader(archive, closefd=False)
    try:
        with reader, tarfile.open(fileobj=reader, mode="r|", encoding=ENCODING) as tar:
            for info in tar:
                yield info, tar.extractfile(info) if info.isreg() else None
    except (tarfile.TarError, zstandard.ZstdError, EOFError) as exc:
        raise BadArchive(str(exc)) from exc


def _check_name(name: str) -> list[str]:
    """The components of a member's name; BadArchive for one that could
    walk out of the entry or onto its entry.json."""
    parts = name.split("/")
    if any(p in ("", ".", "..") or "\0" in p for p in parts) or parts[0] == "entry.json":
        raise BadArchive(f"a member named {name!r}")
    return parts


def _times_of(info: tarfile.TarInfo) -> tuple[int, int]:
    """(atime_ns, mtime_ns) a member was packed with."""
    pax = info.pax_headers
    mtime = _ns_of(pax["mtime"]) if "mtime" in pax else int(info.mtime) * _NS
    return (_ns_of(pax["atime"]) if "atime" in pax else mtime), mtime


class _Unpacking:
    """One unpack: a cursor in the entry's tree and the directories it
    stands in, each with its member (None: made for a member below it)."""

    def __init__(self, entry_fd: int, tmp_fd: int, cursor: DirCursor) -> None:
        self.entry_fd = entry_fd
        self.tmp_fd = tmp_fd
        self.cursor = cursor
        self.dirs: list[tuple[str, tarfile.TarInfo | None]] = []
        self.written = 0

    def run(self, archive: IO[bytes], after_each: Callable[[], None]) -> None:
        """Unpack every member, calling `after_each` before each."""
        for info, data in _members(archive):
            after_each()
            parts = _check_name(info.name)
            self._go_to(parts[:-1])
            leaf = parts[-1]
            if info.isdir():
                self._enter(leaf, info)
            elif not exists_at(leaf, self.cursor.fd):
                self._put(leaf, info, data)
                self.written += 1
        self._go_to([])

    def _go_to(self, parts: list[str]) -> None:
        """The cursor up to what it shares with `parts` (each directory left
        gets its mode and times), then down the rest."""
        shared = 0
        while shared < min(len(parts), len(self.dirs)) and self.dirs[shared][0] == parts[shared]:
            shared += 1
        while len(self.dirs) > shared:
            name, info = self.dirs.pop()
            if info is not None:
                os.utime(self.cursor.fd, ns=_times_of(info))
            self.cursor.up()
            if info is not None:
                # Its own mode once it is left: one without search
                # permission would let nobody out of it.
                os.chmod(name, info.mode, dir_fd=self.cursor.fd)
        for name in parts[shared:]:
            self._enter(name, None)

    def _enter(self, name: str, info: tarfile.TarInfo | None) -> None:
        try:
            os.mkdir(name, 0o700, dir_fd=self.cursor.fd)
        except FileExistsError:
            pass
        try:
            self.cursor.down(name)
        except NotADirectoryError as exc:
            raise BadArchive(f"{self.cursor.path(name)} is in the way of a directory") from exc
        # Writable by us until it is left (a killed unpack may have set its mode).
        mode = stat.S_IMODE(os.fstat(self.cursor.fd).st_mode)
        if mode & stat.S_IRWXU != stat.S_IRWXU:
            os.fchmod(self.cursor.fd, mode | stat.S_IRWXU)
        self.dirs.append((name, info))

    def _put(self, leaf: str, info: tarfile.TarInfo, data: IO[bytes] | None) -> None:
        """One file, link or FIFO at `leaf`: made under a temporary name
        with its mode and times, then linked in (never over a name)."""
        if info.islnk():
            self._hard_link(leaf, info)
            return
        tmp = "member"
        unlink_at(tmp, self.tmp_fd)
        if info.issym():
            os.symlink(info.linkname, tmp, dir_fd=self.tmp_fd)
        elif info.isfifo():
            os.mkfifo(tmp, 0o600, dir_fd=self.tmp_fd)
            os.chmod(tmp, info.mode, dir_fd=self.tmp_fd)
        elif info.isreg() and data is not None:
            _write(tmp, self.tmp_fd, data, info)
        else:
            raise BadArchive(f"{info.name}: a member of an unknown kind")
        os.utime(tmp, ns=_times_of(info), dir_fd=self.tmp_fd, follow_symlinks=False)
        os.link(tmp, leaf, src_dir_fd=self.tmp_fd, dst_dir_fd=self.cursor.fd, follow_symlinks=False)
        os.unlink(tmp, dir_fd=self.tmp_fd)

    def _hard_link(self, leaf: str, info: tarfile.TarInfo) -> None:
        """A second name of a file unpacked before it, found from the entry's
        directory down."""
        parts = _check_name(info.linkname)
        with DirCursor(os.dup(self.entry_fd), "") as there:
            for name in parts[:-1]:
                there.down(name)
            os.link(
                parts[-1],
                leaf,
                src_dir_fd=there.fd,
                dst_dir_fd=self.cursor.fd,
                follow_symlinks=False,
            )


def unpack(
    archive: IO[bytes], entry_fd: int, tmp_fd: int, after_each: Callable[[], None] = lambda: None
) -> int:
    """Unpack an archive pack() wrote into the directory of `entry_fd`, each
    file made in the (empty) directory of `tmp_fd` first; the members
    written (those already there are kept). BadArchive, or OSError."""
    with DirCursor(os.dup(entry_fd), "") as cursor:
        unpacking = _Unpacking(entry_fd, tmp_fd, cursor)
        unpacking.run(archive, after_each)
    return unpacking.written


def _write(name: str, dir_fd: int, data: IO[bytes], info: tarfile.TarInfo) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        while chunk := data.read(1 << 20):
            f.write(chunk)
        f.flush()
        if f.tell() != info.size:
            raise BadArchive(f"{info.name}: {f.tell()} bytes of {info.size}")
        os.fchmod(fd, info.mode)


def unlink_at(name: str, dir_fd: int) -> None:
    """Unlink `name` in the directory `dir_fd`, if it is there."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
