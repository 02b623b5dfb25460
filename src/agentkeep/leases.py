"""Session leases: shared flock(2) for users of a session, exclusive for a pruner.

A lease is an open file description with a flock on it (CONTRACT.md, "Lease
protocol"); never lockf/fcntl record locks, which belong to a process (two
holders in the daemon's threads would not conflict) and drop when any
descriptor of the file closes. A lease file nobody has locked holds nothing.

Only a regular file is ever a lease file: anything else at its name (a FIFO
whose open would wait for ever, a socket, a device, a directory, a link) is
never opened, holds nothing and can never be taken (LeaseUnsafe), so its
session stays. Every open is O_NONBLOCK too, for what is swapped in meanwhile.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import stat
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import structlog

from agentkeep.adapters.base import valid_name
from agentkeep.fsio import file_kind
from agentkeep.model import Reason
from agentkeep.paths import ensure_private_dir
from agentkeep.statefiles import remove

log = structlog.get_logger("agentkeep.leases")

# Characters kept as they are in a file name; everything else is %XX (UTF-8).
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Longer encoded names are cut and end in "%%" and a digest (to fit 255
# bytes): no plain encoding holds "%%", so the two never collide.
_MAX_NAME = 200
# A lock file replaced between open and flock is opened again, this often at most.
_REOPENS = 8


class LeaseError(Exception):
    """A lease could not be checked or taken; callers treat it as in use."""

    # Why a prune keeps the session it names.
    reason = Reason.HELD


class LeaseUnsafe(LeaseError):
    """Something other than a regular file stands where the lease file
    belongs: no lease can be taken or honoured there."""

    reason = Reason.UNSAFE


class LeaseHeld(LeaseError):
    """The lease is held by someone else and the caller asked not to wait."""


def encode_id(session_id: str) -> str:
    """One file name for a session id: characters outside [A-Za-z0-9_.-]
    (store ids hold '/') are percent-encoded, so the name cannot walk."""
    if not session_id:
        raise ValueError("empty session id")
    encoded = _UNSAFE.sub(
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8", "surrogateescape")),
        session_id,
    )
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    if len(encoded) > _MAX_NAME:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()
        encoded = encoded[: _MAX_NAME - len(digest) - 2] + "%%" + digest
    return encoded


def lease_path(state_dir: Path, agent: str, session_id: str) -> Path:
    """`<state>/leases/<agent>/<id>.lock` (creates nothing)."""
    if not valid_name(agent):
        raise ValueError(f"invalid agent name {agent!r}")
    return state_dir / "leases" / agent / f"{encode_id(session_id)}.lock"


class Lease:
    """A held flock on its own open file description, released by closing
    the descriptor (release() is idempotent)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @property
    def held(self) -> bool:
        """Not released yet."""
        return self.fd >= 0

    def release(self) -> None:
        """Close the descriptor, which drops the flock."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def discard(self) -> None:
        """Remove the lease file, held exclusively, of a session that is gone
        (if the path still names our file). The last step under the lease:
        from the unlink on, another locker takes a new file at once, and one
        that opened the old file finds it unlinked and opens again (_lock)."""
        if self.fd >= 0 and _same_file(self.fd, self.path):
            remove(self.path)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        # A lease dropped unreleased would hold its session for the daemon's life.
        if getattr(self, "fd", -1) >= 0:
            warnings.warn(f"lease {self.path} was never released", ResourceWarning, stacklevel=1)
            self.release()


def _make_dirs(directory: Path) -> None:
    """Create `directory` and its missing ancestors, each 0700."""
    missing: list[Path] = []
    current = directory
    while not current.is_dir() and current != current.parent:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        ensure_private_dir(path)


# O_NOFOLLOW: a link planted at the lock's name must not make us create or
# lock a file somewhere else. O_NONBLOCK: a FIFO must not stop the open.
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK
# What open gives for a link (ELOOP, EMLINK on the BSDs), a directory
# (EISDIR with O_CREAT) or a socket (ENXIO) at the name.
_NOT_A_FILE = (errno.ELOOP, errno.EMLINK, errno.EISDIR, errno.ENXIO)


def _not_a_file(path: Path, mode: int) -> LeaseUnsafe:
    return LeaseUnsafe(f"{path} is {file_kind(mode)}, not a lock file")


def _regular_or_missing(path: Path) -> bool:
    """True when a regular file is at `path`, False when nothing is; raises
    LeaseUnsafe for anything else, which is never opened."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        raise _not_a_file(path, st.st_mode)
    return True


def open_lock_file(
    path: Path, *, create_dirs: bool = True, writable: bool = False, inheritable: bool = False
) -> int:
    """Open (creating it 0600) the lock file at `path`, a regular file only
    (else LeaseUnsafe); OSError when it cannot be opened. The descriptor is
    blocking, close-on-exec unless `inheritable`."""
    if create_dirs:
        _make_dirs(path.parent)
    _regular_or_missing(path)
    access = os.O_RDWR if writable else os.O_RDONLY
    try:
        fd = os.open(path, access | _OPEN_FLAGS | os.O_CREAT, 0o600)
    except OSError as exc:
        if exc.errno in _NOT_A_FILE:
            raise LeaseUnsafe(f"{path} is not a lock file: {exc.strerror}") from exc
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # swapped in since the look
        os.close(fd)
        raise _not_a_file(path, mode)
    # Blocking again: the descriptor may pass to a command (hold) that reads it.
    os.set_blocking(fd, True)
    os.set_inheritable(fd, inheritable)  # os.open's are close-on-exec (PEP 446)
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return os.path.samestat(st, os.fstat(fd))


