"""The built-in agents, by name (one adapter module each, adapters/; the
names a config may enable), and where each keeps its sessions: its roots,
from the environment alone (CONTRACT "Agents"). Below config and the
adapters, so that resolving a view imports no adapter."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from agentkeep.paths import Env, dir_var, tmp_dirs


def _absolute(env: Env, var: str) -> Path | None:
    # A relative value would depend on the daemon's cwd: ignored.
    value = env.get(var)
    return Path(value) if value and os.path.isabs(value) else None


def _claude(env: Env) -> list[Path]:
    """The config root, transcripts always in `<config>/projects`, then
    `claude-<uid>` under each tmp dir: Claude appends it to
    $CLAUDE_CODE_TMPDIR too. $CLAUDE_PROJECT_DIR is never read: Claude sets
    it to the workspace (the user's own code) for its hooks, and reading it
    as a projects dir would remove the user's files."""
    config = dir_var(env, "CLAUDE_CONFIG_DIR") or env.home / ".claude"
    tmp = tmp_dirs(env, first=("CLAUDE_CODE_TMPDIR",), below=f"claude-{env.uid}")
    return [config, config / "projects", *tmp]


def _copilot(env: Env) -> list[Path]:
    """Its home, then the legacy `$XDG_STATE_HOME/.copilot`."""
    home = dir_var(env, "COPILOT_HOME") or env.home / ".copilot"
    return [home, env.xdg("XDG_STATE_HOME", ".local/state") / ".copilot"]


def _qwen(env: Env) -> list[Path]:
    """Its home, then its runtime dir when that is another."""
    home = dir_var(env, "QWEN_HOME") or env.home / ".qwen"
    runtime = dir_var(env, "QWEN_RUNTIME_DIR") or home
    return [home] if runtime == home else [home, runtime]


def _pi(env: Env) -> list[Path]:
    explicit = dir_var(env, "PI_CODING_AGENT_SESSION_DIR")
    if explicit is not None:
        return [explicit]
    return [(dir_var(env, "PI_CODING_AGENT_DIR") or env.home / ".pi" / "agent") / "sessions"]


# Each agent's roots, in the order its adapter's roots() gives them (AGENTS:
# the agents in this order).
_ROOTS: dict[str, Callable[[Env], list[Path]]] = {
    "claude": _claude,
    "codex": lambda env: [_absolute(env, "CODEX_HOME") or env.home / ".codex"],
    # Wherever $XDG_DATA_HOME points, as opencode follows it, normalised as
    # its path.join does (`/srv/../data` is `/data`).
    "opencode": lambda env: [Path(os.path.normpath(env.data_home / "opencode"))],
    "gemini": lambda env: [(_absolute(env, "GEMINI_CLI_HOME") or env.home) / ".gemini"],
    "grok": lambda env: [env.home / ".grok"],
    "zero": lambda env: [env.data_home / "zero" / "sessions"],
    "copilot": _copilot,
    "qwen": _qwen,
    "pi": _pi,
}

AGENTS: tuple[str, ...] = tuple(_ROOTS)


def roots(agent: str, env: Env) -> list[Path]:
    """The built-in `agent`'s roots as `env` names them."""
    return _ROOTS[agent](env)


def agent_roots(env: Env) -> dict[str, list[Path]]:
    """Every built-in agent's roots, enabled or not (config checks them)."""
    return {agent: roots(agent, env) for agent in AGENTS}
