"""`agentkeep adopt AGENT`: hand an agent's own clean-up of old sessions to
agentkeep, through the agent's own setting in its own settings file; and
`--undo`, which puts back what was there.

Claude Code, Gemini CLI and Qwen Code delete what belongs to old sessions on
a timer of their own, blind to leases, pins and keep_last (FIELD-NOTES).
Adopt writes the value each one honours as "keep" (seen in the real agents:
tests/real_agents/test_own_sweeps.py):

- claude: `cleanupPeriodDays` 99999. Claude takes a whole number of days
  from 1 to 2^53-1 (from about 10^8 on it has no age cut-off at all); any
  other value is a settings error during which it skips its whole sweep,
  and `0` stops older versions writing transcripts at all.
- gemini: `general.sessionRetention.enabled` false. The sweep is on by
  default (30 days) and also deletes, at any age, chats it cannot read.
- qwen: `general.cleanupPeriodDays` 99999. `0` is one hour, not off.

What adopt never does:
- change anything in the file but the one setting: the change is one splice
  of the text (jsonedit), and the result is read back and compared with the
  document it must be before anything is written;
- edit a file the agent itself cannot read (a comment where the agent
  takes none, a byte order mark, a setting on the way named twice, bytes
  that are not UTF-8), nor one that is read-only, another user's, or has a
  second name (a hard link): a link is followed and its target replaced,
  so the link stays a link;
- write over a value the user set since: undo puts back exactly what adopt
  found (the value as it was written, or no key at all) only while the
  setting still holds what adopt wrote.

What adopt changed is kept in `<state>/adopted/<agent>.json` until undone.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep import jsonedit
from agentkeep.adapters.claude.roots import paths as claude_paths
from agentkeep.adapters.gemini import GeminiAdapter
from agentkeep.adapters.qwen import QwenAdapter
from agentkeep.agents import AGENTS
from agentkeep.disk import file_kind, read_regular
from agentkeep.errors import BadParams, Failed
from agentkeep.jsonedit import Dialect, Document, JSONTextError, Node, Splice
from agentkeep.paths import Env, ensure_private_dir, private_dir_problem
from agentkeep.statefiles import StateFileError, read_state, remove, replace_file, write_json

log = structlog.get_logger("agentkeep.adopt")

KEEP_DAYS = 99999
# JavaScript's largest exact integer: Claude's settings check refuses more.
_SAFE_INTEGER = 2**53 - 1
# A file adopt creates holds a setting, and may come to hold a secret.
_NEW_FILE_MODE = 0o600


def _days_at_least(low: int, high: float) -> Callable[[Any], bool]:
    def keeps(value: Any) -> bool:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and value == int(value) and low <= value <= high

    return keeps


@dataclass(frozen=True)
class Setting:
    """One agent's clean-up setting: where the agent reads it, how, the
    value adopt writes, and which values already keep every session."""

    agent: str
    product: str
    variable: str  # the environment variable that moves the agent's folder
    key: tuple[str, ...]
    target: Any
    dialect: Dialect
    keeps: Callable[[Any], bool]
    locate: Callable[[Env], Path]

    @property
    def name(self) -> str:
        return ".".join(self.key)

    def path(self, env: Env) -> Path:
        """The settings file the agent reads in `env`. A relative folder in
        its variable is resolved by the agent against the directory it
        starts in, which agentkeep cannot know: refused."""
        value = env.get(self.variable)
        if value and value != "~" and not value.startswith("~/") and not os.path.isabs(value):
            raise BadParams(
                f"{self.variable}={value} is relative: {self.product} resolves it against the"
                " directory it starts in, so which settings file it reads cannot be told"
            )
        return self.locate(env)


SETTINGS: dict[str, Setting] = {
    s.agent: s
    for s in (
        Setting(
            "claude",
            "Claude Code",
            "CLAUDE_CONFIG_DIR",
            ("cleanupPeriodDays",),
            KEEP_DAYS,
            # 2.1.332 reads past a byte order mark, and skips its sweep
            # while a comment keeps the file from parsing.
            Dialect("Claude Code", comments=False, bom=True),
            _days_at_least(KEEP_DAYS, _SAFE_INTEGER),
            lambda env: claude_paths(env).config / "settings.json",
        ),
        Setting(
            "gemini",
            "Gemini CLI",
            "GEMINI_CLI_HOME",
            ("general", "sessionRetention", "enabled"),
            False,
            # strip-json-comments, then JSON.parse: no byte order mark.
            Dialect("Gemini CLI", comments=True, bom=False),
            lambda value: value is False,
            lambda env: GeminiAdapter(env).root / "settings.json",
        ),
        Setting(
            "qwen",
            "Qwen Code",
            "QWEN_HOME",
            ("general", "cleanupPeriodDays"),
            KEEP_DAYS,
            Dialect("Qwen Code", comments=True, bom=True),
            _days_at_least(KEEP_DAYS, float("inf")),
            lambda env: QwenAdapter(env).home_dir / "settings.json",
        ),
    )
}


def setting(agent: str) -> Setting:
    """The setting adopt knows for `agent`; BadParams naming those it knows."""
    if agent in SETTINGS:
        return SETTINGS[agent]
    known = ", ".join(SETTINGS)
    if agent in AGENTS:
        raise BadParams(
            f"{agent} has no clean-up of its own on a timer: nothing to adopt (adopt knows {known})"
        )
    raise BadParams(f"no such agent: {agent} (adopt knows {known})")


@dataclass(frozen=True)
class Found:
    """A setting as a file holds it: its value, or no key at all."""

    present: bool
    value: Any = None

    def same(self, other: Found) -> bool:
        # As JSON: true is not 1, 99999.0 is not 99999.
        return self.present == other.present and _json(self.value) == _json(other.value)

    def words(self) -> str:
        return json.dumps(self.value, ensure_ascii=False) if self.present else "(unset)"


ABSENT = Found(False)


@dataclass(frozen=True)
class _Read:
    """A settings file as read: `path` as the agent names it, `real` the
    file behind any link (the one replaced), its text (None: no file)."""

    path: Path
    real: Path
    text: str | None
    st: os.stat_result | None


@dataclass(frozen=True)
class Change:
    """What adopt (or undo) does to one setting: `before` and `after`, and
    what is written, if anything: the file's new text, or (undoing the
    creation of a file nobody changed since) its removal."""

    setting: Setting
    file: Path
    before: Found
    after: Found
    undo: bool
    read: _Read | None = None
    text: str | None = None
    remove_file: bool = False
    record: dict[str, Any] | None = None

    @property
    def changes(self) -> bool:
        return self.text is not None or self.remove_file

    def to_json(self, dry_run: bool) -> dict[str, Any]:
        return {
            "agent": self.setting.agent,
            "file": str(self.file),
            "key": self.setting.name,
            "before": self.before.value,
            "after": self.after.value,
            "dry_run": dry_run,
            "undone": self.undo and not dry_run,
        }


# -- adopt --------------------------------------------------------------------
def plan(env: Env, agent: str) -> Change:
    """What `adopt AGENT` changes; BadParams or Failed (nothing written)
    when the file cannot be changed safely."""
    s = setting(agent)
    path = s.path(env)
    read = _read(s, path)
    if read.text is None:
        return _create(s, read)
    doc = _parse(s, read)
    chain = _walk(s, read.path, doc)
    before = _found(s, chain)
    if before.present and s.keeps(before.value):
        return Change(s, path, before, before, undo=False)
    _check_writable(read)
    if before.present:
        node = chain[-1]
        splice = Splice(node.start, node.end, json.dumps(s.target))
        record: dict[str, Any] = {"kind": "replace", "old": doc.text[node.start : node.end]}
    else:
        depth = len(chain) - 1
        value = _nested(s.key[depth + 1 :], s.target)
        splice = jsonedit.insertion(doc, chain[-1], s.key[depth], value)
        old = doc.text[splice.start : splice.end]
        record = {"kind": "insert", "anchor": list(s.key[: depth + 1]), "old": old}
        record["new"] = splice.new
    text = splice.apply(doc.text)
    _checked(s, read.path, text, _put(doc.root.value, s.key, s.target))
    record.update(_recorded(s, path, before))
    return Change(s, path, before, Found(True, s.target), False, read, text, record=record)


def _create(s: Setting, read: _Read) -> Change:
    """A new settings file holding the setting alone, laid out as the
    agents lay out theirs."""
    empty = jsonedit.parse("{}\n", s.dialect)
    head, *rest = s.key
    text = jsonedit.insertion(empty, empty.root, head, _nested(tuple(rest), s.target)).apply("{}\n")
    _checked(s, read.path, text, _put({}, s.key, s.target))
    record = {"kind": "create", "content": text, **_recorded(s, read.path, ABSENT)}
    return Change(s, read.path, ABSENT, Found(True, s.target), False, read, text, record=record)


def _recorded(s: Setting, path: Path, before: Found) -> dict[str, Any]:
    return {
        "agent": s.agent,
        "file": str(path),
        "key": list(s.key),
        "before": {"present": before.present, "value": before.value},
        "after": s.target,
    }


# -- undo -----------------------------------------------------------------------
def plan_undo(env: Env, agent: str) -> Change:
    """What `adopt AGENT --undo` puts back; Failed when there is nothing to
    undo, or the setting was changed since adopt."""
    s = setting(agent)
    record = _load_record(env, s)
    path, target = Path(record["file"]), Found(True, record["after"])
    before = Found(record["before"]["present"], record["before"]["value"])
    read = _read(s, path)
    doc = _parse(s, read) if read.text is not None else None
    chain = _walk(s, path, doc) if doc is not None else []
    now = _found(s, chain) if doc is not None else ABSENT
    if now.same(before):  # already as it was: the record has done its work
        return Change(s, path, now, now, undo=True)
    if not now.same(target):
        raise Failed(
            f"{s.name} in {path} is {now.words()} now, not the {target.words()} adopt set:"
            " it was changed since, and undo never writes over that (set it yourself,"
            " or adopt again)"
        )
    assert doc is not None
    _check_writable(read)
    if record["kind"] == "create" and read.text == record["content"]:
        return Change(s, path, now, before, True, read, remove_file=True)
    if record["kind"] == "replace":
        node = chain[-1]
        splice = Splice(node.start, node.end, record["old"])
        expected = _put(doc.root.value, s.key, before.value)
    else:
        splice, expected = _take_out(s, doc, chain, record, path)
    text = splice.apply(doc.text)
    _checked(s, path, text, expected)
    return Change(s, path, now, before, True, read, text)


def _take_out(
    s: Setting, doc: Document, chain: list[Node], record: dict[str, Any], path: Path
) -> tuple[Splice, Any]:
    """The splice that takes out what adopt put in: the whole member it
    inserted while it holds only what adopt wrote (exactly the text adopt
    wrote, where that text is still there), else the setting's key alone."""
    anchor = tuple(record.get("anchor") or s.key[:1])
    whole = Found(True, chain[len(anchor)].value).same(
        Found(True, _nested(s.key[len(anchor) :], s.target))
    )
    take = anchor if whole else s.key
    container = chain[len(take) - 1]
    found = container.member(take[-1])
    assert found is not None
    index, member = found
    members = container.members or []
    inserted = record.get("new") if whole else None
    start = members[index - 1].value.end if index else container.start + 1
    # Exactly the text adopt wrote, still where it wrote it, and nothing
    # of the member beyond it: taking it out gives back the bytes it found.
    if (
        inserted
        and doc.text.startswith(inserted, start)
        and member.value.end <= start + len(inserted)
    ):
        return Splice(start, start + len(inserted), record["old"]), _put(
            doc.root.value, take, _GONE
        )
    try:
        splice = jsonedit.removal(doc, container, index)
    except JSONTextError as exc:
        raise Failed(f"{path}: {exc}: nothing changed (take out {s.name} by hand)") from None
    return splice, _put(doc.root.value, take, _GONE)


