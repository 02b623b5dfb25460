"""Listings of the directories many sessions share, reused while each
directory's ctime holds, and the registry records read from them, re-read
whenever a record's file changed. A directory that cannot be listed is never
kept as listed: it is added to the caller's Unlisted every time."""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from agentkeep import fsio
from agentkeep.adapters import dirs
from agentkeep.adapters.claude.listing import (
    entry_at,
    entry_of,
    flags_by_name,
)
from agentkeep.adapters.claude.reading import read_json
from agentkeep.adapters.claude.registry import (
    REGISTRY_KEY_NAME,
    REGISTRY_NAME,
    Registry,
    registry_id,
)
from agentkeep.adapters.dirs import Unlisted
from agentkeep.fsio import Entry


class Listings:
    """Listings of the directories many sessions share (the key dirs, the
    config areas, sessions/), so that listing some sessions again costs no
    pass over every session's files. A listing is reused while its
    directory's ctime holds (an entry made or removed, or a chmod, moves
    it); a record is re-read when its file's (mtime, size, inode) changed
    (a /clear or /resume inside a running claude rewrites it in place)."""

    def __init__(self) -> None:
        # directory -> (ctime, {name: LINK/DIR flags}); an Entry is made
        # only when asked for (kept, they cost much memory).
        self._dirs: dict[str, tuple[int, dict[str, int]]] = {}
        self._records: dict[str, tuple[tuple[int, int, int], object]] = {}
        self._named: dict[str, _Named] = {}
        self._registries: dict[str, Registry] = {}

    def named(
        self,
        directory: str,
        identify: Callable[[str], str | None],
        sids: frozenset[str],
        unlisted: Unlisted,
    ) -> list[Entry]:
        """The entries of `directory` whose names `identify` as one of `sids`,
        each looked at now (a name gone since the listing is left out)."""
        try:
            ctime = os.stat(directory).st_ctime_ns
        except OSError:  # cannot be stat'ed: listed afresh, nothing kept
            self._named.pop(directory, None)
            listed = dirs.entries(directory, unlisted, follow=False)
            return [e for e in listed if identify(e.name) in sids]
        named = self._named.get(directory)
        if named is None or named.ctime != ctime:
            try:
                now = {sys.intern(name) for name in fsio.listed_names(directory)}
            except OSError as exc:
                self._named.pop(directory, None)
                if not isinstance(exc, FileNotFoundError):
                    unlisted.add(directory, exc)
                return []
            if named is None:
                named = self._named[directory] = _Named(identify)
            named.relist(now, ctime)
        # Most of a batch's sessions have no entry in most key dirs: the
        # ids are matched as sets, not looked up one by one in each.
        by_id = named.by_id
        found = (
            entry_at(directory, n, unlisted)
            for sid in sids & by_id.keys()
            for n in _names(by_id[sid])
        )
        return [e for e in found if e is not None]

    def entries(self, directory: str, unlisted: Unlisted) -> list[Entry]:
        """Every entry of `directory`, from its kept listing."""
        listed = self._listing(directory, unlisted)
        if listed is None:
            return []
        return [entry_of(directory, name, flags) for name, flags in listed[1].items()]

    def _listing(self, directory: str, unlisted: Unlisted) -> tuple[int, dict[str, int]] | None:
        """(ctime, flags by name), listed again only when the ctime moved;
        None when it is missing or cannot be listed."""
        try:
            ctime = os.stat(directory).st_ctime_ns
        except OSError as exc:
            self._dirs.pop(directory, None)
            if not isinstance(exc, FileNotFoundError):
                unlisted.add(directory, exc)
            return None
        cached = self._dirs.get(directory)
        if not cached or cached[0] != ctime:
            flags = flags_by_name(directory, unlisted)
            if flags is None:
                self._dirs.pop(directory, None)
                return None
            cached = (ctime, flags)
            self._dirs[directory] = cached
        return cached

    def record(self, path: str, still: bool = False) -> object:
        """The JSON in `path`, re-read when its file changed. `still`: the
        file's process has exited, and a file nobody is left to rewrite is
        taken as last read (its listing's ctime still holds) without a stat."""
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
            cached = (signature, read_json(path))
            self._records[path] = cached
        return cached[1]

    def registry(
        self, directory: str, alive: set[int] | None, unlisted: Unlisted
    ) -> Registry | None:
        """`sessions/` as a Registry, kept while its ctime holds. Only a live
        process rewrites its record in place: those records (every one when
        `alive` is None: cannot tell) are looked at again on every call, the
        rest only when the directory changes."""
        listed = self._listing(directory, unlisted)
        if listed is None:
            self._registries.pop(directory, None)
            return None
        ctime, names = listed
        registry = self._registries.get(directory)
        if registry is None or registry.ctime != ctime:
            registry = Registry(ctime, {}, defaultdict(list), {}, {})
            for name, flags in names.items():
                if match := REGISTRY_NAME.fullmatch(name):
                    registry.files[match["pid"]] = entry_of(directory, name, flags)
                elif match := REGISTRY_KEY_NAME.fullmatch(name):
                    registry.keys[match["pid"]].append(entry_of(directory, name, flags))
            changing: Iterable[str] = registry.files.keys()
            self._registries[directory] = registry
        elif alive is None:
            changing = registry.files.keys()
        else:
            changing = {str(pid) for pid in alive} & registry.files.keys()
        for pid in changing:
            entry = registry.files[pid]
            still = alive is not None and int(pid) not in alive
            registry.name(pid, registry_id(self.record(entry.path, still)))
        return registry


class _Named:
    """A directory's names, by the session each names (for named(), which
    looks at each entry it returns). When the ctime moves, it is listed
    again by name alone, and only the names new or gone are identified (a
    prune's batches each find the shared directories changed)."""

    __slots__ = ("by_id", "ctime", "identify", "names")

    def __init__(self, identify: Callable[[str], str | None]) -> None:
        self.ctime, self.identify = 0, identify
        self.names: set[str] = set()
        # Its one name, or a list of them (most have one: a list costs memory).
        self.by_id: dict[str, str | list[str]] = {}

    def relist(self, now: set[str], ctime: int) -> None:
        """Take the names `now` listed at `ctime` in."""
        gone, new = self.names - now, now - self.names
        for name in gone:
            self._forget(name)
        self.names -= gone
        for name in new:
            name = sys.intern(name)
            self.names.add(name)
            if (sid := self.identify(name)) is not None:
                self._add(sid, name)
        self.ctime = ctime

    def _forget(self, name: str) -> None:
        sid = self.identify(name)
        found = self.by_id.get(sid) if sid is not None else None
        if sid is None or found is None:
            return
        if found == name or found == [name]:
            del self.by_id[sid]
        elif isinstance(found, list) and name in found:
            found.remove(name)

    def _add(self, sid: str, name: str) -> None:
        have = self.by_id.setdefault(sid, name)
        if isinstance(have, list):
            have.append(name)
        elif have is not name:
            self.by_id[sid] = [have, name]


def _names(found: str | list[str] | None) -> Sequence[str]:
    if found is None:
        return ()
    return (found,) if isinstance(found, str) else found
