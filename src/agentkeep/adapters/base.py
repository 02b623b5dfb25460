"""The adapter interface: what agentkeep must know of each agent.

An adapter reads one agent's layout: where its roots are, every session with
every artifact, which session a single path belongs to (for the watcher), a
session's workspace, parent and activity, the evidence that a process has it
open, and how to remove it. Adapters only read; removal goes through the
`Remover` they are handed, which owns link safety, the trash and dry runs.
Adapters treat every file as possibly absent, malformed or of a newer
version, and never guess in the direction of deleting.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

import structlog

from agentkeep import disk
from agentkeep.adapters.sqlite import TableRows
from agentkeep.model import Artifact, Described, Holder, Session
from agentkeep.paths import Env
from agentkeep.processes import ProcessTable

log = structlog.get_logger("agentkeep.adapters")


@dataclass(frozen=True)
class Root:
    """A directory an agent keeps sessions under. `problem` says why it must
    not be trusted (another user can write to it, or a link on the way to it
    is not the user's); artifacts under such a root are never removed."""

    path: Path
    kind: str
    problem: str | None = None

    @classmethod
    def check(cls, path: Path, kind: str, uid: int) -> Root:
        return cls(path, kind, disk.root_problem(path, uid) if path.exists() else None)


class ScanPart(Protocol):
    """A piece of a scan: picklable, so that another process can run it."""

    def __call__(self) -> Iterable[Session]: ...


@dataclass(frozen=True)
class WholeScan:
    """An agent's whole scan as one part (the adapter travels with it: an
    adapter is its Env and paths derived from it)."""

    adapter: Adapter

    def __call__(self) -> Iterator[Session]:
        return self.adapter.scan()


# Changes (new entries, changed artifacts) an agent's listing is brought up
# to date by looking up on their own, at least; past this many, or a quarter
# of the agent's sessions, listing the whole agent again costs less.
LOOKUPS_ALONE = 256


def listing_again_is_cheaper(changes: int, sessions: int) -> bool:
    return changes > max(LOOKUPS_ALONE, sessions // 4)


class Known:
    """What the index knew of some sessions when it was last brought up to
    date with the disk as a whole (by a scan or a reconcile): the mtimes of
    the agent's watched directories then (Index.dir_signatures), and each
    session's artifact paths. A directory whose mtime still holds has
    gained and lost no entry since (what reconcile relies on too), so the
    sessions' entries in it are those known, and it need not be listed
    again to find them. Never for a prune: its check lists the disk."""

    def __init__(self, mtimes: Mapping[str, int | None], paths: Iterable[str]) -> None:
        self._mtimes = mtimes
        self._names: dict[str, list[str]] = {}
        for path in paths:
            directory, name = os.path.split(path)
            self._names.setdefault(directory, []).append(name)

    def names_in(self, directory: str) -> list[str] | None:
        """The known entries of the sessions in `directory`, or None when it
        changed since it was known (or was never known): list it."""
        known = self._mtimes.get(directory)
        if known is None or disk.dir_mtimes([directory])[directory] != known:
            return None
        return self._names.get(directory, [])


class Unlisted(dict[str, str]):
    """The directories a listing could not list (path -> why), and places
    it could not read to tell whose an entry is. What lies there is
    unknown, so every session that could have an entry there is kept
    `unsafe` with them named (invariant 2: a check that cannot be made
    counts as in use), never dated or removed from the part that could be
    read. A missing directory is not one of them: it holds nothing."""

    def add(self, path: str | os.PathLike[str], exc: OSError) -> None:
        path = os.fspath(path)
        if path not in self:
            log.info("cannot list directory", path=path, error=str(exc))
            self[path] = exc.strerror or str(exc)

    @staticmethod
    def note(into: Unlisted | None, path: str | os.PathLike[str], exc: OSError) -> None:
        """add() to `into`; only logged when there is none."""
        (Unlisted() if into is None else into).add(path, exc)


def unlisted_error(exc: OSError) -> bool:
    """Whether a listing's error hides what is there: anything but the
    directory being absent (or a file)."""
    return not isinstance(exc, (FileNotFoundError, NotADirectoryError))


def unreadable(artifacts: Iterable[Artifact], unlisted: Iterable[str] = ()) -> list[str]:
    """A session's Session.unreadable: the places that could not be listed
    where it could have entries (`unlisted`), and the first directory that
    cannot be listed in each of its directory artifacts whose tree could
    not all be read (mtime None), sorted."""
    found = (disk.first_unlisted(a.path) for a in artifacts if a.is_dir and a.mtime is None)
    return sorted({*unlisted, *(path for path in found if path is not None)})


class Remover(Protocol):
    """What an adapter may do to the disk, through the removal engine."""

    dry_run: bool

    def remove_path(self, artifact: Artifact) -> None:
        """Remove (or move to the trash) one file-system artifact, link-safely,
        relative to its root's descriptor. Raises RemovalError."""

    def removed_at_once(self, what: str, *, kept: bool = False) -> None:
        """Record that `what` (database rows, an agent command's work) was
        removed outside the trash: the trash entry becomes partial, unless
        `what` is `<db>#<table>` whose rows were kept first (keep_rows), or
        `kept` says that all it took is in the trash already (an agent's
        command run after its rows were kept and its files moved)."""

    def residual(self, path: str) -> None:
        """Report something that still names the session and is not ours."""

    def gone(self, session_id: str) -> bool:
        """Whether this run removed another session of the agent (a dry run:
        would have removed it), which the disk may still show in a dry run:
        a child removed before its parent is gone for the parent's removal."""

    def keep_rows(self, rows: TableRows) -> None:
        """Rows about to be removed with the session (by agentkeep or by the
        agent's own command): saved into its trash entry, so that restore
        can write them back. Nothing in a dry run or without a trash.
        Raises RemovalError when they cannot be saved: the caller must then
        remove nothing of them."""


class Adapter(ABC):
    """One agent. Instances are cheap; roots are resolved from `env`."""

    name: ClassVar[str]
    # The artifact kinds holders() reads (its evidence of use beyond the id):
    # listing many sessions loads only these from the index.
    evidence_kinds: ClassVar[frozenset[str]] = frozenset()
    # Finds this agent's session ids in a file name, for looking again after
    # a removal (see lookagain): None for agents whose ids are not distinct
    # enough to be told apart inside other names.
    id_in_name: ClassVar[re.Pattern[str] | None] = None

    def __init__(self, env: Env) -> None:
        # Never replaced: a reload builds new adapters. Paths derived from it
        # are cached (cached_property) for that reason.
        self.env = env

    # -- where ----------------------------------------------------------
    @abstractmethod
    def roots(self) -> list[Root]:
        """Every root this agent reads, whether or not it exists yet."""

    @abstractmethod
    def watch_dirs(self) -> list[Path]:
        """The directories whose entries name sessions (watched, not whole trees)."""

    # -- what -----------------------------------------------------------
    @abstractmethod
    def canonical_id(self, raw: str) -> str | None:
        """The canonical form of a session id, or None when `raw` is not one.
        Everything a user or a file names goes through here first."""

    @abstractmethod
    def scan(self) -> Iterator[Session]:
        """Every session on disk, each with every artifact. Malformed entries
        are skipped with a log line, never raised."""

    def expected_sessions(self) -> int | None:
        """A cheap count of the sessions a scan will find, when the agent
        has one (None: the index's count from the last scan stands in). It
        decides whether a scan is spread over worker processes."""
        return None

    def scan_parts(self) -> Iterator[ScanPart]:
        """scan() as parts that a worker process can run (a big home's scan
        is spread over the CPUs). The default is one part, the whole scan;
        an agent with many sessions lists them once and hands out the
        measuring in parts."""
        yield WholeScan(self)

    def load(self, session_id: str) -> Session | None:
        """List one session again from the disk (never from the index); None
        when nothing of it is left."""
        return self.load_many([session_id])[session_id]

    def load_many(
        self, session_ids: Sequence[str], known: Known | None = None
    ) -> dict[str, Session | None]:
        """load() for each of `session_ids`, by the id as given, in one pass
        over the agent's directories (a prune's batch, a reconcile). An id
        that is not one of this agent's has no session. `known`: what the
        index knew of them, which spares listing what has not changed."""
        sids = {raw: self.canonical_id(raw) for raw in session_ids}
        wanted = frozenset(sid for sid in sids.values() if sid is not None)
        if not wanted:
            listed: dict[str, Session] = {}
        elif known is not None:
            listed = self.list_known(wanted, known)
        else:
            listed = self.list_again(wanted)
        return {raw: listed.get(sid) if sid is not None else None for raw, sid in sids.items()}

    def list_known(self, session_ids: frozenset[str], known: Known) -> dict[str, Session]:
        """list_again(), sparing the directories `known` says are unchanged;
        an adapter whose listing of a few sessions costs a pass over
        directories every session shares overrides it."""
        return self.list_again(session_ids)

    @abstractmethod
    def list_again(self, session_ids: frozenset[str]) -> dict[str, Session]:
        """Those of the sessions of these canonical ids that are on disk,
        listed from the disk (never from the index)."""

    @abstractmethod
    def session_for_path(self, path: str) -> str | None:
        """Which session a path (as a watcher reports it) belongs to."""

    def sessions_named(self, paths: Iterable[str]) -> set[str]:
        """The sessions these paths (new entries in a watched directory, or
        changed files) belong to."""
        return {sid for path in paths if (sid := self.session_for_path(path))}

    def forget(self) -> None:
        """Drop whatever the adapter keeps from one call to the next (its
        listings): the daemon calls it once a scan, prune or listing is
        done, so that nothing of each session stays in its memory; the next
        call lists again from the disk. Most keep nothing."""
        return None

    def databases(self) -> list[Path]:
        """The agent's SQLite databases whose rows may name sessions: after a
        removal every table of them is looked at again for the id."""
        return []

    def unlisted(self) -> dict[str, str]:
        """The agent's roots and the directories whose entries name its
        sessions that cannot be listed now (path -> why), each below the
        first that cannot. A scan and every reconcile record them; a change
        has the agent scanned again (a permission change moves no mtime
        and no watch sees it)."""
        return disk.unlisted([*(r.path for r in self.roots()), *self.listed_dirs()])

    def listed_dirs(self) -> list[Path]:
        """The directories a listing of every session lists (unlisted()
        checks them): the watched ones, unless an agent lists others too."""
        return self.watch_dirs()

    def names_leftovers(self, paths: list[str]) -> set[str]:
        """Which of `paths`, runtime leftovers in the tmp dirs of a kind
        this agent's sessions name (leftovers.KINDS, `named_by`), a session
        still names: those stay. By default every one: an agent whose
        adapter does not look for them keeps them all."""
        return set(paths)

    # -- in use ---------------------------------------------------------
    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """Evidence that a process has the session open. The default: any of
        the user's processes whose command line holds the id as a token."""
        return procs.naming(session.id)

    def may_hold(self, evidence: Sequence[Artifact], procs: ProcessTable) -> bool:
        """Whether holders() may find a session in use through `evidence`,
        its artifacts of `evidence_kinds` (its id aside): a survey of many
        sessions looks one by one only at those that may be. The default:
        they may (holders() reads what they say)."""
        return True

    def lock_files(self, session: Session) -> list[Path]:
        """The agent's own lock files the pruner must hold exclusively too."""
        return []

    def describe(self, session: Session) -> Described:
        """Its title or first prompt, and when it began, as the agent's own
        files say, read from a bounded head of them (adapters.heads) when
        it is removed: for the record of what went. Never raises; the
        default knows neither."""
        return Described()

    # -- removal --------------------------------------------------------
    def remove(self, session: Session, remover: Remover) -> None:
        """Remove the session: the record the agent lists it by first, so a
        removal that stops half way never leaves something that looks like a
        session (invariant 5), then everything else. Linked artifacts are
        reported, never removed (invariant 6)."""
        for artifact in sorted(session.artifacts, key=lambda a: not a.primary):
            if artifact.linked:
                remover.residual(artifact.path)
            else:
                remover.remove_path(artifact)
        for path in session.residual:
            remover.residual(path)

    # -- helpers for subclasses -----------------------------------------
    def root_problem(self, path: Path) -> str | None:
        return disk.root_problem(path, self.env.uid) if os.path.lexists(path) else None

    def agent_binary(self, name: str) -> str | None:
        """The agent's own command on the caller's PATH (the Env's, not ours)."""
        return shutil.which(name, path=self.env.get("PATH") or os.defpath)

    def run_agent(self, argv: list[str], timeout: float) -> AgentRun:
        """Run an agent's own command in the caller's environment. stdin is
        /dev/null so a confirmation prompt cannot wait forever, and the
        command is killed after `timeout` seconds."""
        try:
            proc = subprocess.run(
                argv,
                env=dict(self.env.environ),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return AgentRun("", f"timed out after {timeout:g} s")
        except OSError as exc:
            return AgentRun("", str(exc))
        if proc.returncode != 0:
            return AgentRun(proc.stdout, f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        return AgentRun(proc.stdout, None)


@dataclass(frozen=True)
class AgentRun:
    """What an agent's own command printed; `failure` is None when it exited 0."""

    stdout: str
    failure: str | None


def dir_var(env: Env, var: str) -> Path | None:
    """The directory an agent's variable names (`~` and `~/...` expanded as
    the agents expand them), or None when it is unset or empty. A relative
    path is ignored with a warning: the agent resolves it against its own
    working directory, which agentkeep cannot know."""
    value = env.get(var)
    if not value:
        return None
    if value == "~" or value.startswith("~/"):
        value = str(env.home) + value[1:]
    path = Path(value)
    if not path.is_absolute():
        log.warning("relative directory ignored", variable=var, value=value)
        return None
    return path


def tmp_dirs(env: Env, first: Sequence[str] = (), below: str = "") -> list[Path]:
    """`below` in each tmp dir an agent may use: those the variables `first`
    name, $TMPDIR, $TMP, $TEMP and the system tmp dir (the order Node's and
    Bun's tmpdir() read them in), the first spelling of each real path."""
    candidates = [dir_var(env, var) for var in (*first, "TMPDIR", "TMP", "TEMP")]
    candidates.append(env.system_tmp)
    unique: dict[str, Path] = {}
    for base in candidates:
        if base is not None:
            path = base / below if below else base
            unique.setdefault(os.path.realpath(path), path)
    return list(unique.values())


# The ids of zero, grok, gemini and opencode (and a store's path components
# are checked by valid_name): a letter or digit, then up to 127 more of
# letters, digits, `_` and `-`. No `/`, `.` or `..` can ever pass.
NAME_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def valid_name(name: str) -> bool:
    """A single path component that cannot walk anywhere."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


# -- shared helpers for adapters whose sessions are directories -------------


@dataclass(frozen=True)
class Entry:
    """One directory entry: `link` when the entry itself is a symbolic link,
    `dir` when it is a directory or a link to one."""

    name: str
    path: str
    link: bool
    dir: bool


def entries(directory: str | os.PathLike[str], unlisted: Unlisted | None = None) -> list[Entry]:
    """The entries of `directory`, sorted by name, listed without moving its
    atime (a link at `directory` itself is listed through, so what lies behind
    it can be reported as linked). A missing directory has none; one that
    cannot be listed has none, and is added to `unlisted`. A name that is
    not UTF-8 comes as the OS gives it (lone surrogates), and travels so
    through the index and the reports."""
    directory = os.fspath(directory)
    # The directory entry's own type (d_type) tells links and directories
    # apart without a stat per entry; only a link is stat'ed, to see
    # whether it leads to a directory.
    listed: list[tuple[str, bool, bool]] = []
    try:
        with disk.scandir(directory, follow=True) as listing:
            for entry in listing:
                try:
                    listed.append(
                        (entry.name, entry.is_symlink(), entry.is_dir(follow_symlinks=False))
                    )
                except OSError:
                    continue  # vanished while listed
    except OSError as exc:
        if unlisted_error(exc):
            Unlisted.note(unlisted, directory, exc)
        return []
    found: list[Entry] = []
    for name, link, is_dir in sorted(listed):
        path = os.path.join(directory, name)
        if link:
            try:
                is_dir = stat.S_ISDIR(os.stat(path).st_mode)
            except OSError:
                is_dir = False  # a dangling link
        found.append(Entry(name, path, link, is_dir))
    return found


def utf8_name(name: str) -> bool:
    """A name that can be stored and reported (no undecodable bytes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def directory_artifacts(
    directory: str,
    root: str,
    *,
    primary: str,
    kinds: Mapping[str, str],
    linked: bool,
    seen: set[tuple[int, int]],
    container: str = "session-dir",
    unlisted: Unlisted | None = None,
) -> list[Artifact]:
    """A session directory, entry by entry: the entry named `primary` (the
    record the agent lists the session by) first, every other entry next, and
    the directory itself last, as the container of whatever was not listed.

    Listing entries rather than measuring the whole tree keeps the primary's
    bytes from being counted twice while it is still removed before the rest
    (invariant 5). Entries reached through a link at `directory` are linked
    (never removed); the link itself is the container, removed as the link
    alone. A name that is not UTF-8 cannot be stored, so it is measured into
    the container, which takes it along. Empty when `directory` is gone. A
    directory that cannot be listed is added to `unlisted`.
    """
    unlisted = Unlisted() if unlisted is None else unlisted
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        unlisted.add(directory, exc)
        return [Artifact(directory, container, 0, None, root, linked=linked, is_dir=True)]
    through = linked or stat.S_ISLNK(st.st_mode)
    found: list[Artifact] = []
    leftover, newest, complete = 0, st.st_mtime, True
    # What the directory itself takes on disk, as du counts it.
    leftover_disk = st.st_blocks * 512
    try:
        with disk.scandir(directory, follow=True) as listing:
            names = sorted(entry.name for entry in listing)
    except FileNotFoundError:
        names = []
    except OSError as exc:
        unlisted.add(directory, exc)
        names, complete = [], False
    for name in names:
        path = os.path.join(directory, name)
        if utf8_name(name):
            kind, is_primary = kinds.get(name, "data"), name == primary
            item = disk.artifact(path, kind, root, primary=is_primary, linked=through, seen=seen)
            if item is not None:
                found.append(item)
            continue
        tree = disk.measure(path, seen)
        if tree is not None:
            leftover += tree.bytes
            leftover_disk += tree.disk_bytes
            newest = max(newest, tree.mtime or newest)
            complete = complete and tree.complete
    found.sort(key=lambda a: not a.primary)
    found.append(
        Artifact(
            path=directory,
            kind=container,
            bytes=leftover,
            mtime=newest if complete else None,
            root=root,
            linked=linked,
            is_dir=True,
            disk_bytes=leftover_disk,
        )
    )
    return found


def parts_below(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> list[str] | None:
    """The components of `path` below `root`, compared component by component
    (never as strings: a root /x/ab does not contain /x/abc/...); [] for root
    itself. None when `path` is not absolute, not below `root`, or holds a
    `..` component (which could walk anywhere)."""
    text = os.fspath(path)
    if not os.path.isabs(text) or "\0" in text:
        return None
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    base = [p for p in os.fspath(root).split("/") if p not in ("", ".")]
    if parts[: len(base)] != base:
        return None
    return parts[len(base) :]