def retention_note(env: Env, change: Change) -> str | None:
    """Said after an adopt when agentkeep itself would never remove the
    agent's old sessions: with the agent's own clean-up off, nothing would."""
    from agentkeep import view

    config, error = view.load(env, env.state_dir)
    agent = change.setting.agent
    if change.undo or error is not None:
        return None
    if agent not in config.enabled:
        return f"agentkeep does not manage {agent} (not in enabled in {env.config_path})"
    if config.retention_for(agent) is None:
        return (
            f"agentkeep has no retention for {agent}, so nothing removes its old sessions"
            f' now: retention = "30d" in {env.config_path} turns pruning on'
        )
    return None


# -- doing it -------------------------------------------------------------------
def apply(env: Env, change: Change) -> None:
    """Write what `change` says, the record for undo first (a crash between
    the two leaves the old value known, never lost); an undo done forgets
    its record."""
    where = _record_path(env, change.setting)
    if not change.changes:
        if change.undo:
            remove(where)
        return
    assert change.read is not None
    if change.undo:
        _write(change)
        remove(where)
        log.info("adopt undone", agent=change.setting.agent, file=str(change.file))
        return
    previous = _recorded_before(env, change.setting)
    _save_record(env, where, change.record)
    try:
        _write(change)
    except BaseException:
        if previous is None:
            remove(where)
        else:
            _save_record(env, where, previous)
        raise
    log.info("adopted", agent=change.setting.agent, file=str(change.file))


