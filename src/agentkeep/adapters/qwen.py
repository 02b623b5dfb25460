"""Qwen Code: sessions under `$QWEN_RUNTIME_DIR` and `$QWEN_HOME`.

Two roots (FIELD-NOTES.md "Qwen Code"): the home, `$QWEN_HOME` or
`~/.qwen`, and the runtime dir, `$QWEN_RUNTIME_DIR` or the home. Per
session id (a UUID), as Qwen Code 0.24 writes and deletes them:
- `<runtime>/projects/<key>/chats/<id>.jsonl`: the transcript, what
  `qwen --resume` lists (primary); `chats/archive/<id>.jsonl` once archived.
  Beside it `<id>.runtime.json`, `<id>.worktree.json`, `<id>.pr.json`,
  `<id>.ledger.jsonl`. `<key>` is the cwd with every character but
  `[A-Za-z0-9]` turned to `-`: lossy (`/a.b` and `/a-b` share it), so the
  workspace is the records' `cwd`, never the key.
- `<runtime>/projects/<key>/subagents/<id>/`: the session's subagents;
- `<home>/file-history/<id>/`, `<home>/plans/<id>.md`,
  `<runtime>/debug/<id>.txt`, `<runtime>/tmp/session-writer-locks/<id>.lock*`;
- `<runtime>/tmp/<sha256(cwd)>/background-shells/<id>/`, and the truncated
  tool outputs `<tool>_<12 hex>.output` there, which only the transcript
  names (records a fork copied from its parent are the parent's);
- `<home>/sessions/<pid>.json` (or `<pid>-<hex>.json`), the registry of live
  sessions, naming the session.
Shared, never removed: `usage_record.jsonl`, `usage/`, `tmp/<hash>/logs.json`
and `scheduled_tasks.lock`, `projects/<key>/meta.json`, `extract-cursor.json`
and `memory/`: reported as residual where they name a session.

In use: a command line naming the id (`--resume <id>`, `--session-id <id>`:
a headless run registers nothing), a registry record or a writer lock whose
process is alive and not a reused pid.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import structlog

from agentkeep import disk
from agentkeep.adapters import heads
from agentkeep.adapters.base import Adapter, Known, Root
from agentkeep.adapters.claude.ids import UUID, canonical
from agentkeep.adapters.claude.listing import linked_below
from agentkeep.adapters.claude.reading import read_json
from agentkeep.adapters.claude.registry import record_holders, registry_holders, registry_id
from agentkeep.adapters.claude.transcripts import lineage
from agentkeep.adapters.dirs import dir_var, entries, parts_below
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Described, Holder, HolderKind, Session
from agentkeep.processes import ProcessTable

log = structlog.get_logger("agentkeep.adapters.qwen")

# The kinds of artifact, as the index records them.
TRANSCRIPT = "transcript"
RUNTIME_STATUS = "runtime-status"
SIDECAR = "sidecar"
SUBAGENTS = "subagents"
FILE_HISTORY = "file-history"
PLAN = "plan"
DEBUG_LOG = "debug-log"
WRITER_LOCK = "writer-lock"
TOOL_OUTPUT = "tool-output"
REGISTRY = "registry"

# What follows the id in a chats dir's names. `.ledger.jsonl` before
# `.jsonl`: a name is its id and the first suffix that leaves an id.
CHAT_SUFFIXES = (
    (".ledger.jsonl", SIDECAR),
    (".jsonl", TRANSCRIPT),
    (".runtime.json", RUNTIME_STATUS),
    (".worktree.json", SIDECAR),
    (".pr.json", SIDECAR),
)
# `sessions/<pid>.json`, or `<pid>-<8 hex>.json` for a process's own slot.
REGISTRY_FILE = re.compile(r"(?P<pid>[0-9]{1,10})(?:-[0-9a-f]{8})?\.json")
# A truncated tool output: `<tool name>_<6 random bytes in hex>.output`.
TOOL_OUTPUT_NAME = re.compile(rb"[A-Za-z0-9_]+_[0-9a-f]{12}\.output")
WRITER_LOCKS = "session-writer-locks"
# The shared files of the roots and of each project that name sessions.
SHARED_PROJECT = ("meta.json", "extract-cursor.json")
SHARED_TMP = ("logs.json", "scheduled_tasks.lock")
# A shared file this big is not read for the ids it names.
SHARED_LIMIT = 256 << 20


@dataclass(frozen=True)
class _Item:
    path: str
    kind: str
    root: Root
    linked: bool


@dataclass
class _Pass:
    """What one pass over Qwen's directories found, by session id (only
    those in `only` when it is given)."""

    only: frozenset[str] | None
    found: dict[str, dict[str, _Item]] = field(default_factory=lambda: defaultdict(dict))
    # The project tmp dirs seen (by the sha256 of a workspace) and the tool
    # outputs in each, listed when a session of the workspace asks.
    tmp_dirs: dict[str, Path] = field(default_factory=dict)
    outputs: dict[str, set[str]] = field(default_factory=dict)
    shared: list[Path] = field(default_factory=list)

    def add(self, sid: str | None, path: str, kind: str, root: Root, linked: bool) -> None:
        if sid is not None and (self.only is None or sid in self.only):
            self.found[sid].setdefault(path, _Item(path, kind, root, linked))


class QwenAdapter(Adapter):
    name = "qwen"
    evidence_kinds = frozenset({REGISTRY, WRITER_LOCK})
    id_in_name = UUID

    # -- where ----------------------------------------------------------
    @cached_property
    def home_dir(self) -> Path:
        return dir_var(self.env, "QWEN_HOME") or self.env.home / ".qwen"

    @cached_property
    def runtime_dir(self) -> Path:
        return dir_var(self.env, "QWEN_RUNTIME_DIR") or self.home_dir

    def _roots(self) -> tuple[Root, Root]:
        home = Root.check(self.home_dir, "home", self.env.uid)
        if self.runtime_dir == self.home_dir:
            return home, home
        return home, Root.check(self.runtime_dir, "runtime", self.env.uid)

    def roots(self) -> list[Root]:
        home, runtime = self._roots()
        return [home] if home is runtime else [home, runtime]

    def watch_dirs(self) -> list[Path]:
        home, runtime = self.home_dir, self.runtime_dir
        projects = runtime / "projects"
        dirs = [home, runtime, projects, runtime / "debug", runtime / "tmp"]
        dirs += [home / "file-history", home / "plans", home / "sessions"]
        dirs.append(runtime / "tmp" / WRITER_LOCKS)
        # A project's tmp dir is not watched: the outputs there are named
        # only by a transcript, whose change is the session's news.
        for key in _dirs(projects):
            dirs += [key, key / "chats", key / "chats" / "archive", key / "subagents"]
        return [d for d in dict.fromkeys(dirs) if d.is_dir()]

    # -- what -----------------------------------------------------------
    def canonical_id(self, raw: str) -> str | None:
        return canonical(raw)

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        found = self._find(names)
        residual = self._residual(found)
        for sid in sorted(found.found):
            session = self._session(sid, found, residual.get(sid, []))
            if session is not None:
                yield session

    def session_for_path(self, path: str) -> str | None:
        runtime = parts_below(path, self.runtime_dir)
        if runtime:
            sid = _runtime_path_id(runtime)
            if sid is not None:
                return sid
        home = parts_below(path, self.home_dir)
        return self._home_path_id(home) if home else None

    # -- in use ---------------------------------------------------------
    def describe(self, session: Session) -> Described:
        """Its title (the last `custom_title` record, a rename or Qwen's own
        title) or its first prompt (as typed: `systemPayload.displayText`),
        and its first record's time, from the heads of its chats."""
        for artifact in session.artifacts:
            if artifact.kind == TRANSCRIPT and not artifact.linked:
                described = _described(artifact.path)
                if described != Described():
                    return described
        return Described()

    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """Command lines naming the id, registry records and writer locks
        naming the session whose process is alive and not a reused pid."""
        holders = procs.naming(session.id)
        for artifact in session.artifacts:
            if artifact.kind == REGISTRY:
                holders += registry_holders(artifact.path, session.id, procs, REGISTRY_FILE)
            elif artifact.kind == WRITER_LOCK and artifact.path.endswith(".lock"):
                holders += _lock_holders(artifact.path, session.id, procs)
        return holders

    # -- finding ----------------------------------------------------------
    def _find(self, only: frozenset[str] | None) -> _Pass:
        found = _Pass(only)
        home, runtime = self._roots()
        self._find_projects(found, runtime)
        tmp = self.runtime_dir / "tmp"
        for area, kind, root, suffix in (
            (self.home_dir / "file-history", FILE_HISTORY, home, ""),
            (self.home_dir / "plans", PLAN, home, ".md"),
            (self.runtime_dir / "debug", DEBUG_LOG, runtime, ".txt"),
        ):
            linked = self._linked(root, area)
            for entry in entries(area):
                found.add(_named(entry.name, suffix), entry.path, kind, root, linked)
        linked = self._linked(runtime, tmp / WRITER_LOCKS)
        for entry in entries(tmp / WRITER_LOCKS):
            found.add(_lock_id(entry.name), entry.path, WRITER_LOCK, runtime, linked)
        self._find_registry(found, home)
        self._find_tmp(found, runtime)
        found.shared += [self.home_dir / "usage_record.jsonl"]
        found.shared += [Path(e.path) for e in entries(self.runtime_dir / "usage") if not e.dir]
        return found

    def _find_projects(self, found: _Pass, runtime: Root) -> None:
        for key in entries(self.runtime_dir / "projects"):
            if not key.dir:
                continue
            chats = Path(key.path) / "chats"
            for directory in (chats, chats / "archive"):
                linked = self._linked(runtime, directory)
                for entry in entries(directory):
                    sid, kind = _chat_name(entry.name)
                    if sid is not None and (not entry.dir or entry.link):
                        found.add(sid, entry.path, kind, runtime, linked)
                    elif entry.name != "archive":
                        log.info("skipped: not a qwen session file", path=entry.path)
            subagents = Path(key.path) / "subagents"
            linked = self._linked(runtime, subagents)
            for entry in entries(subagents):
                found.add(canonical(entry.name), entry.path, SUBAGENTS, runtime, linked)
            found.shared += [Path(key.path) / name for name in SHARED_PROJECT]

    def _find_registry(self, found: _Pass, home: Root) -> None:
        directory = self.home_dir / "sessions"
        linked = self._linked(home, directory)
        for entry in entries(directory):
            if REGISTRY_FILE.fullmatch(entry.name) and not entry.dir:
                sid = registry_id(read_json(entry.path))
                if sid is None:
                    log.info("registry file names no session", path=entry.path)
                found.add(sid, entry.path, REGISTRY, home, linked)

    def _find_tmp(self, found: _Pass, runtime: Root) -> None:
        """The project tmp dirs (named by a sha256 of the workspace): each
        one's background shells by session, and its place for the outputs
        only transcripts name."""
        for project in entries(self.runtime_dir / "tmp"):
            if not (project.dir and re.fullmatch(r"[0-9a-f]{64}", project.name)):
                continue
            found.tmp_dirs[project.name] = Path(project.path)
            shells = Path(project.path) / "background-shells"
            linked = self._linked(runtime, shells)
            for entry in entries(shells):
                found.add(canonical(entry.name), entry.path, TOOL_OUTPUT, runtime, linked)
            found.shared += [Path(project.path) / name for name in SHARED_TMP]

    def _linked(self, root: Root, directory: Path) -> bool:
        """Whether what lies in `directory` is reached through a link below
        `root` (or lies on a root that must not be trusted): never removed."""
        if root.problem is not None:
            return True
        relative = os.path.relpath(directory, root.path)
        return relative != "." and linked_below(root.path, relative)

    def _home_path_id(self, parts: list[str]) -> str | None:
        if len(parts) < 2:
            return None
        area, name = parts[0], parts[1]
        if area == "file-history":
            return canonical(name)
        if area == "plans" and len(parts) == 2:
            return _named(name, ".md")
        if area == "sessions" and len(parts) == 2 and REGISTRY_FILE.fullmatch(name):
            return registry_id(read_json(str(self.home_dir / "sessions" / name)))
        return None

    # -- a session --------------------------------------------------------
    def _session(self, sid: str, found: _Pass, residual: list[str]) -> Session | None:
        items = sorted(found.found[sid].values(), key=lambda i: (i.kind != TRANSCRIPT, i.path))
        transcripts = [i.path for i in items if i.kind == TRANSCRIPT]
        workspace, parent = lineage(sid, transcripts)
        if workspace is not None:
            items += self._outputs(found, workspace, items)
        seen: set[tuple[int, int]] = set()
        artifacts = []
        for item in items:
            foreign = item.root.problem is not None
            artifact = disk.artifact(
                item.path,
                item.kind,
                item.root.path,
                primary=item.kind == TRANSCRIPT,
                linked=item.linked,
                seen=seen,
                foreign=foreign,
            )
            if artifact is not None:
                artifacts.append(artifact)
        if not artifacts:
            return None
        return Session(
            agent=self.name,
            id=sid,
            workspace=workspace,
            parent=parent,
            artifacts=artifacts,
            bytes=sum(a.bytes for a in artifacts),
            residual=residual,
        )

    def _outputs(self, found: _Pass, workspace: str, items: list[_Item]) -> list[_Item]:
        """The truncated tool outputs in the workspace's tmp dir that the
        session's transcripts (its subagents' too) name: read whole, and
        only when that dir holds any."""
        digest = hashlib.sha256(workspace.encode()).hexdigest()
        project = found.tmp_dirs.get(digest)
        if project is None:
            return []
        if digest not in found.outputs:
            listed = entries(project)
            found.outputs[digest] = {
                e.name for e in listed if e.name.endswith(".output") and not e.dir
            }
        present = found.outputs[digest]
        if not present:
            return []
        named: set[str] = set()
        for item in items:
            if item.kind == TRANSCRIPT:
                named |= _outputs_named(Path(item.path))
            elif item.kind == SUBAGENTS and not item.linked:
                for entry in entries(item.path):
                    if entry.name.endswith(".jsonl"):
                        named |= _outputs_named(Path(entry.path))
        _, runtime = self._roots()
        linked = self._linked(runtime, project)
        return [
            _Item(str(project / name), TOOL_OUTPUT, runtime, linked)
            for name in sorted(named & present)
        ]

    def _residual(self, found: _Pass) -> dict[str, list[str]]:
        """The shared files that name each session found: reported, never
        removed, never its activity."""
        named: dict[str, list[str]] = defaultdict(list)
        wanted = found.only if found.only is not None else found.found.keys()
        for path in found.shared:
            for sid in sorted(_ids_in(path) & wanted):
                named[sid].append(str(path))
        return named


