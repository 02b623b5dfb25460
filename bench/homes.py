"""Synthetic homes for the benchmark: many sessions of every agent, fast.

The layouts are the tests' builders' (tests/build_*.py), with the same file
names and record shapes (agentkeep.demo's transcripts and Codex schema),
written with bare os calls instead of pathlib so that 50,000 sessions take
seconds rather than minutes (make_session spends ~4 ms a
session; this spends well under 1 ms). Every file and the session's own
directories get the session's age as mtime and atime.

    bh = make_home(root, 10_000)                      # the default mix
    bh = make_home(root, 10_000, mix={"claude": 1.0}, idle_share=1.0)
    bh.environ, bh.roots(), bh.counts, bh.claude_idle_paths
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from agentkeep.demo.claude import jsonl, project_key, transcript_records
from agentkeep.demo.codex import LEGACY_ITEMS_SQL, LEGACY_THREADS_SQL
from agentkeep.demo.home import FakeHome, make_fake_home

DAY = 86400.0
DEFAULT_MIX = {
    "claude": 0.70,
    "codex": 0.10,
    "opencode": 0.08,
    "gemini": 0.04,
    "grok": 0.04,
    "zero": 0.04,
}
# Linux never hands out pids above 2**22: registry files name dead pids.
DEAD_PID_BASE = 4_200_000
JOB_EVERY = 10  # every 10th Claude session has a background job dir
REGISTRY_EVERY = 20  # every 20th left a stale registry file behind
# A real rollout's first line carries the base instructions (tens of KB);
# 8 KB keeps the first-line read honest without bloating 50,000-session trees.
CODEX_INSTRUCTIONS = "You are Codex. " * 550
# Every socket dir made, so the bench can remove them all however it ends.
RUNTIME_DIRS: list[str] = []


@dataclass
class BenchHome:
    """A fake user (its env points every agent and agentkeep inside `root`)
    and what was made in it."""

    fake: FakeHome
    counts: dict[str, int] = field(default_factory=dict)
    # Top-level artifacts of every Claude session idle past 30 days: what
    # `rm -rf` is given as the baseline of a prune.
    claude_idle_paths: list[str] = field(default_factory=list)
    claude_idle: int = 0
    # (id, transcript path) of idle Claude sessions, for the event bench.
    claude_transcripts: list[tuple[str, str]] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.fake.root

    @property
    def environ(self) -> dict[str, str]:
        return self.fake.environ

    def roots(self) -> list[str]:
        """Every agent root that exists (what `find` is given)."""
        e = self.environ
        candidates = [
            e["CLAUDE_CONFIG_DIR"],
            os.path.join(e["TMPDIR"], f"claude-{os.getuid()}"),
            os.path.join(e["AGENTKEEP_SYSTEM_TMP"], f"claude-{os.getuid()}"),
            e["CODEX_HOME"],
            os.path.join(e["XDG_DATA_HOME"], "opencode"),
            os.path.join(e["HOME"], ".gemini"),
            os.path.join(e["HOME"], ".grok"),
            os.path.join(e["XDG_DATA_HOME"], "zero", "sessions"),
        ]
        return [p for p in candidates if os.path.isdir(p)]

    def write_config(self, text: str) -> None:
        self.fake.write_config(text)

    def remove(self) -> None:
        shutil.rmtree(self.environ["XDG_RUNTIME_DIR"], ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)


def fake_home(root: Path) -> FakeHome:
    """A fake user with its socket dir under /tmp/akb-* (short enough for a
    unix socket path, and recognisably the bench's)."""
    runtime = tempfile.mkdtemp(prefix="akb-", dir="/tmp")
    RUNTIME_DIRS.append(runtime)
    return make_fake_home(root, Path(runtime))


class _Writer:
    """mkdir/write/utime with a memo of the dirs already made."""

    def __init__(self) -> None:
        self.made: set[str] = set()

    def dirs(self, path: str) -> str:
        if path not in self.made:
            os.makedirs(path, exist_ok=True)
            self.made.add(path)
        return path

    def file(self, path: str, data: bytes | str, when: float) -> str:
        if isinstance(data, str):
            data = data.encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.utime(path, (when, when))
        return path

    def newdir(self, path: str) -> str:
        os.mkdir(path)
        return path


def _ages(n: int, idle_share: float) -> list[float]:
    """Ages in days, deterministic: the idle share spread over 31-395 days,
    the rest over 0.5-29.5 days, interleaved so every agent gets both."""
    idle = round(n * idle_share)
    ages = []
    for i in range(n):
        if i * idle // n != (i + 1) * idle // n:  # spreads the idle ones evenly
            ages.append(31.0 + (i * 7919) % 365)
        else:
            ages.append(0.5 + (i * 104729) % 29)
    return ages


def _split(n: int, mix: dict[str, float]) -> dict[str, int]:
    agents = [a for a, share in mix.items() if share > 0]
    total = sum(mix[a] for a in agents)
    counts = {a: int(n * mix[a] / total) for a in agents}
    counts[agents[0]] += n - sum(counts.values())
    return counts


def make_home(
    root: Path,
    n: int,
    *,
    mix: dict[str, float] | None = None,
    idle_share: float = 0.85,
    now: float | None = None,
) -> BenchHome:
    """A fake user under `root` (which must not exist yet) holding `n`
    sessions split by `mix`; `idle_share` of each agent's are idle past 30
    days (31-395 days), the others were active in the last 30 days."""
    now = time.time() if now is None else now
    bh = BenchHome(fake_home(root))
    w = _Writer()
    for agent, count in _split(n, mix or DEFAULT_MIX).items():
        ages = _ages(count, idle_share)
        _MAKERS[agent](bh, w, ages, now)
        bh.counts[agent] = count
    _at_rest(bh)
    return bh


def _at_rest(bh: BenchHome) -> None:
    """The directories the adapters watch, last changed an hour back, as on
    a home at rest: just built, each would be too recently changed for its
    mtime to vouch for it (disk.signed), and every first look at the home
    would take each for changed."""
    from agentkeep import adapters
    from agentkeep.agents import AGENTS
    from agentkeep.paths import Env

    old = time.time() - 3600
    env = Env.from_environ(bh.environ)
    for agent in AGENTS:
        for d in adapters._adapter_class(agent)(env).watch_dirs():
            if os.path.isdir(d):
                os.utime(d, (old, old))


# -- claude ------------------------------------------------------------------
def _claude(bh: BenchHome, w: _Writer, ages: list[float], now: float) -> None:
    e = bh.environ
    config = e["CLAUDE_CONFIG_DIR"]
    projects = os.path.join(config, "projects")
    tmp_root = os.path.join(e["TMPDIR"], f"claude-{os.getuid()}")
    os.makedirs(tmp_root, mode=0o700, exist_ok=True)
    os.chmod(tmp_root, 0o700)
    for d in ("file-history", "session-env", "todos", "debug", "jobs", "sessions"):
        w.dirs(os.path.join(config, d))
    n_projects = max(20, len(ages) // 250)
    for i, age in enumerate(ages):
        when = now - age * DAY
        sid = str(uuid.uuid4())
        cwd = f"/home/user/work/project-{i % n_projects}"
        key = project_key(cwd)
        tops = _claude_session(w, config, projects, tmp_root, sid, cwd, key, i, when)
        if age > 30:
            bh.claude_idle += 1
            bh.claude_idle_paths.extend(tops)
            bh.claude_transcripts.append((sid, tops[0]))


def _claude_session(
    w: _Writer,
    config: str,
    projects: str,
    tmp_root: str,
    sid: str,
    cwd: str,
    key: str,
    i: int,
    when: float,
) -> list[str]:
    """One session as make_session(full=True) lays it out; its top-level
    artifact paths, the transcript first."""
    pdir = w.dirs(os.path.join(projects, key))
    records = transcript_records(sid, cwd, start_ms=int(when * 1000))
    transcript = w.file(os.path.join(pdir, f"{sid}.jsonl"), jsonl(records), when)

    sdir = w.newdir(os.path.join(pdir, sid))
    sub = w.newdir(os.path.join(sdir, "subagents"))
    res = w.newdir(os.path.join(sdir, "tool-results"))
    line = {"sessionId": sid, "agentId": "a1b2c3d", "isSidechain": True, "cwd": cwd, "type": "user"}
    w.file(os.path.join(sub, "agent-a1b2c3d.jsonl"), jsonl([line]), when)
    w.file(os.path.join(sub, "agent-a1b2c3d.meta.json"), '{"agentType": "Explore"}', when)
    w.file(os.path.join(res, "toolu_01ABC.txt"), "tool result\n" * 16, when)

    fh = w.newdir(os.path.join(config, "file-history", sid))
    w.file(os.path.join(fh, "3f2a9c1e8b7d6a50@v1"), "original contents\n", when)
    w.file(os.path.join(fh, "3f2a9c1e8b7d6a50@v2"), "edited contents\n", when)
    env = w.newdir(os.path.join(config, "session-env", sid))
    w.file(os.path.join(env, "sessionstart-hook-0.sh"), "export FOO=1\n", when)
    todo = w.file(os.path.join(config, "todos", f"{sid}-agent-{sid}.json"), "[]", when)
    debug = w.file(
        os.path.join(config, "debug", f"{sid}.txt"),
        f"[DEBUG] session {sid} started in {cwd}\n",
        when,
    )
    tdir = os.path.join(w.dirs(os.path.join(tmp_root, key)), sid)
    w.newdir(tdir)
    tasks = w.newdir(os.path.join(tdir, "tasks"))
    w.file(os.path.join(tasks, "b1c2d3e4.output"), "task output\n" * 8, when)
    dirs = [sub, res, sdir, fh, env, tasks, tdir]
    tops = [transcript, sdir, fh, env, todo, debug, tdir]
    if i % JOB_EVERY == 0:
        job = w.newdir(os.path.join(config, "jobs", sid[:8]))
        w.file(
            os.path.join(job, "state.json"), json.dumps({"sessionId": sid, "status": "done"}), when
        )
        w.file(os.path.join(job, "output.log"), "job output\n", when)
        dirs.append(job)
        tops.append(job)
    if i % REGISTRY_EVERY == 0:
        pid = DEAD_PID_BASE + i
        record = {"pid": pid, "sessionId": sid, "cwd": cwd, "startedAt": int(when * 1000)}
        sessions = os.path.join(config, "sessions")
        digest = hashlib.sha1(str(pid).encode()).hexdigest()[:16]
        tops.append(w.file(os.path.join(sessions, f"{pid}.json"), json.dumps(record), when))
        tops.append(
            w.file(os.path.join(sessions, f"{pid}.{digest}.key"), os.urandom(16).hex(), when)
        )
    for d in dirs:  # deepest first: a dir's own time is set after its entries'
        os.utime(d, (when, when))
    return tops


# -- codex -------------------------------------------------------------------
def _codex(bh: BenchHome, w: _Writer, ages: list[float], now: float) -> None:
    import time

    home = w.dirs(bh.environ["CODEX_HOME"])
    threads, items, index = [], [], []
    tui = w.dirs(os.path.join(home, "tui-thread-reference-capabilities"))
    for i, age in enumerate(ages):
        when = now - age * DAY
        sid = str(uuid.uuid4())
        start = time.gmtime(when - 3600)
        folder = w.dirs(os.path.join(home, "sessions", time.strftime("%Y/%m/%d", start)))
        stamp = time.strftime("%Y-%m-%dT%H-%M-%S", start)
        iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", start)
        cwd = f"/home/user/work/project-{i % 20}"
        meta = {
            "timestamp": iso,
            "type": "session_meta",
            "payload": {
                "id": sid,
                "timestamp": iso,
                "cwd": cwd,
                "originator": "codex_cli_rs",
                "cli_version": "0.141.0",
                "source": "cli",
                "forked_from_id": None,
                "base_instructions": {"text": CODEX_INSTRUCTIONS},
            },
        }
        lines = [json.dumps(meta)] + [
            json.dumps({"type": "response_item", "payload": {"type": "message", "n": k}})
            for k in range(3)
        ]
        rollout = w.file(
            os.path.join(folder, f"rollout-{stamp}-{sid}.jsonl"), "\n".join(lines) + "\n", when
        )
        w.file(os.path.join(tui, sid), '{"capabilities": []}\n', when)
        updated = int(when)
        threads.append((sid, rollout, updated - 3600, updated, cwd, updated * 1000))
        items.extend((sid, json.dumps({"n": k})) for k in range(3))
        index.append(json.dumps({"id": sid, "thread_name": "a thread", "updated_at": iso}) + "\n")
    conn = sqlite3.connect(os.path.join(home, "state_5.sqlite"))
    conn.execute("PRAGMA journal_mode=WAL")
    with conn:
        conn.executescript(LEGACY_THREADS_SQL)
        conn.executemany(
            "INSERT INTO threads (id, rollout_path, created_at, updated_at, source,"
            " model_provider, cwd, title, sandbox_policy, approval_mode, updated_at_ms)"
            " VALUES (?, ?, ?, ?, 'cli', 'openai', ?, 'a title', 'workspace-write',"
            " 'on-request', ?)",
            threads,
        )
    conn.close()
    conn = sqlite3.connect(os.path.join(home, "thread_history_1.sqlite"))
    conn.execute("PRAGMA journal_mode=WAL")
    with conn:
        conn.executescript(LEGACY_ITEMS_SQL)
        conn.executemany(
            "INSERT INTO thread_items (thread_id, kind, payload) VALUES (?, 'message', ?)", items
        )
    conn.close()
    with open(os.path.join(home, "session_index.jsonl"), "w") as f:
        f.writelines(index)


# -- opencode (1.x JSON storage) ---------------------------------------------
def _oc_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:26]}"