def _write(change: Change) -> None:
    read = change.read
    assert read is not None
    _unchanged(read)
    try:
        if change.remove_file:
            os.unlink(read.real)
            return
        assert change.text is not None
        mode = stat.S_IMODE(read.st.st_mode) if read.st is not None else _NEW_FILE_MODE
        replace_file(read.real, change.text.encode("utf-8"), mode)
    except OSError as exc:
        raise Failed(f"cannot write {read.path}: {exc.strerror or exc}; it is as it was") from exc


def _unchanged(read: _Read) -> None:
    """The file is still the one read: an agent that rewrote it meanwhile
    (Qwen Code adds its `$version` at start) would lose that write."""
    try:
        st = os.stat(read.real)
    except FileNotFoundError:
        st = None
    if read.st is None and st is None:
        return
    if read.st is None or st is None or _signature(st) != _signature(read.st):
        raise Failed(f"{read.path} changed while agentkeep read it: nothing written, run it again")


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


# -- reading the file -------------------------------------------------------------
def _read(s: Setting, path: Path) -> _Read:
    real = Path(os.path.realpath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise Failed(f"{path} is a link to {real}, which does not exist") from None
        if not path.parent.is_dir():
            raise Failed(
                f"{path.parent} does not exist: {s.product} has not run as this user"
                " (run it once first)"
            ) from None
        return _Read(path, path, None, None)
    except OSError as exc:
        raise Failed(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Failed(f"{path} is {file_kind(st.st_mode)}, not a settings file")
    try:
        data = read_regular(path)  # never waits on a FIFO swapped in
    except OSError as exc:
        raise Failed(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadParams(f"{path} is not UTF-8 (at byte {exc.start}): nothing changed") from None
    return _Read(path, real, text, st)


def _parse(s: Setting, read: _Read) -> Document:
    assert read.text is not None
    try:
        return jsonedit.parse(read.text, s.dialect)
    except JSONTextError as exc:
        raise BadParams(
            f"{read.path} cannot be read as {s.product} reads it ({exc}): nothing changed"
        ) from None


def _walk(s: Setting, path: Path, doc: Document) -> list[Node]:
    """The values on the way to the setting, from the document down, as far
    as they go (the setting's own value last when it is set)."""
    chain = [doc.root]
    for depth, name in enumerate(s.key):
        node = chain[-1]
        if node.members is None:
            where = ".".join(s.key[:depth]) or "the document"
            shown = json.dumps(node.value, ensure_ascii=False)[:60]
            raise BadParams(f"{where} in {path} is {shown}, not an object: nothing changed")
        if node.repeats(name):
            named = ".".join(s.key[: depth + 1])
            raise BadParams(f"{path} sets {named} more than once: nothing changed")
        found = node.member(name)
        if found is None:
            break
        chain.append(found[1].value)
    return chain


def _found(s: Setting, chain: list[Node]) -> Found:
    return Found(True, chain[-1].value) if len(chain) == len(s.key) + 1 else ABSENT


def _check_writable(read: _Read) -> None:
    st = read.st
    if st is None:
        return
    if st.st_uid != os.getuid():
        raise Failed(f"{read.path} belongs to another user: agentkeep changes only yours")
    if not st.st_mode & stat.S_IWUSR:
        raise Failed(f"{read.path} is read-only: agentkeep leaves a file made read-only as it is")
    if st.st_nlink > 1:
        raise Failed(
            f"{read.path} has {st.st_nlink} names (hard links): replacing it would part them"
        )


def _checked(s: Setting, path: Path, text: str, expected: Any) -> None:
    """The new text, read back as the agent reads it, is exactly the
    document intended: the one setting changed and nothing else."""
    try:
        value = jsonedit.parse(text, s.dialect).root.value
    except JSONTextError as exc:
        value = exc
    if _json(value) != _json(expected):
        log.error("a change that is not the one intended", file=str(path), got=str(value)[:200])
        raise Failed(f"the change to {path} would not be the one intended: nothing written")


# -- documents as values ------------------------------------------------------------
_GONE = object()


def _nested(keys: tuple[str, ...], value: Any) -> Any:
    for name in reversed(keys):
        value = {name: value}
    return value


def _put(root: Any, key: tuple[str, ...], value: Any) -> Any:
    """A copy of `root` with `key` set to `value` (made on the way), or
    taken out (_GONE)."""
    result = copy.deepcopy(root)
    node = result
    for name in key[:-1]:
        node = node.setdefault(name, {})
    if value is _GONE:
        node.pop(key[-1], None)
    else:
        node[key[-1]] = value
    return result


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


# -- the record ---------------------------------------------------------------------
def _record_path(env: Env, s: Setting) -> Path:
    return env.state_dir / "adopted" / f"{s.agent}.json"


def _save_record(env: Env, where: Path, record: dict[str, Any] | None) -> None:
    assert record is not None
    ensure_private_dir(env.state_dir, env.uid)
    ensure_private_dir(where.parent, env.uid)
    write_json(where, record)


def _load_record(env: Env, s: Setting) -> dict[str, Any]:
    record = _recorded_before(env, s)
    if record is None:
        raise Failed(f"nothing to undo: agentkeep has not changed {s.product}'s {s.name}")
    return record


def _recorded_before(env: Env, s: Setting) -> dict[str, Any] | None:
    where = _record_path(env, s)
    for folder in (env.state_dir, where.parent):
        # A record says what undo writes into the agent's settings: only
        # one from folders nobody else can write to is read.
        problem = private_dir_problem(folder, env.uid) if folder.exists() else None
        if problem is not None:
            raise Failed(problem)
    try:
        return read_state(where, _record_shape)
    except StateFileError as exc:
        raise Failed(str(exc)) from None


def _record_shape(value: Any) -> dict[str, Any]:
    """A record as adopt writes it (TypeError otherwise)."""
    if not isinstance(value, dict) or value.get("kind") not in ("replace", "insert", "create"):
        raise TypeError("not a record of adopt")
    before = value.get("before")
    if not isinstance(value.get("file"), str) or not isinstance(before, dict):
        raise TypeError("not a record of adopt")
    if not isinstance(before.get("present"), bool) or "after" not in value:
        raise TypeError("not a record of adopt")
    kind = value["kind"]
    texts = {"replace": ("old",), "insert": ("old", "new"), "create": ("content",)}[kind]
    if not all(isinstance(value.get(t), str) for t in texts):
        raise TypeError(f"a {kind} record without its text")
    return value
