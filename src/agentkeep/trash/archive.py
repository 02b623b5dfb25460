"""An entry's files packed into one zstd-compressed POSIX (pax) tar, which
`tar --zstd -tvf` reads (trash.unpack reads it back): every file,
directory, link (a second name of a file as a hard link to the first) and
FIFO but entry.json, with its mode, mtime and atime to the nanosecond (pax
records), in pre-order, so a directory gets its mode and times once
everything is back inside it.

pack() reads without moving atimes (O_NOATIME; a link's atime is put back)
and refuses what it could not give back as it was (Unpackable): a socket, a
device, a file of another user, anything it cannot read.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, BinaryIO

import zstandard

from agentkeep.disk import DirCursor
from agentkeep.fsio import file_kind

LEVEL = 3  # zstd's default: on real sessions near 9's ratio at 4x its speed
ENCODING = "utf-8"
_BLOCK = 512
_RECORD = 20 * _BLOCK
_CHUNK = 1 << 20
_USTAR_SIZE = 8**11
_USTAR_TIME = 8**11 - 1
REGTYPE, LNKTYPE, SYMTYPE = b"0", b"1", b"2"
DIRTYPE, FIFOTYPE, XHDTYPE = b"5", b"6", b"x"
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)
_NS = 1_000_000_000


class Unpackable(Exception):
    """The entry holds something an archive would not give back as it was."""


class BadArchive(Exception):
    """An archive that is not one agentkeep wrote, or is damaged."""


@dataclass
class Packed:
    """What pack() wrote: the files' bytes, and the tar's bytes (what the
    compressed stream holds)."""

    original: int = 0
    tar_bytes: int = 0


def pax_time(ns: int) -> str:
    """A time in nanoseconds as a pax decimal, exact."""
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{ns // _NS}.{ns % _NS:09d}"


def read_back(archive: IO[bytes]) -> int:
    """The bytes the compressed stream holds, every frame's checksum
    checked. Raises BadArchive."""
    total = 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(archive, closefd=False) as reader:
            while chunk := reader.read(_CHUNK):
                total += len(chunk)
    except zstandard.ZstdError as exc:
        raise BadArchive(str(exc)) from exc
    return total


def pack(
    entry_fd: int, names: list[str], out: BinaryIO, after_each: Callable[[], None] = lambda: None
) -> Packed:
    """Write the trees `names` (in the directory of `entry_fd`) into `out`,
    compressed, calling `after_each` after each member. Raises Unpackable,
    or OSError."""
    packed = Packed()
    compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)
    with compressor.stream_writer(out, closefd=False) as writer:
        tar = _TarWriter(writer)
        for name in names:
            with DirCursor(os.dup(entry_fd), "") as cursor:
                for path, st, member in _walk(cursor, name):
                    packed.original += _add(tar, cursor, path, st, member)
                    after_each()
        tar.close()
        packed.tar_bytes = tar.written
    return packed


def _walk(cursor: DirCursor, top: str) -> Iterator[tuple[str, os.stat_result, str]]:
    """(name in the cursor's directory, its lstat, member path) of `top` and
    everything below it, in pre-order; the cursor stands in each name's
    directory when it is given. Iterative: a tree may be thousands deep."""
    st = os.stat(top, dir_fd=cursor.fd, follow_symlinks=False)
    yield top, st, top
    if not stat.S_ISDIR(st.st_mode):
        return
    cursor.down(top, (st.st_dev, st.st_ino))
    stack = [sorted(os.listdir(cursor.fd), reverse=True)]
    prefix = [top]
    while stack:
        if not stack[-1]:
            stack.pop()
            prefix.pop()
            if stack:
                cursor.up()
            continue
        name = stack[-1].pop()
        st = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
        member = "/".join([*prefix, name])
        yield name, st, member
        if stat.S_ISDIR(st.st_mode):
            cursor.down(name, (st.st_dev, st.st_ino))
            stack.append(sorted(os.listdir(cursor.fd), reverse=True))
            prefix.append(name)
    cursor.up()


def _add(tar: _TarWriter, cursor: DirCursor, name: str, st: os.stat_result, member: str) -> int:
    """One member; the bytes of its content."""
    if st.st_uid != os.getuid():
        raise Unpackable(f"{member} belongs to another user (uid {st.st_uid})")
    kind = stat.S_IFMT(st.st_mode)
    if kind == stat.S_IFDIR:
        tar.member(member, st, DIRTYPE)
    elif kind == stat.S_IFLNK:
        tar.member(member, st, SYMTYPE, _link_target(cursor, name, st))
    elif kind == stat.S_IFIFO:
        tar.member(member, st, FIFOTYPE)
    elif kind != stat.S_IFREG:
        raise Unpackable(f"{member} is {file_kind(st.st_mode)}")
    elif st.st_nlink > 1 and (st.st_dev, st.st_ino) in tar.seen:
        tar.member(member, st, LNKTYPE, tar.seen[(st.st_dev, st.st_ino)])
    else:
        if st.st_nlink > 1:
            tar.seen[(st.st_dev, st.st_ino)] = member
        _add_file(tar, cursor, name, st, member)
        return st.st_size
    return 0


def _link_target(cursor: DirCursor, name: str, st: os.stat_result) -> str:
    """A link's target, its atime put back (O_NOATIME is for files only)."""
    target = os.readlink(name, dir_fd=cursor.fd)
    os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=cursor.fd, follow_symlinks=False)
    return target


