"""Which mount a file lies on, for invariant 6's "never crosses a mount point".

st_dev cannot tell: a bind mount of a directory on the same file system has
its parent's st_dev. The mount id can, read as systemd's
fd_is_mount_point() reads it: statx(2) STATX_MNT_ID (Linux 5.8+, through
libc: Python 3.11 has no os.statx), else the `mnt_id:` of
/proc/self/fdinfo/<fd>; off Linux, st_dev (every mount has its own, and
there are no bind mounts). When none can be read on Linux, MountUnknown:
a walk that cannot see mount points stops rather than guess.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
from collections.abc import Callable

_LINUX = sys.platform.startswith("linux")

# <linux/fcntl.h> and <linux/stat.h>; struct statx is 256 bytes, stx_mask
# (u32) at 0 and stx_mnt_id (u64) at 144.
_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_AT_NO_AUTOMOUNT = 0x800
_AT_EMPTY_PATH = 0x1000
_STATX_MNT_ID = 0x1000
_STATX_SIZE, _MNT_ID_AT = 256, 144
_O_PATH = getattr(os, "O_PATH", 0)


def _libc_statx() -> Callable[..., int] | None:
    if not _LINUX:
        return None
    try:
        func = ctypes.CDLL(None, use_errno=True).statx
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_char_p]
    func.restype = ctypes.c_int
    return func


_statx = _libc_statx()
# Cleared once the kernel answers statx without a mount id (before 5.8).
_statx_has_mnt_id = _statx is not None


class MountUnknown(OSError):
    """The mount a path lies on cannot be read here."""


def mount_id(path: str | int, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> int:
    """The id of the mount `path` lies on, called like os.stat: `path` is a
    name (relative to `dir_fd` when given) or an open descriptor. A mount
    point is on the mount it is the root of, not on its parent's. Raises
    OSError like os.stat (FileNotFoundError, ...), MountUnknown when no way
    to read it works. Automount points are not triggered."""
    if not _LINUX:
        return os.stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks).st_dev
    global _statx_has_mnt_id
    if _statx_has_mnt_id:
        found = _by_statx(path, dir_fd, follow_symlinks)
        if found is not None:
            return found
        _statx_has_mnt_id = False
    return _by_fdinfo(path, dir_fd, follow_symlinks)


def _by_statx(path: str | int, dir_fd: int | None, follow: bool) -> int | None:
    """statx's mount id; None when this kernel does not give one."""
    assert _statx is not None
    flags = _AT_NO_AUTOMOUNT | (0 if follow else _AT_SYMLINK_NOFOLLOW)
    if isinstance(path, int):
        fd, name, flags = path, b"", flags | _AT_EMPTY_PATH
    else:
        fd, name = (_AT_FDCWD if dir_fd is None else dir_fd), os.fsencode(path)
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    if _statx(fd, name, flags, _STATX_MNT_ID, buf) != 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            return None
        raise OSError(err, os.strerror(err), path if isinstance(path, str) else None)
    if not struct.unpack_from("=I", buf.raw)[0] & _STATX_MNT_ID:
        return None
    return int(struct.unpack_from("=Q", buf.raw, _MNT_ID_AT)[0])


def _by_fdinfo(path: str | int, dir_fd: int | None, follow: bool) -> int:
    """The `mnt_id:` of an O_PATH descriptor in /proc/self/fdinfo."""
    if isinstance(path, int):
        return _fdinfo_mnt_id(path)
    flags = _O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        return _fdinfo_mnt_id(fd)
    finally:
        os.close(fd)


def _fdinfo_mnt_id(fd: int) -> int:
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            info = f.read()
    except OSError as exc:
        raise MountUnknown(errno.ENOTSUP, f"mount ids cannot be read: {exc}") from exc
    for line in info.splitlines():
        key, _, value = line.partition(b":")
        if key == b"mnt_id":
            return int(value)
    raise MountUnknown(errno.ENOTSUP, "mount ids cannot be read: no mnt_id in /proc fdinfo")
