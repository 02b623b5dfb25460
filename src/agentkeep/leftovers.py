"""Runtime leftovers: files agents leave in the tmp dirs by the process, not
the session (FIELD-NOTES "Disk that is not in sessions"), such as the Bun
runtime library every Claude Code and opencode process writes to $TMPDIR.

garbage() decides, on what find() and mapped() read; collect() acts.
Invariant 13: a file is garbage only when all of these hold:

- its name is exactly one of KINDS' patterns, of an agent in the run,
  directly in one of the user's tmp dirs whose way is the user's or root's;
- it is a regular file of the user's, one name only, last written more
  than GRACE_S ago;
- no process maps it (/proc/<pid>/maps of every process);
- no session names it, for a kind that sessions name.

It is then removed link-safely (rmtree.Walk), only while its name still
names the file decided on, and only under a write lease (F_SETLEASE),
which the kernel grants only while no other open file or mapping refers to
it, in any process. No lease (in use, or no leases here, as macOS): it stays.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import stat
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from agentkeep import fsio, rootsafety
from agentkeep.adapters.base import Adapter
from agentkeep.disk import Ident, ident_of
from agentkeep.errors import RemovalError

if TYPE_CHECKING:
    from agentkeep.rmtree import Parent

log = structlog.get_logger("agentkeep.leftovers")

# A leftover written this recently may belong to a process that has not
# mapped it yet (a runtime writes its library, then loads it).
GRACE_S = 3600.0


@dataclass(frozen=True)
class Kind:
    """One kind of leftover: `pattern` matches its whole file name, looked
    for when one of `agents` is in the run; `named_by`: the agent whose
    sessions may name such a file (then one a session names stays)."""

    name: str
    pattern: re.Pattern[str]
    agents: frozenset[str]
    named_by: str | None = None


KINDS = (
    # Bun's runtime library, one per Claude Code or opencode process.
    Kind(
        "bun-runtime", re.compile(r"\.[0-9a-f]{16}-00000000\.so"), frozenset({"claude", "opencode"})
    ),
    # pi's output of a big bash command (randomBytes(8) in hex), which its
    # transcript names and nothing removes.
    Kind("pi-bash-log", re.compile(r"pi-bash-[0-9a-f]{16}\.log"), frozenset({"pi"}), named_by="pi"),
)


@dataclass(frozen=True)
class Found:
    """A file of a leftover's name in a tmp dir, as lstat saw it."""

    dir: str
    name: str
    kind: Kind
    st: os.stat_result

    @property
    def path(self) -> str:
        """Its full path."""
        return os.path.join(self.dir, self.name)

    @property
    def ident(self) -> Ident:
        """Its (st_dev, st_ino) as lstat saw it."""
        return ident_of(self.st)


@dataclass(frozen=True)
class Leftover:
    """A leftover removed (a dry run: that would be removed)."""

    path: str
    kind: str
    bytes: int

    def to_json(self) -> dict[str, object]:
        """Its line in the prune report."""
        return {"path": self.path, "bytes": self.bytes, "kind": self.kind}


def kinds_for(agents: Iterable[str]) -> list[Kind]:
    """The kinds looked for when `agents` are in the run."""
    wanted = set(agents)
    return [k for k in KINDS if k.agents & wanted]


def find(dirs: Iterable[Path], kinds: Collection[Kind]) -> list[Found]:
    """Every entry of a leftover's name directly in `dirs`, whatever it is:
    garbage() decides. A dir whose way another user could change is not
    looked in."""
    found: list[Found] = []
    for directory in dirs if kinds else ():
        if not directory.is_dir():
            continue
        problem = rootsafety.way_problem(directory)
        if problem is not None:
            log.info("a tmp dir is not looked in for leftovers", dir=str(directory), why=problem)
            continue
        found += _found_in(os.fspath(directory), kinds)
    return found


def _found_in(directory: str, kinds: Collection[Kind]) -> list[Found]:
    try:
        names = fsio.listed_names(directory)
    except OSError as exc:
        log.info("cannot list a tmp dir", dir=directory, error=str(exc))
        return []
    found = []
    for name in names:
        kind = next((k for k in kinds if k.pattern.fullmatch(name)), None)
        try:
            if kind is not None:
                found.append(Found(directory, name, kind, os.lstat(os.path.join(directory, name))))
        except OSError:
            pass  # gone meanwhile
    return found


def why_kept(
    f: Found, *, uid: int, now: float, mapped: Mapping[str, int], named: Collection[str]
) -> str | None:
    """Why `f` is not garbage, or None when it is: invariant 13, the
    module's rules in order."""
    if not stat.S_ISREG(f.st.st_mode):
        return "not a regular file"
    if f.st.st_uid != uid:
        return f"belongs to uid {f.st.st_uid}"
    if f.st.st_nlink != 1:
        return "has another name"
    if now - f.st.st_mtime < GRACE_S:
        return "written within the last hour"
    if f.path in mapped:
        return f"mapped by pid {mapped[f.path]}"
    if f.path in named:
        return "a session names it"
    return None


def garbage(
    found: Iterable[Found],
    *,
    uid: int,
    now: float,
    mapped: Mapping[str, int],
    named: Collection[str],
) -> list[Found]:
    """Those of `found` that are garbage; `mapped`: mapped(), `named`: the
    paths a session names."""
    return [f for f in found if why_kept(f, uid=uid, now=now, mapped=mapped, named=named) is None]


