"""Qwen Code: sessions under `$QWEN_HOME` and `$QWEN_RUNTIME_DIR`
(FIELD-NOTES.md "Qwen Code"; qwen.layout lists what names a session).

The transcript `<runtime>/projects/<key>/chats/<id>.jsonl` is primary; the
workspace is its records' `cwd`, never the lossy `<key>`. Tool outputs in
`<runtime>/tmp/<sha256(cwd)>/` are a session's only as its transcript names
them (a fork's copied records name the parent's). Shared files that name a
session are residual, never removed. In use: a command line naming the id,
or a registry record or writer lock of a live process (not a reused pid).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import structlog

from agentkeep import agents
from agentkeep.adapters.base import Adapter, Known, Root, each_session, session_of
from agentkeep.adapters.claude.ids import UUID, canonical
from agentkeep.adapters.claude.reading import read_json
from agentkeep.adapters.claude.registry import registry_holders, registry_id
from agentkeep.adapters.claude.transcripts import lineage
from agentkeep.adapters.dirs import entries, measured, parts_below, real_dirs
from agentkeep.adapters.gemini.chats import PROJECT_HASH, project_hash
from agentkeep.adapters.qwen import layout
from agentkeep.model import Described, Holder, Session
from agentkeep.processes import ProcessTable

__all__ = ["ADAPTER", "QwenAdapter"]

log = structlog.get_logger("agentkeep.adapters.qwen")


@dataclass(frozen=True)
class _Item:
    path: str
    kind: str
    root: Root
    linked: bool


@dataclass
class _Pass:
    """What one pass over Qwen's directories found, by session id."""

    only: frozenset[str] | None
    found: dict[str, dict[str, _Item]] = field(default_factory=lambda: defaultdict(dict))
    # The project tmp dirs (by a workspace's sha256) and their tool outputs,
    # listed when a session of the workspace asks.
    tmp_dirs: dict[str, Path] = field(default_factory=dict)
    outputs: dict[str, set[str]] = field(default_factory=dict)
    shared: list[Path] = field(default_factory=list)

    def add(self, sid: str | None, path: str, kind: str, root: Root, linked: bool) -> None:
        """One entry of session `sid` (None: of none)."""
        if sid is not None and (self.only is None or sid in self.only):
            self.found[sid].setdefault(path, _Item(path, kind, root, linked))

    def add_all(
        self, root: Root, directory: Path, kind: str, name_id: Callable[[str], str | None]
    ) -> None:
        """Each entry of `directory` whose name is a session's."""
        linked = layout.is_linked(root, directory)
        for entry in entries(directory):
            self.add(name_id(entry.name), entry.path, kind, root, linked)