def _opencode(bh: BenchHome, w: _Writer, ages: list[float], now: float) -> None:
    storage = os.path.join(bh.environ["XDG_DATA_HOME"], "opencode", "storage")
    for d in ("session/global", "message", "part", "todo", "session_diff"):
        w.dirs(os.path.join(storage, d))
    for age in ages:
        when = now - age * DAY
        ms = int(when * 1000)
        sid = _oc_id("ses")
        info = {
            "id": sid,
            "slug": "brave-otter",
            "version": "1.1.20",
            "projectID": "global",
            "directory": "/home/user/work/project-oc",
            "title": "a session",
            "time": {"created": ms - 60_000, "updated": ms},
        }
        w.file(os.path.join(storage, "session", "global", f"{sid}.json"), json.dumps(info), when)
        mdir = w.newdir(os.path.join(storage, "message", sid))
        for _ in range(2):
            msgid = _oc_id("msg")
            w.file(
                os.path.join(mdir, f"{msgid}.json"),
                json.dumps({"id": msgid, "sessionID": sid}),
                when,
            )
            pdir = w.newdir(os.path.join(storage, "part", msgid))
            for _ in range(2):
                prt = _oc_id("prt")
                w.file(
                    os.path.join(pdir, f"{prt}.json"),
                    json.dumps({"id": prt, "text": "x" * 100}),
                    when,
                )
            os.utime(pdir, (when, when))
        os.utime(mdir, (when, when))
        for d in ("todo", "session_diff"):
            w.file(os.path.join(storage, d, f"{sid}.json"), "[]", when)


