"""Where agentkeep's own files are, resolved from the environment.

Every path follows the environment (HOME, XDG_*, AGENTKEEP_*), so a test can
build a whole fake user by setting variables; nothing here reads the real
home behind the caller's back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


def _var(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    return value if value else None


@dataclass(frozen=True)
class Env:
    """The caller's environment, and agentkeep's own paths derived from it."""

    environ: Mapping[str, str] = field(repr=False)
    home: Path
    uid: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Env:
        environ = dict(os.environ if environ is None else environ)
        home = Path(environ.get("HOME") or os.path.expanduser("~"))
        return cls(environ=environ, home=home, uid=os.getuid())

    def get(self, name: str) -> str | None:
        return _var(self.environ, name)

    def xdg(self, name: str, default: str) -> Path:
        value = self.get(name)
        # XDG says relative values are invalid and must be ignored.
        if value and os.path.isabs(value):
            return Path(value)
        return self.home / default

    @property
    def config_path(self) -> Path:
        explicit = self.get("AGENTKEEP_CONFIG")
        if explicit:
            return Path(explicit).expanduser()
        return self.xdg("XDG_CONFIG_HOME", ".config") / "agentkeep" / "config.toml"

    @property
    def state_dir(self) -> Path:
        return self.xdg("XDG_STATE_HOME", ".local/state") / "agentkeep"

    @property
    def socket_path(self) -> Path:
        explicit = self.get("AGENTKEEP_SOCKET")
        if explicit:
            return Path(explicit)
        runtime = self.get("XDG_RUNTIME_DIR")
        if runtime and os.path.isabs(runtime):
            return Path(runtime) / "agentkeep" / "agentkeep.sock"
        return self.state_dir / "agentkeep.sock"

    @property
    def system_tmp(self) -> Path:
        return Path(self.get("AGENTKEEP_SYSTEM_TMP") or "/tmp")

    @property
    def data_home(self) -> Path:
        return self.xdg("XDG_DATA_HOME", ".local/share")


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) with mode 0700 for the leaf; return it.

    An existing directory keeps its mode: agentkeep never chmods a folder it
    did not create.
    """
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)
    return path