class QwenAdapter(Adapter):
    """Qwen Code's sessions."""

    name = "qwen"
    evidence_kinds = frozenset({layout.REGISTRY, layout.WRITER_LOCK})
    id_in_name = UUID
    canonical_id = staticmethod(canonical)

    @cached_property
    def home_dir(self) -> Path:
        """$QWEN_HOME, else ~/.qwen."""
        return agents.roots(self.name, self.env)[0]

    @cached_property
    def runtime_dir(self) -> Path:
        """$QWEN_RUNTIME_DIR, else the home dir."""
        return agents.roots(self.name, self.env)[-1]

    def _roots(self) -> tuple[Root, Root]:
        home = Root.check(self.home_dir, "home", self.env.uid)
        if self.runtime_dir == self.home_dir:
            return home, home
        return home, Root.check(self.runtime_dir, "runtime", self.env.uid)

    def roots(self) -> list[Root]:
        """Its home, and its runtime dir when that is another."""
        home, runtime = self._roots()
        return [home] if home is runtime else [home, runtime]

    def watch_dirs(self) -> list[Path]:
        """The dirs of the areas and of each project key."""
        home, runtime = self.home_dir, self.runtime_dir
        projects = runtime / "projects"
        dirs = [home, runtime, projects, runtime / "debug", runtime / "tmp"]
        dirs += [home / "file-history", home / "plans", home / "sessions"]
        dirs.append(runtime / "tmp" / layout.WRITER_LOCKS)
        # A project's tmp dir is not watched: the outputs there are named
        # only by a transcript, whose change is the session's news.
        for key in real_dirs(projects):
            dirs += [key, key / "chats", key / "chats" / "archive", key / "subagents"]
        return [d for d in dict.fromkeys(dirs) if d.is_dir()]

    def sessions(
        self, names: frozenset[str] | None = None, known: Known | None = None
    ) -> Iterator[Session]:
        """One pass over Qwen's directories for all of them."""
        found = self._find(names)
        residual = self._residual(found)
        yield from each_session(
            found.found, lambda sid: self._session(sid, found, residual.get(sid, []))
        )

    def session_for_path(self, path: str) -> str | None:
        """The session a path's name, or a registry file, names."""
        runtime = parts_below(path, self.runtime_dir) or []
        home = parts_below(path, self.home_dir) or []
        if len(home) == 2 and home[0] == "sessions" and layout.REGISTRY_FILE.fullmatch(home[1]):
            return registry_id(read_json(str(self.home_dir / "sessions" / home[1])))
        return layout.path_id(home, runtime)

    def describe(self, session: Session) -> Described:
        """Its title (the last `custom_title` record, a rename or Qwen's own
        title) or its first prompt (as typed: `systemPayload.displayText`),
        and its first record's time, from the heads of its chats."""
        chats = (a.path for a in session.artifacts if a.kind == layout.TRANSCRIPT and not a.linked)
        return next(
            (d for path in chats if (d := layout.described(path)) != Described()), Described()
        )

    def holders(self, session: Session, procs: ProcessTable) -> list[Holder]:
        """Command lines naming the id; registry records and writer locks of
        a live process (not a reused pid)."""
        holders = procs.naming(session.id)
        for artifact in session.artifacts:
            if artifact.kind == layout.REGISTRY:
                holders += registry_holders(artifact.path, session.id, procs, layout.REGISTRY_FILE)
            elif artifact.kind == layout.WRITER_LOCK and artifact.path.endswith(".lock"):
                holders += layout.lock_holders(artifact.path, session.id, procs)
        return holders

    def _find(self, only: frozenset[str] | None) -> _Pass:
        found = _Pass(only)
        home, runtime = self._roots()
        self._find_projects(found, runtime)
        for in_home, area, kind, name_id, _ in layout.AREAS:
            root = home if in_home else runtime
            found.add_all(root, root.path.joinpath(*area), kind, name_id)
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
                linked = layout.is_linked(runtime, directory)
                for entry in entries(directory):
                    sid, kind = layout.chat_name(entry.name)
                    if sid is not None and (not entry.dir or entry.link):
                        found.add(sid, entry.path, kind, runtime, linked)
                    elif entry.name != "archive":
                        log.info("skipped: not a qwen session file", path=entry.path)
            found.add_all(runtime, Path(key.path) / "subagents", layout.SUBAGENTS, canonical)
            found.shared += [Path(key.path) / name for name in layout.SHARED_PROJECT]

    def _find_registry(self, found: _Pass, home: Root) -> None:
        directory = self.home_dir / "sessions"
        linked = layout.is_linked(home, directory)
        for entry in entries(directory):
            if layout.REGISTRY_FILE.fullmatch(entry.name) and not entry.dir:
                sid = registry_id(read_json(entry.path))
                if sid is None:
                    log.info("registry file names no session", path=entry.path)
                found.add(sid, entry.path, layout.REGISTRY, home, linked)

    def _find_tmp(self, found: _Pass, runtime: Root) -> None:
        """The project tmp dirs (by the workspace's sha256): their background
        shells, and where the outputs only transcripts name lie."""
        for project in entries(self.runtime_dir / "tmp"):
            if not (project.dir and PROJECT_HASH.fullmatch(project.name)):
                continue
            found.tmp_dirs[project.name] = Path(project.path)
            shells = Path(project.path) / "background-shells"
            found.add_all(runtime, shells, layout.TOOL_OUTPUT, canonical)
            found.shared += [Path(project.path) / name for name in layout.SHARED_TMP]

    def _session(self, sid: str, found: _Pass, residual: list[str]) -> Session | None:
        items = sorted(
            found.found[sid].values(), key=lambda i: (i.kind != layout.TRANSCRIPT, i.path)
        )
        transcripts = [i.path for i in items if i.kind == layout.TRANSCRIPT]
        workspace, parent = lineage(sid, transcripts)
        if workspace is not None:
            items += self._outputs(found, workspace, items)
        artifacts = measured(
            (
                i.path,
                i.kind,
                i.root.path,
                i.linked,
                i.kind == layout.TRANSCRIPT,
                i.root.problem is not None,
            )
            for i in items
        )
        if not artifacts:
            return None
        return session_of(
            self.name, sid, artifacts, workspace=workspace, parent=parent, residual=residual
        )

    def _outputs(self, found: _Pass, workspace: str, items: list[_Item]) -> list[_Item]:
        """The tool outputs in the workspace's tmp dir that the session's
        transcripts (its subagents' too) name: read only when it holds any."""
        digest = project_hash(workspace)
        project = found.tmp_dirs.get(digest)
        if project is None:
            return []
        if digest not in found.outputs:
            listed = entries(project)
            found.outputs[digest] = {
                e.name for e in listed if e.name.endswith(".output") and not e.dir
            }
        if not (present := found.outputs[digest]):
            return []
        named: set[str] = set()
        for item in items:
            if item.kind == layout.TRANSCRIPT:
                named |= layout.outputs_named(Path(item.path))
            elif item.kind == layout.SUBAGENTS and not item.linked:
                for entry in entries(item.path):
                    if entry.name.endswith(".jsonl"):
                        named |= layout.outputs_named(Path(entry.path))
        _, runtime = self._roots()
        linked = layout.is_linked(runtime, project)
        return [
            _Item(str(project / name), layout.TOOL_OUTPUT, runtime, linked)
            for name in sorted(named & present)
        ]

    def _residual(self, found: _Pass) -> dict[str, list[str]]:
        """The shared files that name each session found (residual)."""
        named: dict[str, list[str]] = defaultdict(list)
        wanted = found.only if found.only is not None else found.found.keys()
        for path in found.shared:
            for sid in sorted(layout.ids_in(path) & wanted):
                named[sid].append(str(path))
        return named


ADAPTER = QwenAdapter
