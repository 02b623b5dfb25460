"""Claude Code trees in a fake home, for the tests.

Everything is written where Claude Code itself would write it for the given
environment (a `FakeHome`, its `environ`, or a `ClaudeLayout`), with the
record shapes of FIELD-NOTES.md (the transcripts' are agentkeep.demo.claude's),
and every path made gets the requested age
as its mtime and atime (os.utime, links included). Kind names match the
adapter's: transcript, session-dir, remote-tip, recording, file-history,
session-env, tasks, uploads, todos, debug-log, usage-data, job, registry,
registry-key, tmp. A full session has both tasks/ (2.x) and todos/ (older
versions): each layout is still on users' disks.

    layout = ClaudeLayout.of(fake_home)
    s = make_session(fake_home, cwd="/home/u/my-proj", age_days=40)
    s.transcript, s.artifacts["tmp"], s.all_paths()
    shared = make_shared(fake_home, session_ids=[s.id])
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentkeep.demo.claude import BASH_TASK, jsonl, project_key, transcript_records

__all__ = [
    "AGENT",
    "ALL_KINDS",
    "BASH_TASK",
    "DEBUG_LOG",
    "FILE_HISTORY",
    "JOB",
    "RECORDING",
    "REGISTRY",
    "REGISTRY_KEY",
    "REMOTE_TIP",
    "SESSION_DIR",
    "SESSION_ENV",
    "TASKS",
    "TMP",
    "TODOS",
    "TRANSCRIPT",
    "UPLOADS",
    "USAGE_DATA",
    "ClaudeLayout",
    "ClaudeSessionPaths",
    "ClaudeSharedPaths",
    "jsonl",
    "make_many",
    "make_session",
    "make_shared",
    "new_id",
    "project_key",
    "set_age",
    "transcript_records",
    "write_registry",
]

TRANSCRIPT = "transcript"
SESSION_DIR = "session-dir"
REMOTE_TIP = "remote-tip"
RECORDING = "recording"
FILE_HISTORY = "file-history"
SESSION_ENV = "session-env"
TASKS = "tasks"
UPLOADS = "uploads"
TODOS = "todos"
DEBUG_LOG = "debug-log"
USAGE_DATA = "usage-data"
JOB = "job"
REGISTRY = "registry"
REGISTRY_KEY = "registry-key"
TMP = "tmp"
ALL_KINDS = (
    TRANSCRIPT,
    SESSION_DIR,
    REMOTE_TIP,
    RECORDING,
    FILE_HISTORY,
    SESSION_ENV,
    TASKS,
    UPLOADS,
    TODOS,
    DEBUG_LOG,
    USAGE_DATA,
    JOB,
    REGISTRY,
    REGISTRY_KEY,
    TMP,
)

# A subagent's id as 2.1.197 makes them (17 hex digits after an `a`).
AGENT = "a64c6977021222774"

# Linux never hands out pids above 2**22 (PID_MAX_LIMIT): registry files made
# for idle sessions name pids that cannot be alive.
DEAD_PID_BASE = 4_200_000
_dead_pids = itertools.count(DEAD_PID_BASE)
_DEFAULT = object()


@dataclass(frozen=True)
class ClaudeLayout:
    """Where Claude Code writes for one environment."""

    home: Path
    config: Path
    projects: Path
    tmp_root: Path  # the per-uid `claude-<uid>` dir scratch dirs go under

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], uid: int | None = None) -> ClaudeLayout:
        uid = os.getuid() if uid is None else uid
        home = Path(environ["HOME"])
        config = Path(environ.get("CLAUDE_CONFIG_DIR") or home / ".claude")
        # Claude's own choice: $CLAUDE_CODE_TMPDIR, else the first of the tmp
        # variables, and `claude-<uid>` appended to it always.
        base = next(
            (
                environ[v]
                for v in ("CLAUDE_CODE_TMPDIR", "TMPDIR", "TMP", "TEMP", "AGENTKEEP_SYSTEM_TMP")
                if environ.get(v)
            ),
            "/tmp",
        )
        tmp_root = Path(base) / f"claude-{uid}"
        return cls(home=home, config=config, projects=config / "projects", tmp_root=tmp_root)

    @classmethod
    def of(cls, where: object) -> ClaudeLayout:
        """A layout from a ClaudeLayout, anything with `.environ` (FakeHome),
        or an environment mapping."""
        if isinstance(where, ClaudeLayout):
            return where
        environ = getattr(where, "environ", where)
        if not isinstance(environ, Mapping):
            raise TypeError(f"not a layout, FakeHome or environment: {where!r}")
        return cls.from_environ(environ)


def new_id() -> str:
    return str(uuid.uuid4())


def set_age(paths: Iterable[Path], age_days: float, now: float | None = None) -> float:
    """Give every path (links as links) mtime = atime = now - age_days; the
    deepest first, so a directory's own time is the last one set. Returns it."""
    when = (time.time() if now is None else now) - age_days * 86400
    for path in sorted(set(paths), key=lambda p: len(p.parts), reverse=True):
        os.utime(path, (when, when), follow_symlinks=False)
    return when


