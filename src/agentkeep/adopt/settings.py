"""The setting adopt knows for each agent that cleans up on a timer of its
own (where the agent reads it, how, and the value that keeps every session),
and its settings file as adopt reads, checks and writes it.

- claude: `cleanupPeriodDays` 99999. Claude takes a whole number of days
  from 1 to 2^53-1; any other value is a settings error during which it
  skips its whole sweep, and `0` stops older versions writing transcripts.
- gemini: `general.sessionRetention.enabled` false. The sweep is on by
  default (30 days) and also deletes, at any age, chats it cannot read.
- qwen: `general.cleanupPeriodDays` 99999. `0` is one hour, not off.
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

from agentkeep import fsio, jsonedit
from agentkeep.adapters.claude.roots import paths as claude_paths
from agentkeep.adapters.gemini import GeminiAdapter
from agentkeep.adapters.qwen import QwenAdapter
from agentkeep.agents import AGENTS
from agentkeep.errors import BadParams, Failed
from agentkeep.fsio import file_kind
from agentkeep.jsonedit import Dialect, Document, JSONTextError, Node
from agentkeep.paths import Env

log = structlog.get_logger("agentkeep.adopt")

_KEEP_DAYS = 99999
# JavaScript's largest exact integer: Claude's settings check refuses more.
_SAFE_INTEGER = 2**53 - 1


def _days_at_least(low: int, high: float) -> Callable[[Any], bool]:
    """Whether a value is a whole number of days from `low` to `high`."""

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
        """The key as the agent's docs spell it (`general.cleanupPeriodDays`)."""
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
            _KEEP_DAYS,
            # 2.1.332 reads past a byte order mark, and skips its sweep
            # while a comment keeps the file from parsing.
            Dialect("Claude Code", comments=False, bom=True),
            _days_at_least(_KEEP_DAYS, _SAFE_INTEGER),
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
            _KEEP_DAYS,
            Dialect("Qwen Code", comments=True, bom=True),
            _days_at_least(_KEEP_DAYS, float("inf")),
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


# A file adopt creates holds a setting, and may come to hold a secret.
_NEW_FILE_MODE = 0o600


@dataclass(frozen=True)
class Found:
    """A setting as a file holds it: its value, or no key at all."""

    present: bool
    value: Any = None

    def same(self, other: Found) -> bool:
        """The same setting, compared as JSON."""
        return self.present == other.present and _as_json(self.value) == _as_json(other.value)

    def words(self) -> str:
        """The value as JSON, or "(unset)"."""
        return json.dumps(self.value, ensure_ascii=False) if self.present else "(unset)"


ABSENT = Found(False)


def look(s: Setting, read: Read) -> tuple[Document | None, list[Node], Found]:
    """The document (None: no file), the values on the way to the setting
    (_walk) and the setting as found; BadParams when the agent could not
    read the document."""
    if read.text is None:
        return None, [], ABSENT
    try:
        doc = jsonedit.parse(read.text, s.dialect)
    except JSONTextError as exc:
        why = f"cannot be read as {s.product} reads it ({exc}): nothing changed"
        raise BadParams(f"{read.path} {why}") from None
    chain = _walk(s, read.path, doc)
    found = Found(True, chain[-1].value) if len(chain) == len(s.key) + 1 else ABSENT
    return doc, chain, found


@dataclass(frozen=True)
class Read:
    """A settings file as read: `path` as the agent names it, `real` the
    file behind any link (the one replaced), its text (None: no file)."""

    path: Path
    real: Path
    text: str | None
    st: os.stat_result | None


def read_file(s: Setting, path: Path) -> Read:
    """The settings file at `path` as it is now; Failed or BadParams when it cannot be edited."""
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
        return Read(path, path, None, None)
    except OSError as exc:
        raise Failed(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Failed(f"{path} is {file_kind(st.st_mode)}, not a settings file")
    try:
        data = fsio.read_regular(path, follow=True)  # never waits on a FIFO swapped in
    except OSError as exc:
        raise Failed(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadParams(f"{path} is not UTF-8 (at byte {exc.start}): nothing changed") from None
    return Read(path, real, text, st)


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


def check_writable(read: Read) -> None:
    """Failed when the file is not one agentkeep may replace."""
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


def checked(s: Setting, path: Path, text: str, expected: Any) -> None:
    """The new text, read back as the agent reads it, is exactly the
    document intended: the one setting changed and nothing else."""
    try:
        value = jsonedit.parse(text, s.dialect).root.value
    except JSONTextError as exc:
        value = exc
    if _as_json(value) != _as_json(expected):
        log.error("a change that is not the one intended", file=str(path), got=str(value)[:200])
        raise Failed(f"the change to {path} would not be the one intended: nothing written")


def write(read: Read, text: str | None) -> None:
    """Put `text` in the file read (None: remove it), if it is still the one read."""
    _unchanged(read)
    try:
        if text is None:
            os.unlink(read.real)
            return
        mode = stat.S_IMODE(read.st.st_mode) if read.st is not None else _NEW_FILE_MODE
        fsio.replace(read.real, text.encode("utf-8"), mode)
    except OSError as exc:
        raise Failed(f"cannot write {read.path}: {exc.strerror or exc}; it is as it was") from exc


def _unchanged(read: Read) -> None:
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


GONE = object()


def nested(keys: tuple[str, ...], value: Any) -> Any:
    """`value` under `keys`, outermost first: {k1: {k2: value}}."""
    for name in reversed(keys):
        value = {name: value}
    return value


def put(root: Any, key: tuple[str, ...], value: Any) -> Any:
    """A copy of `root` with `key` set to `value` (made on the way), or
    taken out (GONE)."""
    result = copy.deepcopy(root)
    node = result
    for name in key[:-1]:
        node = node.setdefault(name, {})
    if value is GONE:
        node.pop(key[-1], None)
    else:
        node[key[-1]] = value
    return result


def _as_json(value: Any) -> str:
    """A value as JSON says it (true is not 1, 99999.0 is not 99999)."""
    return json.dumps(value, sort_keys=True, default=repr)
