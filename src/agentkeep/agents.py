"""The built-in agents, by name: one adapter module each (adapters/), and the
names a config may enable. Below both, so that config checks names without
importing the adapters."""

from __future__ import annotations

AGENTS: tuple[str, ...] = (
    "claude",
    "codex",
    "opencode",
    "gemini",
    "grok",
    "zero",
    "copilot",
    "qwen",
    "pi",
)
