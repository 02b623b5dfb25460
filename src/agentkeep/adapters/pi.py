"""pi: one file per session, `<root>/--<cwd, / as ->--/<time>_<id>.jsonl`
(or flat in a named session dir): the primary record, whose header line
`{"type": "session", "id", "cwd", "parentSession"}` names a fork's parent
by its file's path (FIELD-NOTES.md "pi"). Ids are UUIDv7, only ever matched
whole. Big bash output goes to `pi-bash-<hex>.log` in the tmp dir, named
only in the transcript (a fork's copied records name the parent's).

In use: pi writes nothing while it runs and its title `pi` hides its
arguments. A pi process holds a session its command line names, whose
file it has open, whose workspace is its cwd, or that was written since it
started; when its cwd or the workspace is unknown, every one (when in
doubt, live).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import structlog

from agentkeep import fsio
from agentkeep.adapters import heads
from agentkeep.adapters.base import Adapter, Known, Root, each_session, session_of, unlisted
from agentkeep.adapters.claude.ids import UUID, canonical
from agentkeep.adapters.claude.registry import START_SLACK_S
from agentkeep.adapters.dirs import entries, measured, parts_below, real_dirs, root_problem
from agentkeep.adapters.heads import read_head
from agentkeep.adapters.times import parse_agent_time
from agentkeep.model import Described, Holder, HolderKind, Session
from agentkeep.processes import Proc, ProcessTable

log = structlog.get_logger("agentkeep.adapters.pi")

SESSION = "session"
BASH_LOG = "bash-log"
# `<ISO time, : and . as ->_<id>.jsonl`.
SESSION_FILE = re.compile(r"[0-9TZ-]+_(?P<id>[0-9a-fA-F-]{36})\.jsonl")
BASH_LOG_NAME = re.compile(rb"pi-bash-[0-9a-f]+\.log")
# The header is one short line; a longer first line is not one.
HEADER_LIMIT = 64 * 1024
# What pi's cli.js is, on a command line whose arguments are not hidden.
PI_CLI = "pi-coding-agent/dist/cli.js"


@dataclass(frozen=True)
class _Header:
    cwd: str | None = None
    parent_path: str | None = None
    # Set when the first line is not a session header naming this id.
    undated: bool = False


@dataclass
class _Pass:
    """What one pass over the sessions root found: each id's files, and
    the pi bash logs in the tmp dirs."""

    only: frozenset[str] | None
    # Each id's files: (path, linked).
    files: dict[str, list[tuple[str, bool]]] = field(default_factory=dict)
    foreign: bool = False
    logs: dict[str, tuple[Path, Root]] = field(default_factory=dict)


class PiAdapter(Adapter):
    """pi's sessions."""

    name = "pi"
    # The tmp dirs hold the bash logs but are no root of pi's: watching
    # them, or walking them when looking again, would read all of /tmp.
    root_kind = "sessions"
    id_in_name = UUID
    canonical_id = staticmethod(canonical)

    # -- where ----------------------------------------------------------
    def watch_dirs(self) -> list[Path]:
        """The root and each workspace dir in it."""
        if not self.root.is_dir():
            return []
        return [self.root, *real_dirs(self.root)]

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """Every session file (or those of `names`) with its bash logs."""
        found = self._find(names)
        yield from each_session(found.files, lambda sid: self._session(sid, found))

    def session_for_path(self, path: str) -> str | None:
        """The id a session file's name holds."""
        parts = parts_below(path, self.root)
        if not parts or len(parts) > 2:
            return None
        return _file_id(parts[-1])

    def describe(self, session: Session) -> Described:
        """Its name (the last `session_info` record, as `pi --resume` shows
        it; an empty name clears it) or its first prompt, and the header's
        time, from the head of its file."""
        path = next((a.path for a in session.artifacts if a.kind == SESSION and not a.linked), "")
        records = list(heads.head_records(path)) if path else []
        header = records[0] if records and records[0].get("type") == "session" else {}
        name: str | None = None
        prompt: str | None = None
        for record in records:
            if record.get("type") == "session_info":
                name = heads.cut(record.get("name"))
            message = record.get("message")
            if prompt is None and isinstance(message, dict) and message.get("role") == "user":
                prompt = heads.cut(heads.text_of(message.get("content")))
        return Described(name or prompt, parse_agent_time(header.get("timestamp")))

    def names_leftovers(self, paths: list[str]) -> set[str]:
        """The bash logs among `paths` that a session file names, by name (a
        tmp dir has more than one spelling). Every one when the sessions
        cannot all be read: whose they are cannot be told, so none goes."""
        if unlisted(self):
            return set(paths)
        named: set[str] = set()
        for files in self._find(None).files.values():
            for path, _ in files:
                logs = _logs_in(path)
                if logs is None:
                    return set(paths)
                named |= logs
        return {path for path in paths if os.path.basename(path) in named}

    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """A command line naming the id, or a pi process that may use it (_uses)."""
        holders = procs.naming(session.id)
        files = [a.path for a in session.artifacts if a.kind == SESSION]
        written = session.last_activity()
        for proc in procs.procs.values():
            if proc.pid not in procs.wrappers and _is_pi(proc.cmdline):
                why = _uses(proc, session.workspace, written, files, procs)
                if why is not None:
                    holders.append(Holder(proc.pid, HolderKind.PROCESS, why))
        return holders

    def _find(self, only: frozenset[str] | None) -> _Pass:
        linked = root_problem(self.env, self.root) is not None
        found = _Pass(only, foreign=linked)
        for entry in entries(self.root):
            if entry.dir:
                # A workspace dir; a linked one is listed to report what is behind it.
                for item in entries(entry.path):
                    self._add(found, item.name, item.path, linked or entry.link)
            else:
                self._add(found, entry.name, entry.path, linked)
        for tmp in self.env.tmp_dirs:
            root = Root.check(tmp, "tmp", self.env.uid)
            for entry in entries(tmp):
                if BASH_LOG_NAME.fullmatch(entry.name.encode()) and not entry.dir:
                    found.logs.setdefault(entry.name, (Path(entry.path), root))
        return found

    @staticmethod
    def _add(found: _Pass, name: str, path: str, linked: bool) -> None:
        sid = _file_id(name)
        if sid is None:
            log.info("skipped: not a pi session file", path=path)
        elif found.only is None or sid in found.only:
            found.files.setdefault(sid, []).append((path, linked))

    def _session(self, sid: str, found: _Pass) -> Session | None:
        seen: set[tuple[int, int]] = set()
        files = sorted(found.files[sid])
        artifacts = measured(
            ((path, SESSION, self.root, linked, True, found.foreign) for path, linked in files),
            seen,
        )
        if not artifacts:
            return None
        read = (h for a in artifacts if (h := _header(a.path, sid)) != _Header())
        header = next(read, _Header())
        logs = _logs(found, [a.path for a in artifacts], header)
        artifacts += measured(
            (
                (path, BASH_LOG, r.path, r.problem is not None, False, r.problem is not None)
                for path, r in logs
            ),
            seen,
        )
        parent = _parent(header.parent_path, sid)
        return session_of(
            self.name, sid, artifacts, workspace=header.cwd, parent=parent, undated=header.undated
        )


