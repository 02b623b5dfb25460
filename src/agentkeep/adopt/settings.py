"""The setting adopt knows for each agent that cleans up on a timer of its
own: where the agent reads it, how, and the value that keeps every session
(see the package's docstring for why each value)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentkeep.adapters.claude.roots import paths as claude_paths
from agentkeep.adapters.gemini import GeminiAdapter
from agentkeep.adapters.qwen import QwenAdapter
from agentkeep.agents import AGENTS
from agentkeep.errors import BadParams
from agentkeep.jsonedit import Dialect
from agentkeep.paths import Env

KEEP_DAYS = 99999
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
