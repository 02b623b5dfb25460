"""One user's view: the config, the adapters, the index and the state dir
every core function takes, and the rules they all read through it (the pins,
each agent's cutoff, an age a person typed)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agentkeep import adapters, view
from agentkeep.adapters.base import Adapter
from agentkeep.config import Config, ConfigError, parse_duration
from agentkeep.core.ending import ends_as
from agentkeep.errors import BadParams, ConfigInvalid, Failed, NotFound
from agentkeep.index import SQLITE_NEEDED, Index
from agentkeep.model import Shape
from agentkeep.paths import Env, UnsafeDirectory, private_state_dir
from agentkeep.statefiles import Pins, StateFileError

if TYPE_CHECKING:
    from agentkeep.prune.evidence import Watch
    from agentkeep.trash.expiry import Expiry

log = structlog.get_logger("agentkeep.core")


def _open_index(path: Path) -> Index:
    """The index; in memory when it cannot be written at `path` (a cache of
    the disk: everything still works)."""
    if sqlite3.sqlite_version_info < SQLITE_NEEDED:
        needed = ".".join(map(str, SQLITE_NEEDED))
        raise Failed(
            f"agentkeep needs SQLite {needed} or later for its index (generated columns);"
            f" this Python has SQLite {sqlite3.sqlite_version}",
        )
    try:
        return Index(path, adapters.evidence_kinds())
    except (sqlite3.Error, OSError) as exc:
        log.warning("the index cannot be written; kept in memory", path=str(path), error=str(exc))
        return Index(path, adapters.evidence_kinds(), memory=True)


@dataclass
class Context:
    """Everything one user's view needs. A bad config is recorded, not
    raised: the daemon keeps serving and prunes nothing until it is fixed."""

    env: Env
    state_dir: Path
    config: Config
    config_error: str | None
    adapters: dict[str, Adapter]
    index: Index
    # The last prune's summary when it could not be saved: status shows it.
    unsaved_prune: dict[str, Any] | None = None

    @cached_property
    def trash_expiry(self) -> Expiry:
        """The trash's expiry, made when first asked for: its modules (the
        archive's tarfile among them) are a cost of the commands that touch
        the trash, not of every one."""
        from agentkeep.trash.expiry import Expiry

        return Expiry(self.state_dir)

    @classmethod
    def open(cls, env: Env) -> Context:
        """One user's view. Refused (exit 1) when the state dir is not the
        user's alone: someone else's pins or leases would decide removals."""
        try:
            state_dir = private_state_dir(env)
        except UnsafeDirectory as exc:
            raise Failed(f"refusing the state dir: {exc}") from None
        except OSError as exc:
            why = exc.strerror or exc
            raise Failed(f"cannot create the state dir {env.state_dir}: {why}") from None
        config, error = view.load(env, state_dir)
        index = _open_index(state_dir / "index.sqlite")
        ctx = cls(env, state_dir, config, error, adapters.build(env, config), index)
        index.forget_agents(ctx.adapters)
        return ctx

    def reload(self) -> None:
        """Read the config again and rebuild the adapters."""
        self.config, self.config_error = view.load(self.env, self.state_dir)
        self.adapters = adapters.build(self.env, self.config)
        self.index.forget_agents(self.adapters)
        if self.config_error:
            log.error("config invalid: pruning stops until it is fixed", error=self.config_error)

    def require_config(self) -> Config:
        """The config, or ConfigInvalid when it is bad."""
        if self.config_error:
            raise ConfigInvalid(self.config_error)
        return self.config

    def prunes_on_schedule(self) -> bool:
        """A scheduled prune runs only with a valid config that sets a retention."""
        return self.config_error is None and self.config.has_retention()

    def fingerprint(self) -> dict[str, Any]:
        """The config path, state dir and roots this view resolved."""
        return view.fingerprint(self.env, self.state_dir, self.adapters)

    def adapter(self, agent: str) -> Adapter:
        """The enabled agent's adapter, or BadParams."""
        try:
            return self.adapters[agent]
        except KeyError:
            known = ", ".join(sorted(self.adapters)) or "none"
            raise BadParams(f"unknown or disabled agent {agent!r} (enabled: {known})") from None

    def session_id(self, agent: str, raw: str) -> str:
        """A session id a person typed, canonical, or NotFound."""
        sid = self.adapter(agent).canonical_id(str(raw))
        if sid is None:
            raise NotFound(f"no such session: {agent} {raw!r} is not a valid {agent} session id")
        return sid

    def pins(self) -> set[tuple[str, str]]:
        """Every pin. A damaged pins.json stops whatever needs the pins (a lost
        pin would let its session go) until a person fixes it."""
        try:
            return Pins(self.state_dir).all()
        except StateFileError as exc:
            raise ends_as(exc, f"{exc}; until then nothing is pruned") from None

    def watch(self) -> Watch:
        """Who holds this user's sessions, looked up when asked (prune.evidence)."""
        from agentkeep.prune.evidence import Watch  # the prune's, not every command's

        return Watch(self.adapters, self.state_dir, self.pins(), self.env.uid)

    def cutoffs(
        self, override: float | None, agent: str | None, now: float
    ) -> dict[str, float | None]:
        """Each agent's cutoff: exactly now minus its retention; None for an
        agent with a size cap and no retention (not with --older-than)."""
        out: dict[str, float | None] = {}
        for name in [agent] if agent else list(self.adapters):
            retention = override if override is not None else self.config.retention_for(name)
            if retention is not None:
                out[name] = now - retention
            elif override is None and self.config.max_size_for(name) is not None:
                out[name] = None
        return out

    def shapes(self, override: float | None) -> dict[str, Shape]:
        """Every agent's keep_last and max_size; --older-than keeps keep_last
        (it only keeps more) and drops the size caps (they remove more)."""
        out: dict[str, Shape] = {}
        for name in self.adapters:
            cap = self.config.max_size_for(name) if override is None else None
            out[name] = Shape(
                keep_last=self.config.keep_last_for(name),
                max_size=cap[0] if cap else None,
                size_group=cap[1] if cap else "",
            )
        return out


def parse_age(text: Any, key: str) -> float:
    """An age a person gave on the command line (`key` names the option)."""
    try:
        return parse_duration(text, key)
    except ConfigError as exc:
        raise ends_as(exc) from None