def _logs(found: _Pass, files: list[str], header: _Header) -> list[tuple[Path, Root]]:
    """The bash logs in the tmp dirs that the session's own records name; a
    fork's records copied from its parent name the parent's."""
    if not found.logs:
        return []
    named = set().union(*(_logs_in(path) or set() for path in files))
    if named and header.parent_path is not None:
        named -= _logs_in(header.parent_path) or set()
    return [found.logs[name] for name in sorted(named) if name in found.logs]


def _parent(path: str | None, sid: str) -> str | None:
    """The parent's id: from the name of the file `parentSession` names,
    else from that file's header."""
    if path is None:
        return None
    parent = _file_id(os.path.basename(path))
    if parent is None:
        record = heads.json_object((read_head(path, HEADER_LIMIT) or b"").split(b"\n", 1)[0])
        parent = canonical(record.get("id")) if record else None
    return parent if parent != sid else None


def _file_id(name: str) -> str | None:
    match = SESSION_FILE.fullmatch(name)
    return canonical(match["id"]) if match else None


def _header(path: str, sid: str) -> _Header:
    """What a session file's first line says. A missing or unreadable file
    says nothing; a first line that is not a header naming `sid` makes the
    session undated (kept until a person purges it): pi itself does not
    list such a file, and it may be anything."""
    if (data := read_head(path, HEADER_LIMIT)) is None:
        return _Header()
    record = heads.json_object(data.split(b"\n", 1)[0])
    if record is None or record.get("type") != "session":
        log.info("malformed session header", path=path)
        return _Header(undated=True)
    if canonical(record.get("id")) != sid:
        log.info("session header names another id", path=path, names=str(record.get("id"))[:80])
        return _Header(undated=True)
    cwd, parent = record.get("cwd"), record.get("parentSession")
    return _Header(
        cwd=cwd if isinstance(cwd, str) and os.path.isabs(cwd) else None,
        parent_path=parent if isinstance(parent, str) and os.path.isabs(parent) else None,
    )


def _logs_in(path: str) -> set[str] | None:
    """The bash log names a session file holds; None when it is there and
    cannot be read (one gone since it was listed names none)."""
    handle = fsio.open_quietly(path)
    if handle is None:
        return None if os.path.lexists(path) else set()
    try:
        with handle:
            return {m.decode() for line in handle for m in BASH_LOG_NAME.findall(line)}
    except OSError:
        return None


def _is_pi(cmdline: tuple[str, ...]) -> bool:
    """pi's process: its title `pi` (arguments hidden: empty strings
    follow it), or pi's command as started (`pi ...`, `node .../pi ...`,
    `node .../pi-coding-agent/dist/cli.js ...`)."""
    return "pi" in (os.path.basename(arg) for arg in cmdline[:2]) or any(
        arg.endswith(PI_CLI) for arg in cmdline[:3]
    )


def _uses(
    proc: Proc, workspace: str | None, written: float | None, files: list[str], procs: ProcessTable
) -> str | None:
    """Why a pi process may have the session open, or None."""
    if workspace is None:
        return "a pi process runs, and the session's workspace is unknown"
    try:
        cwd = psutil.Process(proc.pid).cwd()
    except psutil.NoSuchProcess:
        return None
    except (psutil.Error, OSError):
        return "a pi process whose working directory cannot be read"
    if cwd in (workspace, os.path.realpath(workspace)):
        return "a pi process runs in the session's workspace"
    if written is None or written >= proc.create_time - START_SLACK_S:
        return "the session was written since a pi process started"
    if any(pid == proc.pid for path in files for pid, _ in procs.holding_open(path)):
        return "a pi process has the session open"
    return None


ADAPTER = PiAdapter
