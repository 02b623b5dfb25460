"""Session leases: shared flock(2) for users of a session, exclusive for a pruner.

A lease is an open file description with a flock on it (CONTRACT.md, "Lease
protocol"). flock, never lockf/fcntl record locks: record locks belong to a
process, so two holders in one process (the daemon's threads) would not
conflict, and closing any descriptor of the file would drop them. Every Lease
opens its own description, so two holders in one process conflict exactly
like two processes. A lease file that nobody has locked holds nothing.

Only a regular file is ever a lease file: whatever else stands at its name
(a FIFO, whose open would wait for a writer for ever, a socket, a device, a
directory, a link) is never opened, holds nothing, and can never be taken
(LeaseUnsafe), so the session it names stays. Every open is O_NONBLOCK too,
for what is swapped in between the look and the open.
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
from pathlib import Path
from typing import NoReturn

import structlog

from agentkeep.adapters.base import valid_name
from agentkeep.fsio import file_kind
from agentkeep.model import Reason
from agentkeep.paths import ensure_private_dir

log = structlog.get_logger("agentkeep.leases")

# Characters kept as they are in a file name; everything else is %XX (UTF-8).
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Encoded names longer than this are cut and completed with a digest, so that
# a long store id still fits a file name (255 bytes). The cut form holds "%%",
# which no plain encoding can hold, so it never collides with one.
_MAX_NAME = 200
# A lock file replaced between our open and our flock is opened again; a path
# that keeps changing this often is treated as an error (in use).
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
    """`<state>/leases/<agent>/<id>.lock`. Creates nothing: the directory is
    made when a lock is taken."""
    if not valid_name(agent):
        raise ValueError(f"invalid agent name {agent!r}")
    return state_dir / "leases" / agent / f"{encode_id(session_id)}.lock"


class Lease:
    """A held flock on its own open file description. Closing the descriptor
    is what releases it, so release() is idempotent and safe in any order."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @property
    def held(self) -> bool:
        return self.fd >= 0

    def release(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def discard(self) -> None:
        """Remove the lease file while it is held exclusively (its session is
        gone), so that leases/ does not keep one file per removed session.
        Only our own file goes: the path is checked to name it still. It must
        be the last step under the lease: from the unlink on, another locker
        makes a new file and takes it at once, while one that opened the old
        file and locks it after us finds it unlinked and opens the path again
        (_lock). Either way the session is already gone."""
        if self.fd >= 0 and _same_file(self.fd, self.path):
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        # A lease dropped without release() would hold its session until the
        # daemon exits; release it, loudly, like an unclosed file.
        if getattr(self, "fd", -1) >= 0:
            warnings.warn(f"lease {self.path} was never released", ResourceWarning, stacklevel=1)
            self.release()

    def __repr__(self) -> str:
        return f"Lease({str(self.path)!r}, fd={self.fd})"


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
    """Open (creating it 0600) the lock file at `path`, never anything but a
    regular file: LeaseUnsafe for whatever else stands there, OSError when
    it cannot be opened. The descriptor is blocking, close-on-exec unless
    `inheritable`."""
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
    if inheritable:
        # os.open makes every descriptor close-on-exec (PEP 446).
        os.set_inheritable(fd, True)
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def _lock(
    path: Path, operation: int, *, create_dirs: bool = True, inheritable: bool = False
) -> int:
    """Open `path` and flock it; the descriptor. Raises BlockingIOError when
    LOCK_NB was asked and someone holds it, LeaseUnsafe when `path` is no
    regular file, LeaseError for any other failure.

    A lock taken on a file that was unlinked or replaced meanwhile locks
    nothing anybody else will look at, so after locking we check that the
    path still names our file, and start again when it does not: whoever
    removes a lease file while holding it can never hand out a dead lease.
    """
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

    Any other failure raises LeaseError (LeaseUnsafe when no lease file can
    be there): the caller treats the session as in use (invariant 2). Pass
    create_dirs=False for a lock file inside an agent's own directory
    (zero's `lease.lock`): a session directory that vanished must not be
    recreated by locking it.
    """
    try:
        return Lease(path, _lock(path, fcntl.LOCK_EX | fcntl.LOCK_NB, create_dirs=create_dirs))
    except BlockingIOError:
        return None
    except LeaseUnsafe:
        raise
    except LeaseError as exc:
        log.warning("lease cannot be taken", path=str(path), error=str(exc.__cause__))
        raise


class Taken:
    """Every lease of one session held exclusively: agentkeep's own lease
    file and the agent's own lock files (zero's `lease.lock`). Released
    together; `discard()` also removes agentkeep's lease file, once the
    session is gone."""

    def __init__(self, own: Lease | None, locks: list[Lease]) -> None:
        self.own = own
        self.locks = locks

    def release(self) -> None:
        for lease in reversed(self.locks):
            lease.release()

    def discard(self) -> None:
        """The session is gone: its lease file goes too (the last step
        under the leases, see Lease.discard), then every lease is released."""
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
    way a prune, a journal's finish, a trash expiry and a restore take a
    session (invariants 2 and 4: whoever holds any of them keeps it). Gives
    the leases, or says which one is held. LeaseError (LeaseUnsafe for what
    is no lock file) when one cannot be checked: the caller keeps the
    session. An agent's lock file may be created, never its directory: that
    would bring a removed session back. A dry run creates no file: a lease
    file that does not exist holds nothing."""
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


def hold_shared(path: Path, *, wait: bool = True, create_dirs: bool = True) -> Lease:
    """Hold `path` shared (a user of the session). Without `wait`, raises
    LeaseHeld when someone holds it exclusively."""
    operation = fcntl.LOCK_SH if wait else fcntl.LOCK_SH | fcntl.LOCK_NB
    try:
        return Lease(path, _lock(path, operation, create_dirs=create_dirs))
    except BlockingIOError as exc:
        raise LeaseHeld(f"{path} is held exclusively") from exc


def is_held(path: Path) -> bool:
    """True when anyone other than this probe holds `path` (including other
    Lease objects of this process). A missing file holds nothing; a probe that
    fails counts as held (a check that cannot be made means in use).

    Anything but a regular file at `path` holds nothing either, and is never
    opened: it is no lease file, and try_exclusive refuses it (LeaseUnsafe),
    so a prune still keeps the session, as `unsafe` rather than `held`."""
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
    """Hold `path` shared on an inherited descriptor and exec `argv`.

    The descriptor passes to the command through exec, so the lease lasts
    exactly as long as the command (and whatever it hands the descriptor to),
    and the command's exit status is ours. When the command cannot be run,
    exit 127 like a shell.
    """
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
