"""A whole fake user in a folder, for the demo, the tests and the benchmark:
its `environ` places every root agentkeep reads (HOME, XDG_*, the tmp dirs,
each agent's variable) inside the folder and removes every variable that
could point at real data, so nothing of the real user's is read or written."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Variables that could point a fake user at real data: always replaced or
# removed. CLAUDE_PROJECT_DIR is no root of agentkeep's, but Claude sets it
# to the developer's own checkout for its hooks: a test that wants it sets it.
SCRUB = (
    "AGENTKEEP_CONFIG",
    "AGENTKEEP_SOCKET",
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_CODE_TMPDIR",
    "GEMINI_CLI_HOME",
    "PI_CODING_AGENT_SESSION_DIR",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
)


@dataclass
class FakeHome:
    """A fake user: its folder, its home and the environment that places it."""

    root: Path
    home: Path
    environ: dict[str, str]

    @property
    def claude(self) -> Path:
        """Claude's config dir."""
        return Path(self.environ["CLAUDE_CONFIG_DIR"])

    @property
    def codex(self) -> Path:
        """The Codex home."""
        return Path(self.environ["CODEX_HOME"])

    @property
    def state(self) -> Path:
        """agentkeep's state dir."""
        return Path(self.environ["XDG_STATE_HOME"]) / "agentkeep"

    @property
    def data(self) -> Path:
        """$XDG_DATA_HOME."""
        return Path(self.environ["XDG_DATA_HOME"])

    @property
    def config_path(self) -> Path:
        """agentkeep's config file."""
        return Path(self.environ["XDG_CONFIG_HOME"]) / "agentkeep" / "config.toml"

    def write_config(self, text: str) -> Path:
        """Write the user's config."""
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(text)
        return self.config_path


def make_fake_home(root: Path, runtime: Path) -> FakeHome:
    """A fake user under `root` (which must hold none yet) whose
    XDG_RUNTIME_DIR, where the socket goes, is `runtime`: unix socket paths
    are short, so the caller picks one and removes it when done."""
    home = root / "home"
    home.mkdir(parents=True)
    tmp = root / "tmp"
    systmp = root / "systmp"
    for d in (tmp, systmp):
        d.mkdir(mode=0o700)
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(runtime, 0o700)
    environ = {k: v for k, v in os.environ.items() if k not in SCRUB}
    environ.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_RUNTIME_DIR=str(runtime),
        TMPDIR=str(tmp),
        TMP=str(tmp),
        TEMP=str(tmp),
        AGENTKEEP_SYSTEM_TMP=str(systmp),
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        CODEX_HOME=str(home / ".codex"),
        COPILOT_HOME=str(home / ".copilot"),
        QWEN_HOME=str(home / ".qwen"),
        QWEN_RUNTIME_DIR=str(home / ".qwen"),
        PI_CODING_AGENT_DIR=str(home / ".pi" / "agent"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return FakeHome(root=root, home=home, environ=environ)