def _dirs(directory: Path) -> list[Path]:
    return [Path(e.path) for e in entries(directory) if e.dir and not e.link]


def _named(name: str, suffix: str) -> str | None:
    """The id of a name that is `<id><suffix>`."""
    return canonical(name[: len(name) - len(suffix)]) if name.endswith(suffix) else None


def _chat_name(name: str) -> tuple[str | None, str]:
    """(id, kind) of a name in a chats dir; no id for the rest."""
    for suffix, kind in CHAT_SUFFIXES:
        sid = _named(name, suffix)
        if sid is not None:
            return sid, kind
    return None, ""


def _lock_id(name: str) -> str | None:
    """`<id>.lock` and its `.lock.claim`, `.lock.released.<owner>` (Qwen
    percent-encodes the id, which leaves a UUID as it is)."""
    stem, dot, _ = name.partition(".lock")
    return canonical(stem) if dot else None


def _runtime_path_id(parts: list[str]) -> str | None:
    """The session a path below the runtime dir belongs to, by its name."""
    if parts[0] == "projects" and len(parts) >= 4:
        if parts[2] == "subagents":
            return canonical(parts[3])
        chat = parts[3:] if parts[3] != "archive" else parts[4:]
        return _chat_name(chat[0])[0] if parts[2] == "chats" and len(chat) == 1 else None
    if parts[0] == "debug" and len(parts) == 2:
        return _named(parts[1], ".txt")
    if parts[:2] == ["tmp", WRITER_LOCKS] and len(parts) == 3:
        return _lock_id(parts[2])
    if parts[0] == "tmp" and len(parts) >= 4 and parts[2] == "background-shells":
        return canonical(parts[3])
    return None


