"""The user's config file: what may be removed, when, and from where.

Only this file decides what agentkeep removes. A missing file means no
retention (nothing is pruned); a file that cannot be read, does not parse,
or holds an unknown key or a bad value is a `ConfigError` naming the key and
the value, never a fall-back to a default. Rules beyond the contract's words
(each errs towards keeping):

- A duration is a quoted string, ASCII digits then one of `m h d w`, at most
  1000 years; `"0"` (or `"0d"`) only for `trash`. A size is ASCII digits then
  one of `K M G T`, more than zero. A TOML number for either is refused.
- `max_removals` is a TOML integer >= 1, `keep_last` >= 0 (`true`, `1.0`
  and `"200"` are refused); `enabled` may be empty, a name twice counts once.
- An agent's own `keep_last` and `max_size` override the global ones, as its
  retention does; the global `max_size` is one cap shared by every agent
  without its own.
- A store's name is 1-64 of `[A-Za-z0-9_.-]`, starting alphanumeric, unique,
  no built-in agent's; its root may start with `~/` (`~user` is refused).
  The root may not be or contain `$HOME` or an agent's root, nor overlap the
  state dir or another store (a root inside an agent's root is allowed: the
  contract's own example is one). Paths are compared component by component,
  as written and with links resolved.
- A config path that is a link to nothing is an error, not a missing file.
  Errors point into arrays zero-based (`stores[0].depth`).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from agentkeep import fsio
from agentkeep.agents import AGENTS
from agentkeep.config.values import (
    ConfigError,
    parse_duration,
    parse_retention,
    parse_size,
    whole,
)

DEFAULT_PRUNE_INTERVAL: float = 6 * 3600.0
DEFAULT_MAX_REMOVALS: int = 200
DEFAULT_TRASH: float = 7 * 86400.0

_STORE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TOP_KEYS = (
    "retention",
    "prune_interval",
    "max_removals",
    "trash",
    "enabled",
    "keep_last",
    "max_size",
    "agents",
    "stores",
)
_AGENT_KEYS = ("retention", "keep_last", "max_size")
_STORE_KEYS = ("name", "root", "depth")
# Each agent's roots, by agent.
_Roots = Mapping[str, list[Path]]


class StoreConfig(NamedTuple):
    """A `[[stores]]` entry: every directory exactly `depth` below `root` is a session."""

    name: str
    root: Path
    depth: int


@dataclass(frozen=True)
class Config:
    """A loaded config. Durations are seconds; `*_text` keep them as written."""

    path: Path
    exists: bool
    retention: float | None
    retention_text: str | None
    agent_retention: dict[str, float]
    agent_retention_text: dict[str, str]
    prune_interval: float
    max_removals: int
    trash: float
    enabled: tuple[str, ...]
    stores: tuple[StoreConfig, ...]
    keep_last: int = 0
    agent_keep_last: Mapping[str, int] = field(default_factory=dict)
    max_size: int | None = None
    agent_max_size: Mapping[str, int] = field(default_factory=dict)

    def retention_for(self, agent: str) -> float | None:
        """An agent's own retention overrides the global one, even when there is no global one."""
        return self.agent_retention.get(agent, self.retention)

    def keep_last_for(self, agent: str) -> int:
        """An agent's own keep_last, else the global one."""
        return self.agent_keep_last.get(agent, self.keep_last)

    def max_size_for(self, agent: str) -> tuple[int, str] | None:
        """The cap on `agent`'s sessions and the group that shares it (the
        agent's own name, or "*" for the global cap), or None."""
        if agent in self.agent_max_size:
            return self.agent_max_size[agent], agent
        return None if self.max_size is None else (self.max_size, "*")

    def has_retention(self) -> bool:
        """Whether anything here lets a prune remove: a retention, or a size cap."""
        return (
            self.retention is not None
            or bool(self.agent_retention)
            or self.max_size is not None
            or bool(self.agent_max_size)
        )


