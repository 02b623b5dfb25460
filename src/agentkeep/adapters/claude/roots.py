"""Where Claude's roots are: its config root ($CLAUDE_CONFIG_DIR, else
~/.claude) with transcripts always in `<config>/projects`, and `claude-<uid>`
under $CLAUDE_CODE_TMPDIR, each tmp variable and the system tmp. The paths
follow from the environment alone; each root's safety (its problem) is
checked afresh whenever a layout is asked for with `check`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentkeep.adapters.base import Root
from agentkeep.adapters.dirs import dir_var, tmp_dirs
from agentkeep.paths import Env


@dataclass(frozen=True)
class Paths:
    """The roots' paths as the environment names them."""

    config: Path
    projects: Path
    tmp: tuple[Path, ...]


@dataclass(frozen=True)
class Layout:
    config: Root
    # Always `<config>/projects`: a link there is a linked directory below
    # the config root.
    projects: Root
    tmp: tuple[Root, ...]


def _config_dir(env: Env) -> Path:
    return dir_var(env, "CLAUDE_CONFIG_DIR") or env.home / ".claude"


def _tmp_dirs(env: Env) -> list[Path]:
    """`claude-<uid>` under each tmp dir, first spelling of each real path.
    Claude always appends `claude-<uid>`, to $CLAUDE_CODE_TMPDIR too (and
    sets that variable to its own `claude-<uid>` for the commands it
    runs, so a claude started there writes `claude-<uid>/claude-<uid>`)."""
    return tmp_dirs(env, first=("CLAUDE_CODE_TMPDIR",), below=f"claude-{env.uid}")


def paths(env: Env) -> Paths:
    """The roots' paths. Transcripts are always under <config>/projects.
    $CLAUDE_PROJECT_DIR is never read: Claude sets it to the workspace (the
    user's own code) for the hooks it runs, and reading it as a projects dir
    would remove the user's files."""
    config = _config_dir(env)
    return Paths(config, config / "projects", tuple(_tmp_dirs(env)))


def layout(paths: Paths, problem: Callable[[Path], str | None] | None) -> Layout:
    """Every root, each with its problem when `problem` is given (path
    lookups, which only map names, skip it)."""

    def root(path: Path, kind: str) -> Root:
        return Root(path, kind, problem(path) if problem is not None else None)

    return Layout(
        config=root(paths.config, "config"),
        projects=root(paths.projects, "projects"),
        tmp=tuple(root(path, "tmp") for path in paths.tmp),
    )


def below(path: str, root: Path, resolve: bool) -> list[str] | None:
    """The components of `path` below `root` as given, or with `resolve`
    below `root` resolved (a syscall per component: tried only once `path`
    lies below no root as given, as watched paths do), or None."""
    return _parts_below(path, os.path.realpath(root) if resolve else os.fspath(root))


def _parts_below(path: str, base: str) -> list[str] | None:
    if path == base:
        return []
    prefix = base.rstrip("/") + "/"
    return path[len(prefix) :].split("/") if path.startswith(prefix) else None
