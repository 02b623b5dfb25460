"""grok: one directory per session under `~/.grok/sessions/<workspace>/`.

`<workspace>` is the workspace path percent-encoded; `<id>/chat_history.jsonl`
is what grok lists the session by. Memory observations
(`memory-v2/workspaces/*/observations/_inbox/<id>__*.md`) are the user's:
residual, never removed (FIELD-NOTES.md "grok"). A workspace dir that
cannot be listed keeps every session unsafe: an id may have a dir in
several workspaces (merged), so which it holds cannot be told.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections import defaultdict
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

import structlog

from agentkeep import disk, fsio
from agentkeep.adapters import dirs, heads
from agentkeep.adapters.base import (
    Adapter,
    Known,
    each_session,
    name_id,
    session_of,
    valid_name,
)
from agentkeep.model import Described, Session

log = structlog.get_logger("agentkeep.adapters.grok")

CHAT = "chat_history.jsonl"
KINDS = {CHAT: "chat-history"}
# Only the first record is read, to check the id it names.
CHAT_HEAD = 64 * 1024
# Percent-encoding leaves only these characters in a workspace dir's name.
_ENCODED = re.compile(r"[A-Za-z0-9%._~!$&'()*+,;=:@-]+")
# A session's dirs: (decoded workspace, directory) of each workspace it is in.
_Places = list[tuple[str | None, Path]]


class GrokAdapter(Adapter):
    """grok's sessions."""

    name = "grok"
    root_kind = "config"
    canonical_id = staticmethod(name_id)

    @cached_property
    def _sessions_dir(self) -> Path:
        return self.root / "sessions"

    def watch_dirs(self) -> list[Path]:
        """sessions/ and each workspace dir in it."""
        if not os.path.isdir(self._sessions_dir):
            return []
        return [self._sessions_dir, *dirs.real_dirs(self._sessions_dir)]

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """Each session dir of every workspace (those of `names`), merged by id."""
        places: dict[str, _Places] = defaultdict(list)
        unlisted = dirs.Unlisted()  # workspace dirs that may hold any session: all unsafe
        for workspace, directory in self._workspace_dirs():
            if names is not None:
                for name in names:
                    if _present(directory, name, unlisted):
                        places[name].append((workspace, directory / name))
                continue
            for item in dirs.entries(directory, unlisted):
                if (sid := name_id(item.name)) is None:
                    log.info("skipped: not a grok session id", path=item.path)
                else:
                    places[sid].append((workspace, Path(item.path)))
        memory = self._memory(names)
        problem = dirs.root_problem(self.env, self.root)
        return each_session(
            places,
            lambda sid: self._session(sid, places[sid], problem, memory.get(sid, []), unlisted),
        )

    def session_for_path(self, path: str) -> str | None:
        """The id of the session dir `path` lies in."""
        parts = dirs.parts_below(path, self._sessions_dir)
        if not parts or len(parts) < 2 or not valid_name(parts[0]):
            return None
        return name_id(parts[1])

    def describe(self, session: Session) -> Described:
        """Its first prompt: the chat history's first user record."""
        for artifact in session.artifacts:
            if artifact.primary and not artifact.linked:
                for record in heads.head_records(artifact.path):
                    if record.get("role") == "user":
                        return Described(heads.cut(heads.text_of(record.get("content"))))
        return Described()

    def _workspace_dirs(self) -> Iterator[tuple[str | None, Path]]:
        """(decoded workspace, directory) for every workspace dir. A linked
        one is listed through, so its sessions are reported as linked."""
        for entry in dirs.entries(self._sessions_dir):
            if entry.dir:
                yield _decode(entry.name), Path(entry.path)
            else:
                log.info("skipped: not a workspace directory", path=entry.path)

    def _session(
        self,
        sid: str,
        places: _Places,
        problem: str | None,
        memory: list[str],
        unlisted: dirs.Unlisted,
    ) -> Session | None:
        sessions_linked = disk.is_link(self._sessions_dir)
        seen: set[tuple[int, int]] = set()
        artifacts = []
        workspace: str | None = None
        undated = False
        own = dirs.Unlisted()
        for decoded, directory in places:
            if not os.path.isdir(directory):
                log.info("skipped: not a session directory", path=str(directory))
                continue
            # Invariant 6: through a linked sessions/ or workspace dir, or on a
            # root others can write to, nothing is removed.
            linked = problem is not None or sessions_linked or disk.is_link(directory.parent)
            artifacts += dirs.directory_artifacts(
                str(directory),
                str(self.root),
                primary=CHAT,
                kinds=KINDS,
                linked=linked,
                seen=seen,
                unlisted=own,
            )
            workspace = workspace or decoded
            undated = undated or not _names_session(directory / CHAT, sid)
        if not artifacts:
            return None
        return session_of(
            self.name,
            sid,
            artifacts,
            workspace=workspace,
            undated=undated,
            residual=memory,
            unreadable=dirs.unreadable(artifacts, [*unlisted, *own]),
        )

    def _memory(self, only: frozenset[str] | None) -> dict[str, list[str]]:
        """Memory observations by the session they name: `<id>__*.md` in each
        workspace's `_inbox`. An id may hold `__` itself, so every prefix
        before a `__` is a candidate (they are only ever reported)."""
        named: dict[str, list[str]] = defaultdict(list)
        for workspace in dirs.entries(self.root / "memory-v2" / "workspaces"):
            if not workspace.dir or workspace.link:
                continue
            for note in dirs.entries(Path(workspace.path) / "observations" / "_inbox"):
                if note.dir or not note.name.endswith(".md"):
                    continue
                stem = note.name.removesuffix(".md")
                for cut in (m.start() for m in re.finditer("__", stem)):
                    sid = name_id(stem[:cut])
                    if sid is not None and (only is None or sid in only):
                        named[sid].append(note.path)
        return named


def _present(directory: Path, sid: str, unlisted: dirs.Unlisted) -> bool:
    """Whether `directory` has an entry `sid`; a directory that cannot be
    looked into is added to `unlisted`."""
    try:
        os.lstat(directory / sid)
    except OSError as exc:
        if dirs.unlisted_error(exc):
            unlisted.add(directory, exc)
        return False
    return True


def _decode(name: str) -> str | None:
    """The workspace a dir name encodes: exact percent-decoding of an
    absolute path; None for anything else (logged, its sessions still count)."""
    if not _ENCODED.fullmatch(name):
        log.info("workspace dir name is not percent-encoded", name=name)
        return None
    try:
        path = urllib.parse.unquote(name, errors="strict")
    except UnicodeDecodeError:
        log.info("workspace dir name does not decode to UTF-8", name=name)
        return None
    if not os.path.isabs(path) or "\0" in path:
        log.info("workspace dir name is not an absolute path", name=name)
        return None
    return path


def _names_session(chat: Path, sid: str) -> bool:
    """False when the first record of chat_history.jsonl names another
    session: then the directory is not what it seems, and the session is kept
    undated. A missing, unreadable or malformed head names nothing (the id
    comes from the directory, which is how grok finds it)."""
    line = (fsio.read_head(chat, CHAT_HEAD) or b"").split(b"\n", 1)[0]
    if (record := heads.json_object(line)) is None:
        if line.strip():
            log.info("malformed first record in chat history", path=str(chat))
        return True
    named = record.get("session_id")
    if named is None or named == sid:
        return True
    log.info("chat history names another session", path=str(chat), names=str(named)[:200])
    return False


ADAPTER = GrokAdapter