def mapped(found: Collection[Found]) -> dict[str, int]:
    """The path of each of `found` that a process maps, with its pid, by
    device and inode or by path, from every /proc/<pid>/maps that can be
    read (one that cannot is left to the lease)."""
    by_ident = {f.ident: f.path for f in found}
    by_path = {os.path.realpath(f.path): f.path for f in found} | {f.path: f.path for f in found}
    hits: dict[str, int] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return hits
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", "rb") as maps:
                lines = maps.read().decode("utf-8", "surrogateescape").splitlines()
        except OSError:
            continue
        for path in filter(None, (_mapped_path(line, by_ident, by_path) for line in lines)):
            hits.setdefault(path, pid)
    return hits


def _mapped_path(
    line: str, by_ident: Mapping[Ident, str], by_path: Mapping[str, str]
) -> str | None:
    """Which of ours one line of a maps file maps: `start-end perms offset
    major:minor inode [path]`, the path with " (deleted)" once unlinked."""
    fields = line.split(None, 5)
    if len(fields) < 5 or fields[4] == "0":
        return None
    if len(fields) == 6:
        path = fields[5].removesuffix(" (deleted)")
        if path in by_path:
            return by_path[path]
    major, _, minor = fields[3].partition(":")
    try:
        ident = (os.makedev(int(major, 16), int(minor, 16)), int(fields[4]))
    except ValueError:
        return None
    return by_ident.get(ident)


Names = Callable[[str, list[str]], set[str]]


def asking(adapters: Mapping[str, Adapter]) -> Names:
    """Names for named_paths(): each agent's adapter answers; for an agent
    not enabled, every path is named."""

    def names(agent: str, paths: list[str]) -> set[str]:
        adapter = adapters.get(agent)
        return set(paths) if adapter is None else adapter.names_leftovers(paths)

    return names


def named_paths(found: Collection[Found], names: Names) -> set[str]:
    """The paths of `found` that a session names, by `names(agent, paths)`."""
    asked: dict[str, list[str]] = {}
    for f in found:
        if f.kind.named_by is not None:
            asked.setdefault(f.kind.named_by, []).append(f.path)
    return {path for agent, paths in asked.items() for path in names(agent, paths)}


def collect(
    dirs: Iterable[Path],
    kinds: Collection[Kind],
    names: Names,
    *,
    uid: int,
    now: float,
    dry_run: bool,
) -> list[Leftover]:
    """Remove (a dry run: only list) the garbage among the leftovers in `dirs`."""
    found = find(dirs, kinds)
    if not found:
        return []
    chosen = garbage(found, uid=uid, now=now, mapped=mapped(found), named=named_paths(found, names))
    done = []
    for f in chosen:
        if remove(f, dry_run=dry_run):
            log.info("would remove" if dry_run else "removed", leftover=f.path, bytes=f.st.st_size)
            done.append(Leftover(f.path, f.kind.name, f.st.st_size))
    return done


def remove(f: Found, *, dry_run: bool) -> bool:
    """Remove `f` link-safely under its lease (a dry run takes the lease and
    removes nothing); False when it stays."""
    # Imported here: `du` reads leftovers, and only a prune removes them.
    from agentkeep.rmtree import open_parent

    try:
        parent = open_parent(f.dir, [f.name], lambda: None)
    except RemovalError as exc:
        log.warning("a leftover's dir cannot be opened", path=f.path, error=str(exc))
        return False
    if parent is None:
        return False
    with parent.cursor:
        try:
            fd = os.open(f.name, _LEASE_OPEN, dir_fd=parent.cursor.fd)
        except OSError as exc:
            # Gone, a link now (ELOOP), or someone else holds a lease.
            log.info("a leftover stays", path=f.path, why=exc.strerror or str(exc))
            return False
        try:
            return _remove_leased(f, fd, parent, dry_run)
        finally:
            os.close(fd)


def _remove_leased(f: Found, fd: int, parent: Parent, dry_run: bool) -> bool:
    """Invariant 13: only the file decided on (its name still names it, as
    opened at `fd`), and only while the lease says no process uses it."""
    from agentkeep.rmtree import Walk

    st = os.fstat(fd)
    if ident_of(st) != f.ident or not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        log.info("a leftover changed since it was looked at; it stays", path=f.path)
        return False
    if not _lease(fd, f.path):
        return False
    try:
        walk = Walk(parent.root_mount, dry_run=dry_run, seen=set())
        gone = walk.run(parent.cursor, f.name)
    finally:
        _unlease(fd)
    if walk.errors or walk.residuals:
        log.warning("a leftover was not removed", path=f.path, errors=walk.errors + walk.residuals)
        return False
    return gone and walk.found


# O_NONBLOCK: an open that another's lease would make wait fails at once.
_LEASE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _lease(fd: int, path: str) -> bool:
    """A write lease on `fd`, held while the file is removed: granted only
    while no other open file or mapping refers to it, and nothing can open
    it meanwhile without waiting for us."""
    setlease = getattr(fcntl, "F_SETLEASE", None)
    if setlease is None:
        log.info("no file leases here: leftovers stay", path=path)
        return False
    try:
        # A lease break is told by a signal, SIGIO by default, which would
        # end the process: SIGURG's default is to be ignored.
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, setlease, fcntl.F_WRLCK)
    except OSError as exc:
        why = "in use" if exc.errno in (errno.EAGAIN, errno.EBUSY) else exc.strerror
        log.info("a leftover stays", path=path, why=why)
        return False
    return True


def _unlease(fd: int) -> None:
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    except OSError:
        pass  # closing the descriptor ends the lease too
