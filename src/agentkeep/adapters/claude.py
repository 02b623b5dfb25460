"""Claude Code: sessions under its config root (transcripts always in
`<config>/projects`) and its tmp roots.

Layout (FIELD-NOTES.md "Claude Code"): per session id, `projects/<key>/<id>.jsonl`
(the transcript, what `claude --resume` lists: primary), `projects/<key>/<id>/`
(subagents, tool results), `projects/<key>/<id>.ccr-tip.json`,
`projects/<key>/<id>-<ms>.cast`, `file-history/<id>/`, `session-env/<id>/`,
`tasks/<id>/` (2.x) or `todos/<id>-agent-*.json` (older), `uploads/<id>/`,
`debug/<id>.txt`, `usage-data/{session-meta,facets}/<id>.json`, `jobs/<id[:8]>/`
(when its state.json names the id), the registry `sessions/<pid>.json` naming
the id with its `sessions/<pid>.<hex>.key`, and `<tmp>/claude-<uid>/<key>/<id>/`.
Everything else there is shared.

A scan lists each directory once and groups what it finds by id; `load` probes
one id's paths directly. Listings and reads go through descriptors opened
without moving atimes, and only the head of a transcript is ever read. A link
is followed only where a key dir, an area or a job dir is itself a link, to
report what lies behind it (following a link moves the link's own atime).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import psutil
import structlog

from agentkeep import disk
from agentkeep.adapters.base import Adapter, Remover, Root, ScanPart, valid_name
from agentkeep.model import Holder, HolderKind, Session
from agentkeep.paths import Env
from agentkeep.processes import Proc, ProcessTable

log = structlog.get_logger("agentkeep.adapters.claude")

TRANSCRIPT = "transcript"
SESSION_DIR = "session-dir"
FILE_HISTORY = "file-history"
SESSION_ENV = "session-env"
TASKS = "tasks"
UPLOADS = "uploads"
TODOS = "todos"
DEBUG_LOG = "debug-log"
USAGE_DATA = "usage-data"
REMOTE_TIP = "remote-tip"
RECORDING = "recording"
JOB = "job"
REGISTRY = "registry"
REGISTRY_KEY = "registry-key"
TMP = "tmp"

# How much of a transcript is read for `cwd` and `forkedFrom`. Claude writes
# both on the first message records (a fork's copied records carry
# `forkedFrom`), so the head suffices; a fork record that first appears later
# than this is not seen, and the session then has no parent. Reading whole
# transcripts (hundreds of MB) on every scan is not an option.
TRANSCRIPT_HEAD = 64 * 1024
# state.json and registry files are a few hundred bytes; anything bigger is
# not what we think it is.
SMALL_JSON = 64 * 1024
# psutil's start time moves with clock steps: a registry file is stale only
# when it claims a start this much before the process's.
START_SLACK_S = 5.0

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_TODO = re.compile(r"(?P<id>[0-9a-fA-F-]{36})-agent-.+\.json")
_JOB = re.compile(r"[0-9a-fA-F]{8}")
_REGISTRY = re.compile(r"(?P<pid>[0-9]{1,10})\.json")
_REGISTRY_KEY = re.compile(r"(?P<pid>[0-9]{1,10})\.[0-9a-fA-F]+\.key")
# Sessions per scan part: enough that a part's hand-over to a worker
# process is small beside its measuring, few enough to share out evenly.
SCAN_PART = 1000
_RECORDING = re.compile(r"(?P<id>[0-9a-fA-F-]{36})-[0-9]{1,20}\.cast")
_REMOTE_TIP_SUFFIX = ".ccr-tip.json"


def canonical(raw: object) -> str | None:
    """A canonical Claude session id (a lowercased 8-4-4-4-12 hex UUID) or None."""
    if isinstance(raw, str) and _UUID.fullmatch(raw):
        return raw.lower()
    return None


def _named(suffix: str) -> Callable[[str], str | None]:
    """The id of a name that is `<id><suffix>`."""

    def identify(name: str) -> str | None:
        return canonical(name[: len(name) - len(suffix)]) if name.endswith(suffix) else None

    return identify


def _todo_id(name: str) -> str | None:
    match = _TODO.fullmatch(name)
    return canonical(match["id"]) if match else None


@dataclass(frozen=True)
class _Area:
    """A directory of the config root whose entries are named by session:
    `<area>/<id><suffix>` (a directory when `suffix` is empty, and then
    everything below it is the session's too), or, when `suffix` is None,
    names `identify` reads the id from (listed, not probed)."""

    path: str
    kind: str
    identify: Callable[[str], str | None]
    suffix: str | None

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.path.split("/"))

    def probe(self, spellings: list[str] | None) -> list[str] | None:
        if spellings is None or self.suffix is None:
            return None
        return [s + self.suffix for s in spellings]


def _area(path: str, kind: str, suffix: str) -> _Area:
    return _Area(path, kind, _named(suffix), suffix)


# What Claude writes per session under its config root (FIELD-NOTES.md):
# 2.x writes tasks/<id>/ where older versions wrote todos/; uploads/<id>/
# holds a session's attachments; usage-data/ is /insights' cache of each
# session's analysis. Each is what Claude's own sweep treats as per-session.
_AREAS: tuple[_Area, ...] = (
    _area("file-history", FILE_HISTORY, ""),
    _area("session-env", SESSION_ENV, ""),
    _area("tasks", TASKS, ""),
    _area("uploads", UPLOADS, ""),
    _Area("todos", TODOS, _todo_id, None),
    _area("debug", DEBUG_LOG, ".txt"),
    _area("usage-data/session-meta", USAGE_DATA, ".json"),
    _area("usage-data/facets", USAGE_DATA, ".json"),
)
_WATCHED_AREAS = (*(a.path for a in _AREAS), "jobs", "sessions")


@dataclass(slots=True)
class _Entry:
    """One directory entry: `link` when the entry itself is a symbolic link,
    `dir` when it is a directory (never for a link: finding out where a link
    leads follows it, and following a link moves the link's atime)."""

    name: str
    path: str
    link: bool
    dir: bool


@dataclass
class _Registry:
    """`sessions/` read into who names whom, as of the directory's mtime:
    each pid's `<pid>.json`, its `<pid>.<digest>.key` files, the session its
    record names, and the reverse of that."""

    mtime: int
    files: dict[str, _Entry]
    keys: dict[str, list[_Entry]]
    sid_of: dict[str, str | None]
    pids_of: dict[str, set[str]]

    def name(self, pid: str, sid: str | None) -> None:
        old = self.sid_of.get(pid)
        if old is not None and old != sid:
            self.pids_of[old].discard(pid)
        self.sid_of[pid] = sid
        if sid is not None:
            self.pids_of.setdefault(sid, set()).add(pid)

    def forget(self, name: str) -> None:
        if match := _REGISTRY.fullmatch(name):
            pid = match["pid"]
            self.files.pop(pid, None)
            self.name(pid, None)
        elif match := _REGISTRY_KEY.fullmatch(name):
            kept = [e for e in self.keys.get(match["pid"], []) if e.name != name]
            self.keys[match["pid"]] = kept


@dataclass(frozen=True)
class _Paths:
    """The roots' paths as the environment names them."""

    config: Path
    projects: Path
    tmp: tuple[Path, ...]


@dataclass(frozen=True)
class _Layout:
    config: Root
    # Always `<config>/projects`: a link there is a linked directory below
    # the config root.
    projects: Root
    tmp: tuple[Root, ...]


# One artifact found by name, before it is measured: (path, kind, root,
# linked, primary, foreign). A tuple: a big scan finds some 300,000 and pickles them
# over to worker processes, and a tuple is built and pickled several times
# faster than a dataclass.
_Item = tuple[str, str, str, bool, bool, bool]
# One session found: (id, its items, the parent its job names).
_FoundSession = tuple[str, list[_Item], str | None]


class _Grouped:
    """What one pass found, grouped by session id (only those in `only`
    when it is given)."""

    def __init__(self, only: frozenset[str] | None) -> None:
        self.only = only
        self.found: dict[str, dict[str, _Item]] = defaultdict(dict)
        self.job_parents: dict[str, str] = {}

    def add(
        self, sid: str | None, path: str, kind: str, root: Root, linked: bool, primary: bool = False
    ) -> None:
        if sid is None or (self.only is not None and sid not in self.only):
            return
        foreign = root.problem is not None  # another user's root: not our activity
        self.found[sid].setdefault(path, (path, kind, str(root.path), linked, primary, foreign))

    def take(self, sid: str) -> _FoundSession:
        """What was found of `sid`, handed over (and forgotten here)."""
        return sid, list(self.found.pop(sid, {}).values()), self.job_parents.get(sid)


def _measure(sid: str, found: list[_Item], job_parent: str | None) -> Session | None:
    """Measure what was found of a session into a Session; None when all of
    it vanished meanwhile."""
    seen: set[tuple[int, int]] = set()
    items = sorted(found, key=lambda f: (not f[4], f[0]))
    artifacts = []
    for path, kind, root, linked, primary, foreign in items:
        artifact = disk.artifact(
            path, kind, root, primary=primary, linked=linked, seen=seen, foreign=foreign
        )
        if artifact is not None:
            artifacts.append(artifact)
    if not artifacts:
        return None
    workspace, parent = _lineage(sid, [item[0] for item in items if item[4]])
    return Session(
        agent=ClaudeAdapter.name,
        id=sid,
        workspace=workspace,
        parent=parent or job_parent,
        artifacts=artifacts,
        bytes=sum(a.bytes for a in artifacts),
    )


@dataclass(frozen=True)
class _Measuring:
    """A scan part: sessions one listing found, measured where it runs (in a
    worker process for a big home: measuring is most of a scan)."""

    found: list[_FoundSession]

    def __call__(self) -> Iterator[Session]:
        for what in self.found:
            session = _measure(*what)
            if session is not None:
                yield session


def _lineage(sid: str, transcripts: list[str]) -> tuple[str | None, str | None]:
    """The workspace (the records' cwd, never the lossy key) and the parent a
    fork names, from the heads of the session's transcripts."""
    workspace: str | None = None
    parent: str | None = None
    for path in transcripts:
        data = _read_head(path, TRANSCRIPT_HEAD)
        if data is None:
            continue
        cwd, fork = _transcript_facts(sid, data)
        workspace = workspace or cwd
        parent = parent or fork
        if workspace and parent:
            break
    return workspace, parent


def _list(directory: str, probe: Sequence[str] | None) -> list[_Entry]:
    """The entries of `directory` (following a link at `directory` itself, so
    a linked directory can be reported), or only those named in `probe`."""
    if probe is not None:
        return [e for e in (_probe(directory, name) for name in dict.fromkeys(probe)) if e]
    entries: list[_Entry] = []
    prefix = directory.rstrip("/") + "/"
    try:
        with disk.scandir(directory, follow=True) as it:
            for entry in it:
                path = prefix + entry.name
                try:
                    link, is_dir = entry.is_symlink(), entry.is_dir(follow_symlinks=False)
                    entries.append(_Entry(entry.name, path, link, is_dir))
                except OSError:
                    continue  # vanished while listed
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.info("cannot list directory", path=directory, error=str(exc))
    return entries


_LINK, _DIR = 1, 2


def _flags(entry: _Entry) -> int:
    return (_LINK if entry.link else 0) | (_DIR if entry.dir else 0)


def _entry(directory: str, name: str, flags: int) -> _Entry:
    """The _Entry _list() made for `name`, from its flags."""
    return _Entry(name, directory.rstrip("/") + "/" + name, bool(flags & _LINK), bool(flags & _DIR))


def _probe(directory: str, name: str) -> _Entry | None:
    path = os.path.join(directory, name)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return _Entry(name, path, stat.S_ISLNK(st.st_mode), stat.S_ISDIR(st.st_mode))


def _alive_pids() -> set[int] | None:
    """Every live pid; None when the process table cannot be read."""
    try:
        return set(psutil.pids())
    except (psutil.Error, OSError):
        return None


def _project_entry(name: str) -> tuple[str, str] | None:
    """(id, kind) of a session's entry in `projects/<key>/`: its transcript
    `<id>.jsonl`, its directory `<id>/`, the remote session's tip
    `<id>.ccr-tip.json`, a recording `<id>-<ms>.cast`. None for the rest
    (memory/ and anything else there is shared)."""
    for suffix, kind in ((".jsonl", TRANSCRIPT), (_REMOTE_TIP_SUFFIX, REMOTE_TIP)):
        if name.endswith(suffix):
            sid = canonical(name[: -len(suffix)])
            return (sid, kind) if sid is not None else None
    if match := _RECORDING.fullmatch(name):
        sid = canonical(match["id"])
        return (sid, RECORDING) if sid is not None else None
    sid = canonical(name)
    return (sid, SESSION_DIR) if sid is not None else None


def _project_id(name: str) -> str | None:
    entry = _project_entry(name)
    return entry[0] if entry is not None else None


def _listable(entry: _Entry) -> bool:
    """A key directory to list: a directory, or a link to one (followed, so
    that what lies behind it can be reported)."""
    if entry.link:
        return os.path.isdir(entry.path)
    return entry.dir and valid_name(entry.name)


def _spellings(sids: frozenset[str]) -> list[str]:
    """The names the ids may have on disk: as written and uppercase (macOS
    file systems fold case, and Claude has written both)."""
    return [name for sid in sorted(sids) for name in (sid, sid.upper())]


def _read_head(path: str, limit: int) -> bytes | None:
    """Up to `limit` bytes from the start of a regular file, without following a
    link at `path`, blocking on a FIFO, or moving its atime. None if unreadable."""
    try:
        fd = disk.open_noatime(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_json(path: str) -> object:
    """A small JSON file's value; None when missing, unreadable or malformed."""
    data = _read_head(path, SMALL_JSON + 1)
    if data is None or len(data) > SMALL_JSON:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        log.info("malformed json skipped", path=path)
        return None


def _transcript_facts(sid: str, data: bytes) -> tuple[str | None, str | None]:
    """(cwd, forkedFrom.sessionId) from a transcript's head. Malformed lines
    are skipped, and so is the line the read limit cut (a cut JSON object
    never parses); a forkedFrom naming the session itself is ignored."""
    lines = data.split(b"\n")
    cwd: str | None = None
    fork: str | None = None
    want_fork = b'"forkedFrom"' in data
    for line in lines:
        if not ((cwd is None and b'"cwd"' in line) or (want_fork and b'"forkedFrom"' in line)):
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        value = record.get("cwd")
        if cwd is None and isinstance(value, str) and value and "\0" not in value:
            cwd = value
        forked = record.get("forkedFrom")
        if want_fork and isinstance(forked, dict):
            parent = canonical(forked.get("sessionId"))
            if parent is not None and parent != sid:
                fork, want_fork = parent, False
        if cwd is not None and not want_fork:
            break
    return cwd, fork


def _started_seconds(value: object) -> float | None:
    """A registry `startedAt` (ms) as seconds, or None for "cannot tell"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = value / 1000
    except OverflowError:
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    return seconds


def _proc_start_ticks(pid: int) -> str | None:
    """The process's start time as /proc/<pid>/stat gives it (field 22, clock
    ticks since boot): what newer Claude versions write as `procStart`."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    fields = raw.rpartition(b")")[2].split()
    # Fields after the command name start at field 3 (state).
    return fields[19].decode() if len(fields) > 19 else None


def _same_process(record: dict[str, object], proc: Proc) -> bool | None:
    """Whether the registry file was written by the live process with its
    pid: True, False (a reused pid), None (cannot tell: counts as in use).

    procStart can only confirm: its format is not promised, and reading it
    wrongly must not make a live session look stale, so a mismatch falls
    through to startedAt, which alone can call a registry file stale.
    """
    proc_start = record.get("procStart")
    if isinstance(proc_start, str | int) and not isinstance(proc_start, bool):
        actual = _proc_start_ticks(proc.pid)
        if actual is not None and str(proc_start).strip() == actual:
            return True
    started = _started_seconds(record.get("startedAt"))
    if started is None:
        return None
    return started >= proc.create_time - START_SLACK_S


class _Listings:
    """Listings of the directories many sessions share (the project and tmp
    key dirs, the config areas, sessions/ named by pid),
    and the registry records read from them. Without this, listing a few
    sessions again costs a pass over every session's files, and a prune of N
    sessions costs N of them. A listing is reused while its directory's mtime is the
    same (a new or removed file changes it); a record is re-read whenever
    its file's (mtime, size, inode) changed (a /clear or /resume inside a
    running claude rewrites it in place). agentkeep's own removals patch the
    listing: they change the mtime, not what anyone else wrote."""

    def __init__(self) -> None:
        # directory -> (mtime, {name: _LINK/_DIR flags}); an _Entry is made
        # when asked for (at 50,000 sessions, kept ones cost ~35 MB).
        self._dirs: dict[str, tuple[int, dict[str, int]]] = {}
        self._records: dict[str, tuple[tuple[int, int, int], object]] = {}
        self._named: dict[str, tuple[int, dict[str | None, list[str]]]] = {}
        self._registries: dict[str, _Registry] = {}

    def named(
        self, directory: str, identify: Callable[[str], str | None], sids: frozenset[str]
    ) -> list[_Entry]:
        """The entries of `directory` whose names `identify` as one of `sids`."""
        listed = self._listing(directory)
        if listed is None:  # cannot be stat'ed: listed afresh, nothing kept
            return [e for e in _list(directory, None) if identify(e.name) in sids]
        mtime, names = listed
        index = self._named.get(directory)
        if index is None or index[0] != mtime:
            by_id: dict[str | None, list[str]] = defaultdict(list)
            for name in names:
                by_id[identify(name)].append(name)
            index = (mtime, by_id)
            self._named[directory] = index
        by_sid = index[1]
        return [
            _entry(directory, n, names[n])
            for sid in sids
            for n in by_sid.get(sid, [])
            if n in names
        ]

    def entries(self, directory: str) -> list[_Entry]:
        listed = self._listing(directory)
        if listed is None:
            return _list(directory, None)
        return [_entry(directory, name, flags) for name, flags in listed[1].items()]

    def _listing(self, directory: str) -> tuple[int, dict[str, int]] | None:
        """(mtime, flags by name), listed again only when the mtime moved."""
        try:
            mtime = os.stat(directory).st_mtime_ns
        except OSError:
            self._dirs.pop(directory, None)
            return None
        cached = self._dirs.get(directory)
        if not cached or cached[0] != mtime:
            cached = (mtime, {e.name: _flags(e) for e in _list(directory, None)})
            self._dirs[directory] = cached
        return cached

    def record(self, path: str, still: bool = False) -> object:
        """The JSON in `path`, re-read when its file changed. `still`: the
        file's process has exited, and a file nobody is left to rewrite is
        taken as last read (its listing's mtime still holds) without a stat."""
        if still and path in self._records:
            return self._records[path][1]
        try:
            st = os.lstat(path)
        except OSError:
            self._records.pop(path, None)
            return None
        signature = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._records.get(path)
        if cached is None or cached[0] != signature:
            cached = (signature, _read_json(path))
            self._records[path] = cached
        return cached[1]

    def registry(self, directory: str, alive: set[int] | None) -> _Registry | None:
        """`sessions/` as a _Registry, kept while its mtime holds. Only a
        live process rewrites its record in place: those records (every
        record when `alive` is None: cannot tell who is alive) are looked at
        again on every call, the rest only when the directory changes. So a
        re-check costs the live processes' files, not every file there."""
        listed = self._listing(directory)
        if listed is None:
            self._registries.pop(directory, None)
            return None
        mtime, names = listed
        registry = self._registries.get(directory)
        if registry is None or registry.mtime != mtime:
            registry = _Registry(mtime, {}, defaultdict(list), {}, {})
            for name, flags in names.items():
                if match := _REGISTRY.fullmatch(name):
                    registry.files[match["pid"]] = _entry(directory, name, flags)
                elif match := _REGISTRY_KEY.fullmatch(name):
                    registry.keys[match["pid"]].append(_entry(directory, name, flags))
            changing: Iterable[str] = registry.files.keys()
            self._registries[directory] = registry
        elif alive is None:
            changing = registry.files.keys()
        else:
            changing = {str(pid) for pid in alive} & registry.files.keys()
        for pid in changing:
            entry = registry.files[pid]
            still = alive is not None and int(pid) not in alive
            registry.name(pid, _registry_id(self.record(entry.path, still)))
        return registry

    def removed(self, paths: Sequence[str]) -> None:
        """agentkeep removed `paths`: drop them, keep the rest of the listing."""
        for path in paths:
            directory, name = os.path.split(path)
            self._records.pop(path, None)
            cached = self._dirs.get(directory)
            if cached is None:
                continue
            cached[1].pop(name, None)
            try:
                mtime = os.stat(directory).st_mtime_ns
            except OSError:
                self._dirs.pop(directory, None)
                self._named.pop(directory, None)
                continue
            self._dirs[directory] = (mtime, cached[1])
            registry = self._registries.get(directory)
            if registry is not None and registry.mtime == cached[0]:
                registry.forget(name)
                registry.mtime = mtime
            named = self._named.get(directory)
            if named is not None and named[0] == cached[0]:
                # Still right: named() skips names no longer listed.
                self._named[directory] = (mtime, named[1])


class ClaudeAdapter(Adapter):
    name = "claude"
    evidence_kinds = frozenset({REGISTRY})
    # A canonical UUID in either spelling, wherever it stands in a name (a
    # name that carries the id is worth reporting). Claude has no databases.
    id_in_name = _UUID

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self._listings = _Listings()

    # -- where ----------------------------------------------------------
    def _dir_var(self, var: str) -> Path | None:
        value = self.env.get(var)
        if value is None:
            return None
        if value == "~" or value.startswith("~/"):
            value = str(self.env.home) + value[1:]
        path = Path(value)
        if not path.is_absolute():
            log.warning("relative directory ignored", variable=var, value=value)
            return None
        return path

    def _config_dir(self) -> Path:
        return self._dir_var("CLAUDE_CONFIG_DIR") or self.env.home / ".claude"

    def _tmp_dirs(self) -> list[Path]:
        """`claude-<uid>` under each tmp dir, first spelling of each real path.
        Claude always appends `claude-<uid>`, to $CLAUDE_CODE_TMPDIR too (and
        sets that variable to its own `claude-<uid>` for the commands it
        runs, so a claude started there writes `claude-<uid>/claude-<uid>`)."""
        per_uid = f"claude-{self.env.uid}"
        candidates: list[Path] = []
        for var in ("CLAUDE_CODE_TMPDIR", "TMPDIR", "TMP", "TEMP"):
            base = self._dir_var(var)
            if base is not None:
                candidates.append(base / per_uid)
        candidates.append(self.env.system_tmp / per_uid)
        unique: dict[str, Path] = {}
        for path in candidates:
            unique.setdefault(os.path.realpath(path), path)
        return list(unique.values())

    @cached_property
    def _paths(self) -> _Paths:
        # Env never changes, so neither do the paths; root problems do, and
        # are checked afresh by every _layout().
        # Transcripts are always under <config>/projects. $CLAUDE_PROJECT_DIR
        # is never read: Claude sets it to the workspace (the user's own code)
        # for the hooks it runs, and reading it as a projects dir would
        # remove the user's files.
        config = self._config_dir()
        return _Paths(config, config / "projects", tuple(self._tmp_dirs()))

    def _layout(self, check: bool = True) -> _Layout:
        """Every root; `check` computes each root's problem (path lookups,
        which only map names, skip it)."""

        def root(path: Path, kind: str) -> Root:
            return Root(path, kind, self.root_problem(path) if check else None)

        paths = self._paths
        return _Layout(
            config=root(paths.config, "config"),
            projects=root(paths.projects, "projects"),
            tmp=tuple(root(path, "tmp") for path in paths.tmp),
        )

    def roots(self) -> list[Root]:
        layout = self._layout()
        return [layout.config, layout.projects, *layout.tmp]

    def watch_dirs(self) -> list[Path]:
        layout = self._layout(check=False)
        config, projects = layout.config.path, layout.projects.path
        dirs = [config, projects]
        dirs += [Path(e.path) for e in _list(str(projects), None) if _listable(e)]
        dirs += [config / area for area in _WATCHED_AREAS]
        for root in layout.tmp:
            dirs.append(root.path)
            dirs += [Path(e.path) for e in _list(str(root.path), None) if _listable(e)]
        return [d for d in dict.fromkeys(dirs) if d.is_dir()]

    # -- what -----------------------------------------------------------
    def canonical_id(self, raw: str) -> str | None:
        return canonical(raw)

    def expected_sessions(self) -> int:
        """The transcripts in the key dirs, counted by name alone."""
        count = 0
        for key in _list(str(self._paths.projects), None):
            if not _listable(key):
                continue
            try:
                with disk.scandir(key.path, follow=True) as listing:
                    count += sum(entry.name.endswith(".jsonl") for entry in listing)
            except OSError:
                continue  # the scan logs what it cannot list
        return count

    def scan(self) -> Iterator[Session]:
        for part in self.scan_parts():
            yield from part()

    def scan_parts(self) -> Iterator[ScanPart]:
        """One listing of every shared directory, then the measuring of what
        it found in parts of SCAN_PART sessions."""
        found = self._find(self._layout(), None)
        sids = sorted(found.found)
        for start in range(0, len(sids), SCAN_PART):
            yield _Measuring([found.take(sid) for sid in sids[start : start + SCAN_PART]])

    def list_again(self, session_ids: frozenset[str]) -> dict[str, Session]:
        """One pass over the shared directories for all of them: listing each
        session again on its own cost a look at every key dir per session."""
        found = self._find(self._layout(), session_ids)
        listed = {sid: _measure(*found.take(sid)) for sid in session_ids}
        return {sid: s for sid, s in listed.items() if s is not None}

    def _find(self, layout: _Layout, only: frozenset[str] | None) -> _Grouped:
        found = _Grouped(only)
        self._find_projects(layout, found)
        self._find_config(layout, found)
        self._find_jobs(layout, found)
        self._find_registry(layout, found)
        self._find_tmp(layout, found)
        return found

    def _find_projects(self, layout: _Layout, found: _Grouped) -> None:
        root = layout.projects
        base_linked = bool(root.problem) or disk.is_link(root.path)
        for key in self._entries(str(root.path), found.only):
            # A linked key is listed only to report what is behind it.
            if not _listable(key):
                continue
            linked = base_linked or key.link
            for entry in self._entries(key.path, found.only, _project_id):
                named = _project_entry(entry.name)
                if named is None:
                    continue
                sid, kind = named
                found.add(sid, entry.path, kind, root, linked, primary=kind == TRANSCRIPT)

    def _entries(
        self,
        directory: str,
        only: frozenset[str] | None,
        identify: Callable[[str], str | None] | None = None,
    ) -> list[_Entry]:
        """A directory's entries: all of them, freshly listed, for a scan;
        for some sessions (`only`), those whose names `identify` as one of
        them (all when no `identify`), from a listing reused while the
        directory's mtime holds."""
        if only is None:
            return _list(directory, None)
        if identify is None:
            return self._listings.entries(directory)
        return self._listings.named(directory, identify, only)

    def _find_config(self, layout: _Layout, found: _Grouped) -> None:
        spellings = None if found.only is None else _spellings(found.only)
        # A link where a session's entry belongs is that artifact, removed as
        # the link alone; only an area that is itself a link makes its
        # entries linked (reached through a link: never removed).
        cached = found.only is not None
        for area in _AREAS:
            probe = area.probe(spellings)
            listed = self._config_entries(
                layout, area.path, probe, cached, area.identify, found.only
            )
            for entry, linked in listed:
                found.add(area.identify(entry.name), entry.path, area.kind, layout.config, linked)

    def _config_entries(
        self,
        layout: _Layout,
        area: str,
        probe: Sequence[str] | None,
        cached: bool = False,
        identify: Callable[[str], str | None] | None = None,
        only: frozenset[str] | None = None,
    ) -> Iterator[tuple[_Entry, bool]]:
        """Entries of `<config>/<area>`, each with whether it lies behind a
        link (the area itself is one) or on an unsafe root. `cached`: listing
        some sessions may reuse a recent listing (see _Listings)."""
        directory = layout.config.path / area
        linked = bool(layout.config.problem) or _linked_below(layout.config.path, area)
        if probe is None and cached and identify is not None and only is not None:
            listing = self._listings.named(str(directory), identify, only)
        elif probe is None and cached:
            listing = self._listings.entries(str(directory))
        else:
            listing = _list(str(directory), probe)
        for entry in listing:
            yield entry, linked

    def _find_jobs(self, layout: _Layout, found: _Grouped) -> None:
        spellings = None if found.only is None else _spellings(found.only)
        probe = None if spellings is None else [s[:8] for s in spellings]
        for entry, linked in self._config_entries(layout, "jobs", probe):
            if not (entry.dir or entry.link) or not _JOB.fullmatch(entry.name):
                continue
            state = _read_json(os.path.join(entry.path, "state.json"))
            if not isinstance(state, dict):
                log.debug("job without a readable state.json", path=entry.path)
                continue
            sid = canonical(state.get("sessionId"))
            # Another session can share the 8-char prefix: only state.json decides.
            if sid is None or sid[:8] != entry.name.lower():
                log.debug("job not named by its state.json", path=entry.path)
                continue
            found.add(sid, entry.path, JOB, layout.config, linked)
            parent = canonical(state.get("forkParentSessionId"))
            if parent is not None and parent != sid:
                found.job_parents.setdefault(sid, parent)

    def _find_registry(self, layout: _Layout, found: _Grouped) -> None:
        if found.only is not None:
            self._find_registered(layout, found, found.only)
            return
        by_pid: dict[str, str] = {}
        keys: list[tuple[_Entry, bool, str]] = []
        for entry, linked in self._config_entries(layout, "sessions", None):
            if match := _REGISTRY.fullmatch(entry.name):
                sid = _registry_id(_read_json(entry.path))
                if sid is not None:
                    by_pid[match["pid"]] = sid
                    found.add(sid, entry.path, REGISTRY, layout.config, linked)
            elif match := _REGISTRY_KEY.fullmatch(entry.name):
                keys.append((entry, linked, match["pid"]))
        for entry, linked, pid in keys:
            found.add(by_pid.get(pid), entry.path, REGISTRY_KEY, layout.config, linked)

    def _find_registered(self, layout: _Layout, found: _Grouped, sids: frozenset[str]) -> None:
        """The registry files naming the sessions, from the cached registry."""
        directory = layout.config.path / "sessions"
        registry = self._listings.registry(str(directory), _alive_pids())
        if registry is None:
            return
        linked = bool(layout.config.problem) or disk.is_link(directory)
        for sid in sids:
            for pid in sorted(registry.pids_of.get(sid, ())):
                found.add(sid, registry.files[pid].path, REGISTRY, layout.config, linked)
                for key in registry.keys.get(pid, []):
                    found.add(sid, key.path, REGISTRY_KEY, layout.config, linked)

    def _find_tmp(self, layout: _Layout, found: _Grouped) -> None:
        for root in layout.tmp:
            for key in self._entries(str(root.path), found.only):
                if not _listable(key):
                    continue
                for entry in self._entries(key.path, found.only, canonical):
                    linked = bool(root.problem) or key.link
                    found.add(canonical(entry.name), entry.path, TMP, root, linked)

    def session_for_path(self, path: str) -> str | None:
        path = os.path.abspath(path)
        layout = self._layout(check=False)
        parts = _below(path, layout.projects.path)
        if parts is not None:
            return _project_path_id(parts)
        parts = _below(path, layout.config.path)
        if parts is not None:
            return self._config_path_id(layout, parts)
        for root in layout.tmp:
            parts = _below(path, root.path)
            if parts is not None:
                return canonical(parts[1]) if len(parts) >= 2 else None
        return None

    def _config_path_id(self, layout: _Layout, parts: list[str]) -> str | None:
        for known in _AREAS:
            depth = len(known.parts)
            if tuple(parts[:depth]) == known.parts and len(parts) > depth:
                # A session's directory holds its files; a file is itself.
                if known.suffix == "" or len(parts) == depth + 1:
                    return known.identify(parts[depth])
                return None
        if len(parts) < 2:
            return None
        area, name = parts[0], parts[1]
        if area == "jobs" and _JOB.fullmatch(name):
            state = _read_json(str(layout.config.path / "jobs" / name / "state.json"))
            sid = canonical(state.get("sessionId")) if isinstance(state, dict) else None
            return sid if sid is not None and sid[:8] == name.lower() else None
        if area == "sessions" and len(parts) == 2:
            match = _REGISTRY.fullmatch(name) or _REGISTRY_KEY.fullmatch(name)
            if match:
                registry = layout.config.path / "sessions" / f"{match['pid']}.json"
                return _registry_id(_read_json(str(registry)))
        return None

    # -- in use ---------------------------------------------------------
    def remove(self, session: Session, remover: Remover) -> None:
        try:
            super().remove(session, remover)
        finally:
            gone = [a.path for a in session.artifacts if not os.path.lexists(a.path)]
            self._listings.removed(gone)

    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """Command lines naming the id in either spelling, and registry files
        naming the session whose process is alive and not a reused pid. The
        registry is evidence of use, never of disuse (/clear and --continue
        leave it naming the wrong id)."""
        holders = procs.naming(session.id, session.id.upper())
        for artifact in session.artifacts:
            if artifact.kind == REGISTRY:
                holders += _registry_holders(artifact.path, session.id, procs)
        return holders


def _registry_holders(path: str, sid: str, procs: ProcessTable) -> list[Holder]:
    """Holders from one `sessions/<pid>.json`, read afresh. A file that is gone
    holds nothing; one that now names another session holds nothing; one that
    cannot be parsed still points at its file-name pid (cannot tell: in use)."""
    if not os.path.lexists(path):
        return []
    record = _read_json(path)
    if not isinstance(record, dict):
        record = {}
    elif _registry_id(record) not in (None, sid):
        return []
    pids: set[int] = set()
    if named := _REGISTRY.fullmatch(os.path.basename(path)):
        pids.add(int(named["pid"]))
    recorded = record.get("pid")
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0:
        pids.add(recorded)
    name = f"sessions/{os.path.basename(path)}"
    holders: list[Holder] = []
    for pid in sorted(pids):
        if pid in procs.unreadable:
            holders.append(Holder(pid, HolderKind.REGISTRY, f"{name}: process cannot be read"))
            continue
        proc = procs.alive(pid)
        if proc is None:
            continue
        same = _same_process(record, proc)
        if same is None:
            holders.append(Holder(pid, HolderKind.REGISTRY, f"{name}: start time cannot be told"))
        elif same:
            holders.append(Holder(pid, HolderKind.REGISTRY, name))
    return holders


def _registry_id(record: object) -> str | None:
    return canonical(record.get("sessionId")) if isinstance(record, dict) else None


def _linked_below(root: Path, relative: str) -> bool:
    """Whether a component of `relative` below `root` is a link."""
    path = root
    for part in relative.split("/"):
        path = path / part
        if disk.is_link(path):
            return True
    return False


def _project_path_id(parts: list[str]) -> str | None:
    """A session's entry of `<key>/` or anything under `<key>/<id>/`; memory
    and the rest are shared."""
    if len(parts) < 2 or not valid_name(parts[0]):
        return None
    return _project_id(parts[1]) if len(parts) == 2 else canonical(parts[1])


def _below(path: str, root: Path) -> list[str] | None:
    """The components of `path` below `root` (as given, else resolved: the
    resolving costs a syscall per component, and watched paths come as
    given), or None."""
    parts = _parts_below(path, os.fspath(root))
    return parts if parts is not None else _parts_below(path, os.path.realpath(root))


def _parts_below(path: str, base: str) -> list[str] | None:
    if path == base:
        return []
    prefix = base.rstrip("/") + "/"
    return path[len(prefix) :].split("/") if path.startswith(prefix) else None


ADAPTER = ClaudeAdapter
