"""The agent versions the conformance suite installs and checks against.

Bumping one: change its version here, run `python tests/real_agents/install.py`
and the suite (docs/testing.md), and write in FIELD-NOTES what the
new version writes differently. To try what npm has newest without bumping,
set `AGENTKEEP_AGENTS=newest` for both (install.py resolves the versions).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, replace

# The switch: unset (or "pinned") runs PINS; "newest" runs each agent's
# newest version on npm instead.
SWITCH = "AGENTKEEP_AGENTS"
PINNED, NEWEST = "pinned", "newest"


@dataclass(frozen=True)
class Pin:
    agent: str
    package: str
    version: str
    command: str

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"

    def at(self, version: str) -> Pin:
        return replace(self, version=version)


PINS: dict[str, Pin] = {
    pin.agent: pin
    for pin in (
        Pin("claude", "@anthropic-ai/claude-code", "2.1.332", "claude"),
        Pin("codex", "@openai/codex", "0.171.0", "codex"),
        Pin("opencode", "opencode-ai", "1.18.33", "opencode"),
        Pin("gemini", "@google/gemini-cli", "0.61.0", "gemini"),
        Pin("copilot", "@github/copilot", "1.0.102", "copilot"),
        Pin("qwen", "@qwen-code/qwen-code", "0.24.4", "qwen"),
        Pin("pi", "@mariozechner/pi-coding-agent", "0.73.1", "pi"),
        # Qwen Code needs Node >= 22, newer than a machine may have: npm's
        # node-linux-<arch> package holds a whole Node, which the agents'
        # PATH then finds first (the suite runs on Linux only).
        Pin(
            "node",
            f"node-linux-{'arm64' if platform.machine() == 'aarch64' else 'x64'}",
            "22.23.5",
            "node",
        ),
    )
}