def load_config(
    path: Path,
    *,
    home: Path,
    state_dir: Path,
    agent_roots: Mapping[str, list[Path]],
    required: bool = False,
) -> Config:
    """Read and check the config at `path` (and nothing else). A missing file
    gives `exists=False` and no retention, unless it is `required` (a path
    the user named: a typo there must not read as "no config"); every
    problem is a ConfigError."""
    try:
        data = _read(path)
        if data is None and required:
            raise ConfigError("does not exist (named by AGENTKEEP_CONFIG)")
        return _config(path, data or {}, data is not None, home, state_dir, agent_roots)
    except ConfigError as exc:
        exc.path = path
        raise


def defaults(path: Path) -> Config:
    """What a config at `path` that does not exist means: no retention, every default."""
    return _config(path, {}, False, path, path, {})  # no stores: no paths to check


def _read(path: Path) -> dict[str, object] | None:
    try:
        # A FIFO there must not hang every command. A link is followed: dotfile
        # managers link configs into place.
        raw = fsio.read_regular(path, limit=fsio.SMALL_FILE_LIMIT, follow=True)
    except FileNotFoundError:
        # A link to nothing is a mistake to show, not a file to ignore.
        if os.path.islink(path):
            raise ConfigError("is a link to nothing") from None
        return None
    except OSError as exc:
        raise ConfigError(f"cannot be read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}") from None


def _config(
    path: Path, data: Mapping[str, object], exists: bool, home: Path, state_dir: Path, roots: _Roots
) -> Config:
    _no_unknown(data, _TOP_KEYS, "")
    text = data.get("retention")
    agents = _agents(data.get("agents", {}))
    return Config(
        path=path,
        exists=exists,
        retention=None if text is None else parse_retention(text, "retention"),
        retention_text=None if text is None else str(text),
        agent_retention=agents.retention,
        agent_retention_text=agents.retention_text,
        prune_interval=_duration(data, "prune_interval", DEFAULT_PRUNE_INTERVAL),
        max_removals=whole(data.get("max_removals", DEFAULT_MAX_REMOVALS), "max_removals", 1),
        trash=_duration(data, "trash", DEFAULT_TRASH, allow_zero=True),
        enabled=_enabled(data.get("enabled", list(AGENTS))),
        stores=_stores(data.get("stores", []), home, state_dir, roots),
        keep_last=whole(data.get("keep_last", 0), "keep_last", 0, 1_000_000),
        agent_keep_last=agents.keep_last,
        max_size=parse_size(data["max_size"], "max_size") if "max_size" in data else None,
        agent_max_size=agents.max_size,
    )


def _no_unknown(table: Mapping[str, object], known: tuple[str, ...], prefix: str) -> None:
    """A typo must never fall back silently: every key is one we know."""
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"unknown key (known: {', '.join(known)})", prefix + key, value)


def _duration(
    data: Mapping[str, object], key: str, default: float, *, allow_zero: bool = False
) -> float:
    return parse_duration(data[key], key, allow_zero=allow_zero) if key in data else default


@dataclass
class _AgentTables:
    """What `[agents.<name>]` tables set, by agent."""

    retention: dict[str, float] = field(default_factory=dict)
    retention_text: dict[str, str] = field(default_factory=dict)
    keep_last: dict[str, int] = field(default_factory=dict)
    max_size: dict[str, int] = field(default_factory=dict)


def _agents(table: object) -> _AgentTables:
    if not isinstance(table, dict):
        raise ConfigError("must be a table of [agents.<name>]", "agents", table)
    found = _AgentTables()
    for agent, entry in table.items():
        key = f"agents.{agent}"
        if agent not in AGENTS:
            raise ConfigError(f"unknown agent (one of {', '.join(AGENTS)})", key)
        if not isinstance(entry, dict):
            raise ConfigError("must be a table", key, entry)
        _no_unknown(entry, _AGENT_KEYS, key + ".")
        if "retention" in entry:
            found.retention[agent] = parse_retention(entry["retention"], key + ".retention")
            found.retention_text[agent] = str(entry["retention"])
        if "keep_last" in entry:
            found.keep_last[agent] = whole(entry["keep_last"], key + ".keep_last", 0, 1_000_000)
        if "max_size" in entry:
            found.max_size[agent] = parse_size(entry["max_size"], key + ".max_size")
    return found