@dataclass
class ClaudeSessionPaths:
    """Every path make_session made. `artifacts` maps each kind to the
    top-level paths the adapter should report for it; `files` and `dirs` are
    everything made (the session's own dirs only, never shared parents)."""

    id: str
    key: str
    cwd: str
    layout: ClaudeLayout
    mtime: float
    artifacts: dict[str, list[Path]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)
    pid: int | None = None

    def _one(self, kind: str) -> Path:
        return self.artifacts[kind][0]

    @property
    def transcript(self) -> Path:
        return self._one(TRANSCRIPT)

    @property
    def session_dir(self) -> Path:
        return self._one(SESSION_DIR)

    @property
    def file_history(self) -> Path:
        return self._one(FILE_HISTORY)

    @property
    def session_env(self) -> Path:
        return self._one(SESSION_ENV)

    @property
    def todos(self) -> list[Path]:
        return self.artifacts[TODOS]

    @property
    def debug_log(self) -> Path:
        return self._one(DEBUG_LOG)

    @property
    def job(self) -> Path:
        return self._one(JOB)

    @property
    def registry(self) -> Path:
        return self._one(REGISTRY)

    @property
    def registry_key(self) -> Path:
        return self._one(REGISTRY_KEY)

    @property
    def tmp(self) -> Path:
        return self._one(TMP)

    def all_paths(self) -> list[Path]:
        return [*self.dirs, *self.files]

    def artifact_set(self) -> set[tuple[str, str]]:
        """{(kind, path)} as the adapter's Artifact.kind / Artifact.path."""
        return {(kind, str(p)) for kind, paths in self.artifacts.items() for p in paths}