# -- gemini ------------------------------------------------------------------
def _gemini(bh: BenchHome, w: _Writer, ages: list[float], now: float) -> None:
    import time

    base = os.path.join(bh.environ["HOME"], ".gemini", "tmp")
    for i, age in enumerate(ages):
        when = now - age * DAY
        sid = str(uuid.uuid4())
        project = f"{i % 10:064x}"
        tmp = w.dirs(os.path.join(base, project))
        if not os.path.exists(os.path.join(tmp, ".project_root")):
            w.file(os.path.join(tmp, ".project_root"), f"/home/user/work/gemini-{i % 10}", now)
        stamp = time.strftime("%Y-%m-%dT%H-%M", time.gmtime(when))
        meta = {"sessionId": sid, "projectHash": project, "startTime": f"{stamp}:00.000Z"}
        message = {"id": "m1", "type": "user", "content": [{"text": "hi"}]}
        chats = w.dirs(os.path.join(tmp, "chats"))
        w.file(
            os.path.join(chats, f"session-{stamp}-{sid[:8]}.jsonl"),
            json.dumps(meta) + "\n" + json.dumps(message) + "\n",
            when,
        )
        w.file(
            os.path.join(w.dirs(os.path.join(tmp, "logs")), f"session-{sid}.jsonl"),
            '{"event": "start"}\n',
            when,
        )
        out = w.newdir(os.path.join(w.dirs(os.path.join(tmp, "tool-outputs")), f"session-{sid}"))
        w.file(os.path.join(out, "shell-1.txt"), "output\n", when)
        sdir = w.newdir(os.path.join(tmp, sid))
        plans = w.newdir(os.path.join(sdir, "plans"))
        w.file(os.path.join(plans, "plan.md"), "# plan\n", when)
        for d in (out, plans, sdir):
            os.utime(d, (when, when))


