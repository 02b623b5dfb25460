"""`agentkeep adopt AGENT`: hand an agent's own clean-up of old sessions
(a sweep blind to leases and pins) to agentkeep through the agent's own
setting (adopt/settings.py); `--undo` puts back what was there.

The change is one splice of the text (jsonedit), read back and compared
with the document it must give before anything is written; a file the
agent cannot read, a read-only one, another user's or a hard-linked one is
never edited. Undo puts back exactly what adopt found, only while the
setting still holds what adopt wrote (kept in `<state>/adopted/<agent>.json`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep import jsonedit
from agentkeep.adopt.settings import (
    ABSENT,
    GONE,
    Found,
    Read,
    Setting,
    check_writable,
    checked,
    look,
    nested,
    put,
    read_file,
    setting,
    write,
)
from agentkeep.errors import Failed
from agentkeep.jsonedit import Document, JSONTextError, Node, Splice
from agentkeep.paths import Env, ensure_private_dir, private_dir_problem
from agentkeep.statefiles import StateFileError, read_state, remove, write_json

log = structlog.get_logger("agentkeep.adopt")


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
    record: dict[str, Any] | None = None  # what undo puts back (adopt only)
    read: Read | None = None
    text: str | None = None
    remove_file: bool = False

    @property
    def changes(self) -> bool:
        """Whether anything is written."""
        return self.text is not None or self.remove_file

    def to_json(self, dry_run: bool) -> dict[str, Any]:
        """The change as `adopt --json` says it."""
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
    read = read_file(s, path)
    doc, chain, before = look(s, read)
    if doc is None:
        return _create(s, read)
    if before.present and s.keeps(before.value):
        return Change(s, path, before, before, undo=False)
    check_writable(read)
    if before.present:
        node = chain[-1]
        splice = Splice(node.start, node.end, json.dumps(s.target))
        record: dict[str, Any] = {"kind": "replace", "old": doc.text[node.start : node.end]}
    else:
        depth = len(chain) - 1
        value = nested(s.key[depth + 1 :], s.target)
        splice = jsonedit.insertion(doc, chain[-1], s.key[depth], value)
        old = doc.text[splice.start : splice.end]
        record = {"kind": "insert", "anchor": list(s.key[: depth + 1]), "old": old}
        record["new"] = splice.new
    text = splice.apply(doc.text)
    checked(s, read.path, text, put(doc.root.value, s.key, s.target))
    record.update(_recorded(s, path, before))
    return Change(s, path, before, Found(True, s.target), False, record, read, text)


def _create(s: Setting, read: Read) -> Change:
    """A new settings file holding the setting alone, laid out as the
    agents lay out theirs."""
    empty = jsonedit.parse("{}\n", s.dialect)
    head, *rest = s.key
    text = jsonedit.insertion(empty, empty.root, head, nested(tuple(rest), s.target)).apply("{}\n")
    checked(s, read.path, text, put({}, s.key, s.target))
    record = {"kind": "create", "content": text, **_recorded(s, read.path, ABSENT)}
    return Change(s, read.path, ABSENT, Found(True, s.target), False, record, read, text)


# -- undo -----------------------------------------------------------------------
def plan_undo(env: Env, agent: str) -> Change:
    """What `adopt AGENT --undo` puts back; Failed when there is nothing to
    undo, or the setting was changed since adopt."""
    s = setting(agent)
    record = _recorded_before(env, s)
    if record is None:
        raise Failed(f"nothing to undo: agentkeep has not changed {s.product}'s {s.name}")
    path, target = Path(record["file"]), Found(True, record["after"])
    before = Found(record["before"]["present"], record["before"]["value"])
    read = read_file(s, path)
    doc, chain, now = look(s, read)
    if now.same(before):  # already as it was: the record has done its work
        return Change(s, path, now, now, undo=True)
    if not now.same(target):
        raise Failed(
            f"{s.name} in {path} is {now.words()} now, not the {target.words()} adopt set:"
            " it was changed since, and undo never writes over that (set it yourself,"
            " or adopt again)"
        )
    assert doc is not None
    check_writable(read)
    if record["kind"] == "create" and read.text == record["content"]:
        return Change(s, path, now, before, True, read=read, remove_file=True)
    if record["kind"] == "replace":
        node = chain[-1]
        splice = Splice(node.start, node.end, record["old"])
        expected = put(doc.root.value, s.key, before.value)
    else:
        splice, expected = _take_out(s, doc, chain, record, path)
    text = splice.apply(doc.text)
    checked(s, path, text, expected)
    return Change(s, path, now, before, True, read=read, text=text)


def _take_out(
    s: Setting, doc: Document, chain: list[Node], record: dict[str, Any], path: Path
) -> tuple[Splice, Any]:
    """The splice that takes out what adopt put in: the whole member it
    inserted while it holds only what adopt wrote (exactly the text adopt
    wrote, where that text is still there), else the setting's key alone."""
    anchor = tuple(record.get("anchor") or s.key[:1])
    whole = Found(True, chain[len(anchor)].value).same(
        Found(True, nested(s.key[len(anchor) :], s.target))
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
    expected = put(doc.root.value, take, GONE)
    if (
        inserted
        and doc.text.startswith(inserted, start)
        and member.value.end <= start + len(inserted)
    ):
        return Splice(start, start + len(inserted), record["old"]), expected
    try:
        return jsonedit.removal(doc, container, index), expected
    except JSONTextError as exc:
        raise Failed(f"{path}: {exc}: nothing changed (take out {s.name} by hand)") from None


def retention_note(env: Env, change: Change) -> str | None:
    """Said after an adopt when agentkeep itself would never remove the
    agent's old sessions (with the agent's own clean-up off, nothing would)."""
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
    text = None if change.remove_file else change.text
    if change.undo:
        write(change.read, text)
        remove(where)
        log.info("adopt undone", agent=change.setting.agent, file=str(change.file))
        return
    previous = _recorded_before(env, change.setting)
    _save_record(env, where, change.record)
    try:
        write(change.read, text)
    except BaseException:
        if previous is None:
            remove(where)
        else:
            _save_record(env, where, previous)
        raise
    log.info("adopted", agent=change.setting.agent, file=str(change.file))


# -- the record ---------------------------------------------------------------------
def _recorded(s: Setting, path: Path, before: Found) -> dict[str, Any]:
    return {
        "agent": s.agent,
        "file": str(path),
        "key": list(s.key),
        "before": {"present": before.present, "value": before.value},
        "after": s.target,
    }


def _record_path(env: Env, s: Setting) -> Path:
    return env.state_dir / "adopted" / f"{s.agent}.json"


def _save_record(env: Env, where: Path, record: dict[str, Any] | None) -> None:
    assert record is not None
    ensure_private_dir(env.state_dir, env.uid)
    ensure_private_dir(where.parent, env.uid)
    write_json(where, record)


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
    texts = {"replace": ("old",), "insert": ("old", "new"), "create": ("content",)}
    kind = value.get("kind") if isinstance(value, dict) else None
    # Only a string names a kind (a list or an object would not even hash).
    before = value.get("before") if isinstance(kind, str) and kind in texts else None
    if not isinstance(before, dict) or not isinstance(before.get("present"), bool):
        raise TypeError("not a record of adopt")
    if not isinstance(value.get("file"), str) or "after" not in value:
        raise TypeError("not a record of adopt")
    if not all(isinstance(value.get(t), str) for t in texts[value["kind"]]):
        raise TypeError(f"a {kind} record without its text")
    return value