def _add_file(
    tar: _TarWriter, cursor: DirCursor, name: str, st: os.stat_result, member: str
) -> None:
    try:
        fd = os.open(name, _READ, dir_fd=cursor.fd)
    except PermissionError as exc:
        raise Unpackable(f"{member} cannot be read: {exc.strerror}") from exc
    try:
        now = os.fstat(fd)
        if (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns):
            raise OSError(errno.ESTALE, "changed while packed", member)
        tar.member(member, st, REGTYPE)
        left = st.st_size
        while left:
            chunk = os.read(fd, min(left, _CHUNK))
            if not chunk:
                raise OSError(errno.ESTALE, "cut short while packed", member)
            tar.write(chunk)
            left -= len(chunk)
        tar.pad()
    finally:
        os.close(fd)


class _TarWriter:
    """POSIX tar members written straight to a stream: a pax header (path,
    times to the nanosecond, link target; the size past ustar's 8 GiB) and
    a ustar header each (tarfile's writer was most of packing's time)."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.written = 0
        self._size = 0
        # The member each file of several names was first packed as.
        self.seen: dict[tuple[int, int], str] = {}

    def write(self, data: bytes) -> None:
        """Raw bytes: a member's content, or padding."""
        self.out.write(data)
        self.written += len(data)
        self._size += len(data)

    def pad(self) -> None:
        """After a member's content: up to the next 512-byte block."""
        if self._size % _BLOCK:
            self.write(b"\0" * (_BLOCK - self._size % _BLOCK))

    def member(self, path: str, st: os.stat_result, kind: bytes, link: str = "") -> None:
        """The headers of one member (its content, if any, follows)."""
        size = st.st_size if kind == REGTYPE else 0
        records = [("path", path), ("mtime", pax_time(st.st_mtime_ns))]
        records += [("atime", pax_time(st.st_atime_ns))]
        if link:
            records.append(("linkpath", link))
        if size >= _USTAR_SIZE:
            records.append(("size", str(size)))
        pax = _pax_records(records)
        self.write(_ustar(b"././@PaxHeader", 0o600, len(pax), 0, XHDTYPE))
        self._size = 0
        self.write(pax)
        self.pad()
        mtime = min(max(st.st_mtime_ns // _NS, 0), _USTAR_TIME)
        name = path.encode(ENCODING, "surrogateescape")[:100]
        header = _ustar(
            name, stat.S_IMODE(st.st_mode), size if size < _USTAR_SIZE else 0, mtime, kind
        )
        self.write(header)
        self._size = 0

    def close(self) -> None:
        """The two zero blocks that end an archive, and up to a whole record."""
        self.write(b"\0" * (2 * _BLOCK))
        if self.written % _RECORD:
            self.write(b"\0" * (_RECORD - self.written % _RECORD))


def _pax_records(records: list[tuple[str, str]]) -> bytes:
    """A pax extended header's records, each "<length> <key>=<value>\\n";
    values that are not UTF-8 (names are bytes) under hdrcharset=BINARY."""
    try:
        encoded = [(key, value.encode("utf-8")) for key, value in records]
        out = []
    except UnicodeEncodeError:
        encoded = [(key, value.encode(ENCODING, "surrogateescape")) for key, value in records]
        out = [b"21 hdrcharset=BINARY\n"]
    for key, value in encoded:
        body = b" " + key.encode("ascii") + b"=" + value + b"\n"
        length = len(body) + len(str(len(body)))
        while length != len(body) + len(str(length)):
            length = len(body) + len(str(length))
        out.append(str(length).encode("ascii") + body)
    return b"".join(out)


def _ustar(name: bytes, mode: int, size: int, mtime: int, kind: bytes) -> bytes:
    """A ustar header block (the pax header before it has the truths that
    do not fit: the whole path, the times, the link)."""
    block = b"".join(
        [
            name.ljust(100, b"\0"),
            b"%07o\0" % mode,
            b"%07o\0" % 0,  # uid and gid: whoever restores owns what it makes
            b"%07o\0" % 0,
            b"%011o\0" % size,
            b"%011o\0" % mtime,
            b" " * 8,  # the checksum counts its own field as spaces
            kind,
            b"\0" * 100,
            b"ustar\x0000",
            b"\0" * 247,
        ]
    )
    checksum = b"%06o\0 " % sum(block)
    return block[:148] + checksum + block[156:]
