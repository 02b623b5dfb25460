"""Where agentkeep's own files are, and the directories agents name through
variables, resolved from the environment alone (HOME, XDG_*, AGENTKEEP_*...):
a test builds a whole fake user by setting variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentkeep.rootsafety import root_problem


@dataclass(frozen=True)
class Env:
    """The caller's environment, and agentkeep's own paths derived from it."""

    environ: Mapping[str, str] = field(repr=False)
    home: Path
    uid: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Env:
        """This process's environment, or `environ`."""
        environ = dict(os.environ if environ is None else environ)
        home = Path(environ.get("HOME") or os.path.expanduser("~"))
        return cls(environ=environ, home=home, uid=os.getuid())

    def get(self, name: str) -> str | None:
        """The variable `name`, None when unset or empty."""
        return self.environ.get(name) or None

    def xdg(self, name: str, default: str) -> Path:
        """The XDG directory `name`, else `default` in the home (XDG: a
        relative value is invalid and ignored)."""
        value = self.get(name)
        if value and os.path.isabs(value):
            return Path(value)
        return self.home / default

    @property
    def config_path(self) -> Path:
        """The config file: $AGENTKEEP_CONFIG, else in $XDG_CONFIG_HOME."""
        explicit = self.get("AGENTKEEP_CONFIG")
        if explicit:
            return Path(explicit).expanduser()
        return self.xdg("XDG_CONFIG_HOME", ".config") / "agentkeep" / "config.toml"

    @property
    def state_dir(self) -> Path:
        """agentkeep's state (index, trash, journal, leases) in $XDG_STATE_HOME."""
        return self.xdg("XDG_STATE_HOME", ".local/state") / "agentkeep"

    @property
    def socket_path(self) -> Path:
        """The daemon's socket: $AGENTKEEP_SOCKET, else in $XDG_RUNTIME_DIR or the state dir."""
        explicit = self.get("AGENTKEEP_SOCKET")
        if explicit:
            return Path(explicit)
        runtime = self.get("XDG_RUNTIME_DIR")
        if runtime and os.path.isabs(runtime):
            return Path(runtime) / "agentkeep" / "agentkeep.sock"
        return self.state_dir / "agentkeep.sock"

    @property
    def system_tmp(self) -> Path:
        """The system tmp dir: $AGENTKEEP_SYSTEM_TMP (for tests), else /tmp."""
        return Path(self.get("AGENTKEEP_SYSTEM_TMP") or "/tmp")

    @property
    def data_home(self) -> Path:
        """$XDG_DATA_HOME."""
        return self.xdg("XDG_DATA_HOME", ".local/share")

    @property
    def tmp_dirs(self) -> list[Path]:
        """The user's tmp dirs, where agents leave files by the process (tmp_dirs())."""
        return tmp_dirs(self)


def dir_var(env: Env, var: str) -> Path | None:
    """The directory an agent's variable names (`~` and `~/...` expanded as
    the agents expand them), or None when it is unset or empty. A relative
    path is ignored with a warning: the agent resolves it against its own
    working directory, which agentkeep cannot know."""
    value = env.get(var)
    if not value:
        return None
    if value == "~" or value.startswith("~/"):
        value = str(env.home) + value[1:]
    path = Path(value)
    if not path.is_absolute():
        import structlog  # deferred: commands that log nothing import this module

        structlog.get_logger("agentkeep.paths").warning(
            "relative directory ignored", variable=var, value=value
        )
        return None
    return path


def tmp_dirs(env: Env, first: Sequence[str] = (), below: str = "") -> list[Path]:
    """`below` in each tmp dir an agent may use: those the variables `first`
    name, $TMPDIR, $TMP, $TEMP and the system tmp dir (the order Node's and
    Bun's tmpdir() read them in), the first spelling of each real path."""
    candidates = [dir_var(env, var) for var in (*first, "TMPDIR", "TMP", "TEMP")]
    candidates.append(env.system_tmp)
    unique: dict[str, Path] = {}
    for base in candidates:
        if base is not None:
            path = base / below if below else base
            unique.setdefault(os.path.realpath(path), path)
    return list(unique.values())


class UnsafeDirectory(OSError):
    """A folder agentkeep keeps its own files in is not the user's alone."""


# The state dir's folders, checked with it: another user's hand in one could
# steer a prune (leases, journal), a restore (trash) or an undo (adopted).
STATE_FOLDERS = ("trash", "journal", "leases", "adopted")


def private_dir_problem(path: Path, uid: int | None = None) -> str | None:
    """Why agentkeep must not keep its files in the existing folder `path`
    (rootsafety.root_problem, and it must be a directory), or None."""
    problem = root_problem(path, uid)
    if problem is None and not path.is_dir():
        problem = f"{path} is not a directory"
    return problem


def ensure_private_dir(path: Path, uid: int | None = None) -> Path:
    """Create `path` (and parents) with mode 0700 for the leaf; return it.
    Made or found, it is used only when private_dir_problem() finds nothing,
    else UnsafeDirectory says why (another user who can write to it could
    swap a lease file). One found is never chmodded: it would stay theirs."""
    try:
        path.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)  # mkdir's mode is cut by the umask
    problem = private_dir_problem(path, uid)
    if problem is not None:
        raise UnsafeDirectory(problem)
    return path


def private_state_dir(env: Env) -> Path:
    """The state dir, made private or checked, and each of its STATE_FOLDERS
    (and the folders in them) already there; UnsafeDirectory for the first
    that is not the user's alone."""
    state = ensure_private_dir(env.state_dir, env.uid)
    for name in STATE_FOLDERS:
        folder = state / name
        if not os.path.lexists(folder):
            continue
        for path in (folder, *_folders_in(folder)):
            problem = private_dir_problem(path, env.uid)
            if problem is not None:
                raise UnsafeDirectory(problem)
    return state


def _folders_in(folder: Path) -> list[Path]:
    """The directories in `folder` (links to one too); none when it cannot
    be listed (private_dir_problem said why)."""
    try:
        with os.scandir(folder) as entries:
            return [folder / e.name for e in entries if e.is_dir()]
    except OSError:
        return []
