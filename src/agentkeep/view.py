"""A user's view: the config, the adapters it enables, and their fingerprint.

The CLI sends the daemon the fingerprint of the view it resolved from its own
environment, and the daemon answers only when its own is the same. Resolving
it opens no index, imports no adapter and writes nothing.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkeep import agents
from agentkeep.config import Config, ConfigError, load_config
from agentkeep.paths import Env

if TYPE_CHECKING:
    from agentkeep.adapters.base import Adapter

_loaded: dict[tuple[object, ...], tuple[Config, str | None]] = {}


def load(env: Env, state_dir: Path) -> tuple[Config, str | None]:
    """The config, or the defaults and the error when it is bad (the daemon
    keeps serving and prunes nothing until it is fixed). Read once per
    process while the file stays the same (a command checks it before it
    asks the daemon, which needs it again)."""
    try:
        st = os.stat(env.config_path)
        signature: object = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError as exc:
        signature = exc.errno
    key = (str(state_dir), tuple(sorted(env.environ.items())), signature)
    if key not in _loaded:
        _loaded.clear()
        _loaded[key] = _load(env, state_dir)
    return _loaded[key]


def _load(env: Env, state_dir: Path) -> tuple[Config, str | None]:
    read = partial(
        load_config, home=env.home, state_dir=state_dir, agent_roots=agents.agent_roots(env)
    )
    try:
        return read(env.config_path, required=env.get("AGENTKEEP_CONFIG") is not None), None
    except ConfigError as exc:
        return read(env.state_dir / "no-such-config.toml"), str(exc)


def fingerprint(env: Env, state_dir: Path, enabled: dict[str, Adapter]) -> dict[str, Any]:
    """The view's fingerprint, from the adapters it enables."""
    return _fingerprint(
        env, state_dir, {name: [r.path for r in a.roots()] for name, a in enabled.items()}
    )


def _fingerprint(env: Env, state_dir: Path, roots: dict[str, list[Path]]) -> dict[str, Any]:
    return {
        "config": str(env.config_path),
        "state": str(state_dir),
        "roots": {name: sorted(map(str, paths)) for name, paths in sorted(roots.items())},
    }


def resolve(env: Env) -> dict[str, Any]:
    """The fingerprint of `env`'s view, as Context.open(env) would give it,
    from the enabled agents' and stores' roots alone (adapters.build names
    the same): no adapter is imported."""
    config, _ = load(env, env.state_dir)
    every = agents.agent_roots(env)
    roots = {agent: every[agent] for agent in agents.AGENTS if agent in config.enabled}
    roots |= {store.name: [Path(store.root)] for store in config.stores}
    return _fingerprint(env, env.state_dir, roots)