def _enabled(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("must be a list of agent names", "enabled", value)
    for agent in value:
        if agent not in AGENTS:
            raise ConfigError(
                f"unknown agent {agent!r} (one of {', '.join(AGENTS)})", "enabled", value
            )
    return tuple(dict.fromkeys(value))


def _stores(value: object, home: Path, state_dir: Path, roots: _Roots) -> tuple[StoreConfig, ...]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError("must be an array of tables ([[stores]])", "stores", value)
    stores: list[StoreConfig] = []
    for index, table in enumerate(value):
        key = f"stores[{index}]"
        store = _store(table, key, home)
        if store.name in (s.name for s in stores):
            raise ConfigError(
                "a store of this name is already configured", key + ".name", store.name
            )
        problem = _root_problem(store.root, home, state_dir, roots, stores)
        if problem:
            raise ConfigError(problem, key + ".root", table["root"])
        stores.append(store)
    return tuple(stores)


def _store(table: Mapping[str, object], key: str, home: Path) -> StoreConfig:
    _no_unknown(table, _STORE_KEYS, key + ".")
    for name in _STORE_KEYS:
        if name not in table:
            raise ConfigError("missing (every store needs name, root and depth)", f"{key}.{name}")
    return StoreConfig(
        name=_store_name(table["name"], key + ".name"),
        root=_store_root(table["root"], key + ".root", home),
        depth=whole(table["depth"], key + ".depth", 1),
    )


def _store_name(value: object, key: str) -> str:
    if not isinstance(value, str) or not _STORE_NAME.fullmatch(value):
        raise ConfigError(
            "must be 1-64 of A-Z a-z 0-9 _ . -, starting with a letter or digit", key, value
        )
    if value in AGENTS:
        raise ConfigError("is a built-in agent's name", key, value)
    return value


def _store_root(value: object, key: str, home: Path) -> Path:
    if not isinstance(value, str) or not value or "\0" in value:
        raise ConfigError("must be a path", key, value)
    # Only the given home, never os.path.expanduser: the caller's environment decides.
    text = str(home) + value[1:] if value == "~" or value.startswith("~/") else value
    if not os.path.isabs(text):
        raise ConfigError("must be an absolute path (or start with ~/)", key, value)
    return Path(_normal(text))


def _root_problem(
    root: Path, home: Path, state_dir: Path, roots: _Roots, earlier: list[StoreConfig]
) -> str | None:
    """Why a store may not have this root: a store removes whole directories
    below its root, so it must never reach the home, an agent's tree (its
    sessions have their own rules), agentkeep's state, or another store."""
    if _contains(root, home):
        return f"is or contains $HOME ({home})"
    for agent, paths in roots.items():
        for path in paths:
            if _contains(root, path):
                return f"is or contains {agent}'s root {path}"
    if _overlaps(root, state_dir):
        return f"overlaps agentkeep's state dir {state_dir}"
    for store in earlier:
        if _overlaps(root, store.root):
            return f"overlaps store {store.name!r} ({store.root})"
    return None


def _normal(path: str) -> str:
    # normpath keeps a leading "//" (POSIX leaves its meaning open; Linux and
    # macOS read it as "/"): fold it, or "//home/u" and "/home/u" would differ
    # component-wise and a store's root would be kept in two spellings.
    normal = os.path.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def _forms(path: Path) -> tuple[Path, Path]:
    """The path as written (normalised) and with every existing link resolved."""
    return Path(_normal(os.path.abspath(path))), Path(os.path.realpath(path))


def _contains(outer: Path, inner: Path) -> bool:
    """`inner` is `outer` or below it, compared by components, in any form."""
    return any(i.is_relative_to(o) for o in _forms(outer) for i in _forms(inner))


def _overlaps(a: Path, b: Path) -> bool:
    return _contains(a, b) or _contains(b, a)