class _Maker:
    """Records what it writes so the caller gets every path back."""

    def __init__(self, paths: ClaudeSessionPaths) -> None:
        self.paths = paths

    def dir(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        self.paths.dirs.append(path)
        return path

    def file(self, path: Path, text: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.paths.files.append(path)
        return path

    def artifact(self, kind: str, path: Path) -> None:
        self.paths.artifacts.setdefault(kind, []).append(path)


def make_session(
    where: object,
    id: str | None = None,
    cwd: str = "/home/user/project",
    parent: str | None = None,
    age_days: float = 40.0,
    full: bool = True,
    *,
    kinds: Iterable[str] | None = None,
    key: str | None = None,
    job_parent: str | None = None,
    pid: int | None = None,
    messages: int = 3,
    pad: int = 0,
    now: float | None = None,
) -> ClaudeSessionPaths:
    """One Claude session. `full` makes every artifact kind, else only the
    transcript; `kinds` picks exactly those kinds instead. `parent` makes it a
    fork (forkedFrom on its records); `job_parent` puts forkParentSessionId
    in its job's state.json. The registry names `pid` (default: a pid that
    cannot be alive) with startedAt at the session's age."""
    layout = ClaudeLayout.of(where)
    sid = id or new_id()
    chosen = set(ALL_KINDS if full else (TRANSCRIPT,)) if kinds is None else set(kinds)
    unknown = chosen - set(ALL_KINDS)
    if unknown:
        raise ValueError(f"unknown kinds {sorted(unknown)}")
    key = key or project_key(cwd)
    # One moment for the recorded mtime and the files' own: read twice, a
    # second boundary between the reads made reports differ by a second.
    now = time.time() if now is None else now
    when = now - age_days * 86400
    paths = ClaudeSessionPaths(id=sid, key=key, cwd=cwd, layout=layout, mtime=when)
    m = _Maker(paths)
    start_ms = int(when * 1000)
    if TRANSCRIPT in chosen:
        records = transcript_records(
            sid, cwd, parent=parent, messages=messages, pad=pad, start_ms=start_ms
        )
        m.artifact(TRANSCRIPT, m.file(layout.projects / key / f"{sid}.jsonl", jsonl(records)))
    if SESSION_DIR in chosen:
        _session_dir(m, layout.projects / key / sid, sid, cwd)
    if REMOTE_TIP in chosen:
        tip = {"sessionId": sid, "uuid": new_id()}
        m.artifact(
            REMOTE_TIP, m.file(layout.projects / key / f"{sid}.ccr-tip.json", json.dumps(tip))
        )
    if RECORDING in chosen:
        cast = layout.projects / key / f"{sid}-{start_ms}.cast"
        m.artifact(RECORDING, m.file(cast, '{"version": 2, "width": 80, "height": 24}\n'))
    _config_parts(m, layout, sid, cwd, chosen)
    if JOB in chosen:
        state = {"sessionId": sid, "status": "completed"}
        if job_parent is not None:
            state["forkParentSessionId"] = job_parent
        d = m.dir(layout.config / "jobs" / sid[:8])
        m.file(d / "state.json", json.dumps(state))
        m.file(d / "output.log", "job output\n")
        m.artifact(JOB, d)
    if REGISTRY in chosen or REGISTRY_KEY in chosen:
        paths.pid = next(_dead_pids) if pid is None else pid
        record = {"pid": paths.pid, "sessionId": sid, "cwd": cwd, "startedAt": start_ms}
        reg, regkey = _registry_paths(layout, paths.pid)
        if REGISTRY in chosen:
            m.artifact(REGISTRY, m.file(reg, json.dumps(record)))
        if REGISTRY_KEY in chosen:
            m.artifact(REGISTRY_KEY, m.file(regkey, os.urandom(16).hex()))
    if TMP in chosen:
        _ensure_tmp_root(layout)
        d = m.dir(layout.tmp_root / key / sid)
        m.dir(d / "tasks")
        output = d / "tasks" / f"{BASH_TASK}.output"
        persisted = layout.projects / key / sid / "tool-results" / f"{BASH_TASK}.txt"
        if persisted.exists():
            # A command output Claude kept in tool-results/ is the same inode
            # as its tmp output, linked across the two roots.
            os.link(persisted, output)
            m.paths.files.append(output)
        else:
            m.file(output, "task output\n" * 8)
        # A subagent's output is a link into its transcript (a leaf link).
        # Claude links the absolute path; a relative one keeps the link's
        # size, and so the session's bytes, the same in every fake home.
        subagent = layout.projects / key / sid / "subagents" / f"agent-{AGENT}.jsonl"
        link = d / "tasks" / f"{AGENT}.output"
        link.symlink_to(os.path.relpath(subagent, link.parent))
        m.paths.files.append(link)
        m.artifact(TMP, d)
    set_age(paths.all_paths(), age_days, now)
    return paths


def _config_parts(m: _Maker, layout: ClaudeLayout, sid: str, cwd: str, chosen: set[str]) -> None:
    """The session's parts in the config dir that hold nothing but its id."""
    if FILE_HISTORY in chosen:
        d = m.dir(layout.config / "file-history" / sid)
        m.file(d / "3f2a9c1e8b7d6a50@v1", "original contents\n")
        m.file(d / "3f2a9c1e8b7d6a50@v2", "edited contents\n")
        m.artifact(FILE_HISTORY, d)
    if SESSION_ENV in chosen:
        d = m.dir(layout.config / "session-env" / sid)
        m.file(d / "sessionstart-hook-0.sh", "export FOO=1\n")
        m.artifact(SESSION_ENV, d)
    if TASKS in chosen:
        d = m.dir(layout.config / "tasks" / sid)
        m.file(d / ".lock", "")
        task = {"id": "1", "subject": "Check output", "status": "pending", "blocks": []}
        m.file(d / "1.json", json.dumps(task))
        m.artifact(TASKS, d)
    if UPLOADS in chosen:
        d = m.dir(layout.config / "uploads" / sid)
        m.file(d / "notes.txt", "an attached file\n")
        m.artifact(UPLOADS, d)
    if TODOS in chosen:
        todo = m.file(layout.config / "todos" / f"{sid}-agent-{sid}.json", "[]")
        m.artifact(TODOS, todo)
    if DEBUG_LOG in chosen:
        text = f"[DEBUG] session {sid} started in {cwd}\n"
        m.artifact(DEBUG_LOG, m.file(layout.config / "debug" / f"{sid}.txt", text))
    if USAGE_DATA in chosen:
        for part in ("session-meta", "facets"):
            meta = layout.config / "usage-data" / part / f"{sid}.json"
            m.artifact(USAGE_DATA, m.file(meta, json.dumps({"session_id": sid})))


def _session_dir(m: _Maker, d: Path, sid: str, cwd: str) -> None:
    m.dir(d)
    m.dir(d / "subagents")
    m.dir(d / "tool-results")
    line = {"sessionId": sid, "agentId": AGENT, "isSidechain": True, "cwd": cwd, "type": "user"}
    m.file(d / "subagents" / f"agent-{AGENT}.jsonl", jsonl([line]))
    meta = {"agentType": "general-purpose", "toolUseId": "toolu_01ABC", "spawnDepth": 1}
    m.file(d / "subagents" / f"agent-{AGENT}.meta.json", json.dumps(meta))
    m.file(d / "tool-results" / f"{BASH_TASK}.txt", "tool result\n" * 16)
    m.artifact(SESSION_DIR, d)


def _ensure_tmp_root(layout: ClaudeLayout) -> None:
    # Claude makes its per-uid tmp root private.
    if not layout.tmp_root.exists():
        layout.tmp_root.mkdir(parents=True, mode=0o700)
        os.chmod(layout.tmp_root, 0o700)


def _registry_paths(layout: ClaudeLayout, pid: int) -> tuple[Path, Path]:
    sessions = layout.config / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    existing = sorted(sessions.glob(f"{pid}.*.key"))
    key = (
        existing[0]
        if existing
        else sessions / f"{pid}.{hashlib.sha1(str(pid).encode()).hexdigest()[:16]}.key"
    )
    return sessions / f"{pid}.json", key


def write_registry(
    where: object,
    pid: int,
    session_id: str,
    *,
    started_at: object = _DEFAULT,
    proc_start: object = _DEFAULT,
    raw_started_at: str | None = None,
    cwd: str = "/home/user/project",
) -> tuple[Path, Path]:
    """Write `sessions/<pid>.json` naming `session_id` and its `.key` file.
    `started_at` (ms; default now) and `proc_start` are written as given,
    NaN included; omit the key with started_at=None. `raw_started_at` puts
    that text verbatim as the JSON value (e.g. "1e400")."""
    layout = ClaudeLayout.of(where)
    record: dict[str, object] = {"pid": pid, "sessionId": session_id, "cwd": cwd}
    if started_at is _DEFAULT:
        record["startedAt"] = int(time.time() * 1000)
    elif started_at is not None:
        record["startedAt"] = started_at
    if proc_start is not _DEFAULT:
        record["procStart"] = proc_start
    text = json.dumps(record)
    if raw_started_at is not None:
        record.pop("startedAt", None)
        text = json.dumps(record)[:-1] + f', "startedAt": {raw_started_at}}}'
    reg, key = _registry_paths(layout, pid)
    reg.write_text(text)
    key.write_text(os.urandom(16).hex())
    return reg, key


@dataclass
class ClaudeSharedPaths:
    """Files Claude shares between sessions: never any session's."""

    history: Path
    memory: Path
    settings: Path
    plans: Path
    paste_cache: Path
    image_cache: Path
    shell_snapshots: Path
    claude_json: Path
    debug_latest: Path
    plugin_store: Path

    def all_paths(self) -> list[Path]:
        """Every shared path, including what lies inside the shared dirs."""
        tops = [
            self.history,
            self.memory,
            self.settings,
            self.plans,
            self.paste_cache,
            self.image_cache,
            self.shell_snapshots,
            self.claude_json,
            self.debug_latest,
            self.plugin_store,
        ]
        inside = [
            p for top in tops if top.is_dir() and not top.is_symlink() for p in top.rglob("*")
        ]
        return tops + inside


def make_shared(
    where: object,
    *,
    cwd: str = "/home/user/project",
    session_ids: Iterable[str] = (),
    age_days: float = 40.0,
) -> ClaudeSharedPaths:
    """The shared files, each naming the given sessions the way Claude does
    (history lines with sessionId, per-session image-cache dirs, debug/latest
    linked to the last session's debug log, a plugin's store naming the last
    session as 2.1.332 writes it)."""
    layout = ClaudeLayout.of(where)
    ids = list(session_ids)
    c = layout.config
    c.mkdir(parents=True, exist_ok=True)
    history = c / "history.jsonl"
    lines = [{"display": "fix it", "timestamp": 0, "project": cwd, "sessionId": sid} for sid in ids]
    history.write_text(jsonl(lines))
    memory = layout.projects / project_key(cwd) / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    (memory / "MEMORY.md").write_text("# memory\n" + "".join(f"- see {sid}\n" for sid in ids))
    settings = c / "settings.json"
    settings.write_text(json.dumps({"cleanupPeriodDays": 30}))
    plans = c / "plans"
    plans.mkdir(exist_ok=True)
    (plans / "bright-shining-plan.md").write_text("# plan\n")
    paste = c / "paste-cache"
    paste.mkdir(exist_ok=True)
    (paste / "0a1b2c3d4e5f.txt").write_text("pasted\n")
    images = c / "image-cache"
    for sid in ids or [new_id()]:
        (images / sid).mkdir(parents=True, exist_ok=True)
        (images / sid / "1.png").write_bytes(b"\x89PNG")
    snapshots = c / "shell-snapshots"
    snapshots.mkdir(exist_ok=True)
    (snapshots / "snapshot-bash-1760000000000-abc123.sh").write_text("# snapshot\n")
    claude_json = layout.home / ".claude.json"
    claude_json.write_text(
        json.dumps({"projects": {cwd: {"lastSessionId": ids[-1] if ids else None}}})
    )
    (c / "debug").mkdir(exist_ok=True)
    latest = c / "debug" / "latest"
    if latest.is_symlink():
        latest.unlink()
    latest.symlink_to(c / "debug" / f"{ids[-1] if ids else new_id()}.txt")
    store = c / "plugins" / "store" / "cc-plugin-agents-md_builtin-b049b47b3618.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    queued = f"{ids[-1] if ids else new_id()} claude-md-or-agents-md ok"
    store.write_text(json.dumps({"usage-rows-queued": queued}, indent=2) + "\n")
    shared = ClaudeSharedPaths(
        history=history,
        memory=memory,
        settings=settings,
        plans=plans,
        paste_cache=paste,
        image_cache=images,
        shell_snapshots=snapshots,
        claude_json=claude_json,
        debug_latest=latest,
        plugin_store=store,
    )
    set_age(shared.all_paths(), age_days)
    return shared


def make_many(
    where: object,
    n: int,
    *,
    projects: int = 20,
    full: bool = True,
    age_days: float = 40.0,
    forks_every: int = 0,
) -> list[ClaudeSessionPaths]:
    """`n` sessions spread over `projects` workspaces (the benchmark's tree);
    with forks_every=k, every k-th session is a fork of the one before it."""
    made: list[ClaudeSessionPaths] = []
    for i in range(n):
        parent = made[-1].id if forks_every and i % forks_every == forks_every - 1 else None
        cwd = f"/home/user/work/project-{i % projects}"
        made.append(
            make_session(where, cwd=cwd, parent=parent, age_days=age_days + i % 7, full=full)
        )
    return made
