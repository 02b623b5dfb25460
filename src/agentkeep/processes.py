"""A snapshot of the user's own processes: who names a session, who is alive.

Only the user's own processes count, and agentkeep's own never do (its
command lines name the sessions it is asked about). A process of the user's
that cannot be read counts as holding everything asked about (invariant 2:
a check that cannot be made means in use).
"""

from __future__ import annotations

import os
import re
import shlex
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import psutil

from agentkeep.model import Holder, HolderKind

# Ids of every agent are made of these characters; anything else ends a token,
# so `--resume=<id>` and `<dir>/<id>.jsonl` name the id and `<id>x` does not.
_TOKEN_SPLIT = re.compile(r"[^A-Za-z0-9_-]+")
_UNREADABLE = object()
_ATTRS = ["uids", "cmdline", "create_time", "status"]


class Proc(NamedTuple):
    """One of the user's processes, as read once."""

    pid: int
    create_time: float
    cmdline: tuple[str, ...]


def _gone(pid: int) -> bool:
    """The process has exited (or is a zombie) since it was first looked at."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


# The process a request comes from: the CLI itself (None: this process),
# or, in the daemon, the peer of the connection asking.
_asking: ContextVar[int | None] = ContextVar("asking", default=None)


@contextmanager
def asked_by(pid: int | None) -> Iterator[None]:
    """Process tables made inside are for a request from `pid`."""
    token = _asking.set(pid)
    try:
        yield
    finally:
        _asking.reset(token)


def _wrappers() -> set[int]:
    """The asking process's ancestors that run this very command (`timeout
    60 agentkeep purge claude <id>`, `sh -c 'agentkeep show ...'`): they
    name the session only because they ask about it. Any other ancestor (a
    `claude --resume <id>` whose hook asks) is using the session."""
    pid = _asking.get()
    try:
        asking = psutil.Process(os.getpid() if pid is None else pid)
        args = _agentkeep_args(asking.cmdline())
        chain = asking.parents() if args is not None else []
    except (psutil.Error, OSError):
        return set()
    found = set()
    for proc in chain:
        try:
            cmdline = proc.cmdline()
        except (psutil.Error, OSError):
            continue
        if _runs(cmdline, args or []):
            found.add(proc.pid)
    return found


def _runs(cmdline: list[str], args: list[str]) -> bool:
    """Whether `cmdline` runs agentkeep (_agentkeep_args) with
    `args`: as its own words, or inside one of them (`sh -c '...'`)."""
    words = [w for arg in cmdline for w in _shell_words(arg)]
    heads = (line[start:] for line in (cmdline, words) for start in range(len(line)))
    return any(
        (theirs := _agentkeep_args(h)) is not None and theirs[: len(args)] == args for h in heads
    )


def _shell_words(text: str) -> list[str]:
    """`text` read as a shell command line: its words, `;`, `&&` and `|`
    words of their own."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # not shell code (an unmatched quote): its plain words
        return text.split()


def _agentkeep_args(cmdline: list[str] | tuple[str, ...]) -> list[str] | None:
    """The arguments agentkeep was given when `cmdline` runs it (its program
    named `agentkeep`, or an interpreter's `-m agentkeep`), else None."""
    head = [os.path.basename(arg) for arg in cmdline[:2]]
    if "agentkeep" in head:
        return list(cmdline[head.index("agentkeep") + 1 :])
    for i in range(min(len(cmdline) - 1, 3)):
        if cmdline[i] == "-m" and cmdline[i + 1] == "agentkeep":
            return list(cmdline[i + 2 :])
    return None


@dataclass
class ProcessTable:
    """The user's processes at one moment, with a token index of command lines."""

    uid: int = field(default_factory=os.getuid)
    procs: dict[int, Proc] = field(default_factory=dict)
    unreadable: list[int] = field(default_factory=list)
    failed: str | None = None
    # Every pid looked at, wanted or not (other users', agentkeep's own).
    _seen: set[int] = field(default_factory=set)
    _tokens: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    _open_files: dict[str, list[tuple[int, str]]] | None = None
    _open_names: set[str] = field(default_factory=set)
    # Ancestors of the asking process that run agentkeep (_wrappers): their
    # command lines name nothing, though they are alive and may hold files.
    wrappers: frozenset[int] = frozenset()

    @classmethod
    def snapshot(cls, uid: int | None = None) -> ProcessTable:
        """The user's processes now."""
        table = cls(uid=os.getuid() if uid is None else uid, wrappers=frozenset(_wrappers()))
        try:
            it = psutil.process_iter(_ATTRS, ad_value=_UNREADABLE)
            for proc in it:
                table._take(proc.pid, proc.info)
        except (psutil.Error, OSError) as exc:  # the process table itself could not be read
            table.failed = f"cannot read the process table: {exc}"
        finally:
            # psutil keeps every Process it read until its next
            # process_iter: in the daemon, memory held between requests.
            psutil.process_iter.cache_clear()
        return table

    def refreshed(self) -> ProcessTable:
        """This table brought up to now cheaply: processes that exited are
        dropped and new ones read; the rest are kept as read. A process that
        exec'd another command line in place is seen by the next snapshot."""
        try:
            current = set(psutil.pids())
        except (psutil.Error, OSError):
            return ProcessTable.snapshot(self.uid)
        if current == self._seen:
            return self  # nothing started or exited since
        table = ProcessTable(uid=self.uid, failed=self.failed, wrappers=self.wrappers)
        for pid in current & set(self.procs):
            table.add(self.procs[pid])
        table.unreadable = [pid for pid in self.unreadable if pid in current]
        table._seen = (self._seen & current) | set(table.procs) | set(table.unreadable)
        for pid in current - self._seen:
            try:
                info = psutil.Process(pid).as_dict(_ATTRS, ad_value=_UNREADABLE)
            except psutil.NoSuchProcess:
                continue
            except (psutil.Error, OSError):
                table.unreadable.append(pid)
                continue
            table._take(pid, info)
        return table

    def _take(self, pid: int, info: dict[str, Any]) -> None:
        self._seen.add(pid)
        uids = info.get("uids")
        if uids is _UNREADABLE or uids is None or uids.real != self.uid or pid == os.getpid():
            return
        if info.get("status") == psutil.STATUS_ZOMBIE:
            return  # it has exited: it holds nothing, and its command line proves nothing
        cmdline = info.get("cmdline")
        created = info.get("create_time")
        if cmdline is _UNREADABLE or created is _UNREADABLE:
            if _gone(pid):
                return  # it exited while it was read: it holds nothing
            self.unreadable.append(pid)
            return
        cmdline = tuple(cmdline or ())
        # agentkeep's own processes are left out: they name what they are asked about.
        if _agentkeep_args(cmdline) is None:
            self.add(Proc(pid, float(created or 0.0), cmdline))

    def add(self, proc: Proc) -> None:
        """Take `proc` in, and its command line's tokens unless it is a wrapper."""
        self.procs[proc.pid] = proc
        if proc.pid in self.wrappers:
            return
        for arg in proc.cmdline:
            for token in _TOKEN_SPLIT.split(arg):
                if token:
                    self._tokens[token.lower()].add(proc.pid)

    def naming(self, *tokens: str) -> list[Holder]:
        """Processes whose command line holds one of `tokens` as a whole token
        (case-insensitively), plus every process that could not be read."""
        pids = set().union(*(self._tokens.get(token.lower(), ()) for token in tokens))
        holders = [
            Holder(p, HolderKind.PROCESS, "command line names the session") for p in sorted(pids)
        ]
        return holders + self.doubtful()

    def names(self, sid: str) -> bool:
        """Whether naming() finds a process for `sid` by command line (for
        many ids at once: processes that could not be read aside, see
        doubtful())."""
        return sid.lower() in self._tokens

    def doubtful(self) -> list[Holder]:
        """Holders standing for checks that could not be made."""
        holders = [
            Holder(pid, HolderKind.PROCESS, "process cannot be read") for pid in self.unreadable
        ]
        if self.failed:
            holders.append(Holder(None, HolderKind.PROCESS, self.failed))
        return holders

    def alive(self, pid: int) -> Proc | None:
        """The process `pid`, when it is the user's and alive."""
        return self.procs.get(pid)

    def holding_open(self, path: str) -> list[tuple[int, str]]:
        """(pid, mode) of the user's processes that have `path` open, listed
        once per snapshot, when an adapter first asks. A process whose open
        files cannot be listed (undumpable, as ssh-agent makes itself) holds
        nothing here: else it would keep every such session while it runs."""
        if self._open_files is None:
            self._open_files = defaultdict(list)
            for pid in list(self.procs):
                try:
                    for f in psutil.Process(pid).open_files():
                        self._open_files[f.path].append((pid, getattr(f, "mode", "?")))
                except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
                    continue
            self._open_names = {os.path.basename(p) for p in self._open_files}
        keys = {path}
        # realpath() keeps the last component unless it is a link (or "",
        # ".", ".."): when no open file has that name, the realpath is not
        # open either, and its syscall per component is saved.
        name = os.path.basename(path)
        if name in self._open_names or name in ("", ".", "..") or os.path.islink(path):
            keys.add(os.path.realpath(path))
        return [hit for key in keys for hit in self._open_files.get(key, [])]