# -- grok --------------------------------------------------------------------
def _grok(bh: BenchHome, w: _Writer, ages: list[float], now: float) -> None:
    base = os.path.join(bh.environ["HOME"], ".grok", "sessions")
    for i, age in enumerate(ages):
        when = now - age * DAY
        sid = str(uuid.uuid4())
        ws = w.dirs(
            os.path.join(base, urllib.parse.quote(f"/home/user/work/grok-{i % 10}", safe=""))
        )
        d = w.newdir(os.path.join(ws, sid))
        record = {"session_id": sid, "role": "user", "content": "hi"}
        w.file(os.path.join(d, "chat_history.jsonl"), json.dumps(record) + "\n", when)
        w.file(os.path.join(d, "state.json"), "{}", when)
        os.utime(d, (when, when))


# -- zero --------------------------------------------------------------------
def _zero(bh: BenchHome, w: _Writer, ages: list[float], now: float) -> None:
    base = w.dirs(os.path.join(bh.environ["XDG_DATA_HOME"], "zero", "sessions"))
    for age in ages:
        when = now - age * DAY
        sid = uuid.uuid4().hex
        d = w.newdir(os.path.join(base, sid))
        w.file(
            os.path.join(d, "metadata.json"),
            json.dumps({"sessionId": sid, "parentSessionId": ""}),
            when,
        )
        w.file(os.path.join(d, "events.jsonl"), '{"type": "start"}\n', when)
        cp = w.newdir(os.path.join(d, "checkpoints"))
        w.file(os.path.join(cp, "0001.json"), "{}", when)
        w.file(os.path.join(d, "session.lock"), "", when)
        w.file(os.path.join(d, "lease.lock"), "", when)
        for x in (cp, d):
            os.utime(x, (when, when))


_MAKERS = {
    "claude": _claude,
    "codex": _codex,
    "opencode": _opencode,
    "gemini": _gemini,
    "grok": _grok,
    "zero": _zero,
}