def _outputs_named(transcript: Path) -> set[str]:
    """The tool output names a transcript's records name, but for records a
    fork copied from its parent (each carries `forkedFrom`): those name the
    parent's outputs, which stay the parent's."""
    handle = disk.open_quietly(transcript)
    if handle is None:
        return set()
    names: set[str] = set()
    with handle:
        for line in handle:
            if b".output" in line and b'"forkedFrom"' not in line:
                names.update(m.decode() for m in TOOL_OUTPUT_NAME.findall(line))
    return names


def _ids_in(path: Path) -> set[str]:
    """The session ids a shared file names anywhere in it."""
    handle = disk.open_quietly(path)
    if handle is None:
        return set()
    with handle:
        data = handle.read(SHARED_LIMIT)
    found = {canonical(m.decode()) for m in _UUID_BYTES.findall(data)}
    return {sid for sid in found if sid is not None}


_UUID_BYTES = re.compile(UUID.pattern.encode())


def _lock_holders(path: str, sid: str, procs: ProcessTable) -> list[Holder]:
    """A writer lock (`{session_id, pid, process_start_identity}`) naming the
    session holds it while its process lives. A lock that cannot be read
    holds it too: Qwen itself never takes a lock over one it cannot read."""
    if not os.path.lexists(path):
        return []
    record = read_json(path)
    name = f"tmp/{WRITER_LOCKS}/{os.path.basename(path)}"
    if not isinstance(record, dict):
        return [Holder(None, HolderKind.REGISTRY, f"{name}: cannot be read")]
    if canonical(record.get("session_id")) not in (None, sid):
        return []
    fields = {"pid": record.get("pid"), "procStart": record.get("process_start_identity")}
    return record_holders(name, fields, set(), procs)


def _described(path: str) -> Described:
    title: str | None = None
    prompt: str | None = None
    started: float | None = None
    for record in heads.head_records(path):
        started = started if started is not None else parse_agent_time(record.get("timestamp"))
        payload = record.get("systemPayload")
        payload = payload if isinstance(payload, dict) else {}
        if record.get("subtype") == "custom_title":
            title = heads.cut(payload.get("customTitle")) or title
        elif prompt is None and record.get("type") == "user" and "subtype" not in record:
            message = record.get("message")
            parts = message.get("parts") if isinstance(message, dict) else None
            prompt = heads.first_title(payload.get("displayText"), heads.text_of(parts))
    return Described(title or prompt, started)


ADAPTER = QwenAdapter