def _lock(
    path: Path, operation: int, *, create_dirs: bool = True, inheritable: bool = False
) -> int:
    """Open `path` and flock it; the descriptor. BlockingIOError when LOCK_NB
    was asked and someone holds it, LeaseUnsafe when `path` is no regular
    file, LeaseError for any other failure. A lock on a file unlinked or
    replaced meanwhile locks nothing: the path must still name our file,
    else we start again (so Lease.discard never hands out a dead lease)."""
    try:
        for _ in range(_REOPENS):
            fd = open_lock_file(path, create_dirs=create_dirs, inheritable=inheritable)
            try:
                fcntl.flock(fd, operation)
                if _same_file(fd, path):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
    except BlockingIOError:
        raise
    except OSError as exc:
        raise LeaseError(f"{path}: {exc}") from exc
    # EAGAIN makes this a BlockingIOError: to one that does not wait, a path
    # that keeps changing is held; to one that waits, an error.
    replaced = OSError(errno.EAGAIN, "lock file keeps being replaced", str(path))
    if operation & fcntl.LOCK_NB:
        raise replaced
    raise LeaseError(f"{path}: {replaced}") from replaced


def try_exclusive(path: Path, *, create_dirs: bool = True) -> Lease | None:
    """Take `path` exclusively without waiting; None when anyone holds it.
    Any other failure raises LeaseError (LeaseUnsafe: no lease file can be
    there): the session is in use (invariant 2). create_dirs=False for a
    lock file in an agent's own directory: a vanished session directory
    must not be made again by locking it."""
    try:
        return Lease(path, _lock(path, fcntl.LOCK_EX | fcntl.LOCK_NB, create_dirs=create_dirs))
    except BlockingIOError:
        return None
    except LeaseError as exc:
        if not isinstance(exc, LeaseUnsafe):
            log.warning("lease cannot be taken", path=str(path), error=str(exc.__cause__))
        raise


@dataclass
class Taken:
    """Every lease of one session held exclusively: agentkeep's own and the
    agent's own lock files (zero's `lease.lock`), released together."""

    own: Lease | None
    locks: list[Lease]

    def release(self) -> None:
        """Release every lease."""
        for lease in reversed(self.locks):
            lease.release()

    def discard(self) -> None:
        """The session is gone: its lease file goes too (Lease.discard), then
        every lease is released."""
        if self.own is not None:
            self.own.discard()
        self.release()


def take_session(
    state_dir: Path,
    agent: str,
    session_id: str,
    lock_files: Sequence[Path] = (),
    *,
    dry_run: bool = False,
) -> Taken | str:
    """Take every lease of a session exclusively, without waiting: the one
    way a prune, a journal's finish, the trash and a restore take a session
    (invariants 2 and 4). The leases, or which one is held; LeaseError when
    one cannot be checked (the session is kept). An agent's lock file may
    be created, never its directory (that would bring a removed session
    back); a dry run creates no file (a missing one holds nothing)."""
    own_path = lease_path(state_dir, agent, session_id)
    taken = Taken(None, [])
    try:
        for path in [own_path, *lock_files]:
            if dry_run and not os.path.lexists(path):
                continue
            lease = try_exclusive(path, create_dirs=path == own_path)
            if lease is None:
                taken.release()
                return f"lease {path}"
            taken.locks.append(lease)
            if path == own_path:
                taken.own = lease
    except BaseException:
        taken.release()
        raise
    return taken


def hold_exclusive(path: Path) -> Lease:
    """Take `path` exclusively, waiting for every other holder."""
    return Lease(path, _lock(path, fcntl.LOCK_EX))


def hold_shared(path: Path, *, wait: bool = True) -> Lease:
    """Hold `path` shared (a user of the session). Without `wait`, raises
    LeaseHeld when someone holds it exclusively."""
    operation = fcntl.LOCK_SH if wait else fcntl.LOCK_SH | fcntl.LOCK_NB
    try:
        return Lease(path, _lock(path, operation))
    except BlockingIOError as exc:
        raise LeaseHeld(f"{path} is held exclusively") from exc


def is_held(path: Path) -> bool:
    """True when anyone but this probe (other Leases of this process too)
    holds `path`; a probe that fails counts as held (invariant 2). A missing
    file, or anything but a regular file, holds nothing and is not opened
    (a prune still keeps the session: try_exclusive refuses it, unsafe)."""
    try:
        if not _regular_or_missing(path):
            return False
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    except LeaseUnsafe as exc:
        log.warning("not a lease file", path=str(path), error=str(exc))
        return False
    except FileNotFoundError:
        return False
    except BlockingIOError:
        return True
    except OSError as exc:
        log.warning("lease cannot be probed", path=str(path), error=str(exc))
        return True
    return False


def hold_and_exec(path: Path, argv: list[str]) -> NoReturn:
    """Hold `path` shared on a descriptor `argv` inherits, and exec it: the
    lease lasts exactly as long as the command, whose exit status is ours
    (127, like a shell, when it cannot be run)."""
    if not argv:
        raise ValueError("no command to run")
    _lock(path, fcntl.LOCK_SH, inheritable=True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"agentkeep: cannot run {argv[0]}: {exc.strerror or exc}\n")
        sys.stderr.flush()
    os._exit(127)
