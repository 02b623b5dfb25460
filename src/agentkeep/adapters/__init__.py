"""Adapters, one module per agent, and the set the user's config enables."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from agentkeep import fsio
from agentkeep.adapters import base
from agentkeep.adapters.base import Adapter
from agentkeep.agents import AGENTS
from agentkeep.paths import Env

if TYPE_CHECKING:
    from agentkeep.config import Config

__all__ = ["build", "evidence_kinds", "unreadable"]


def _adapter_class(agent: str) -> type[Adapter]:
    module = importlib.import_module(f"agentkeep.adapters.{agent}")
    cls: type[Adapter] = module.ADAPTER
    return cls


def unreadable(
    env: Env, config: Config, recorded: Mapping[str, Iterable[str]]
) -> dict[str, dict[str, str]]:
    """What cannot be listed now (path -> why), by agent (only those with
    some): each enabled agent's own (base.unlisted), and those of the
    `recorded` places (an index's, by agent) that still cannot be."""
    found: dict[str, dict[str, str]] = {}
    for agent, adapter in build(env, config).items():
        again = {path: fsio.list_problem(path) for path in recorded.get(agent, ())}
        now = {**{p: why for p, why in again.items() if why is not None}, **base.unlisted(adapter)}
        if now:
            found[agent] = dict(sorted(now.items()))
    return found


def evidence_kinds() -> frozenset[str]:
    """The kinds of artifact any built-in agent reads its evidence of use
    from (a store has none)."""
    return frozenset().union(*(_adapter_class(agent).evidence_kinds for agent in AGENTS))


def build(env: Env, config: Config) -> dict[str, Adapter]:
    """The adapters the config enables, then one per configured store."""
    from agentkeep.adapters.stores import StoreAdapter

    adapters = {agent: _adapter_class(agent)(env) for agent in AGENTS if agent in config.enabled}
    return adapters | {store.name: StoreAdapter(env, store) for store in config.stores}
