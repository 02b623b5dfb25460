"""Where Claude's roots are (agents.roots: its config root, `<config>/projects`
and its tmp roots). The paths follow from the environment alone; each root's
safety (its problem) is checked afresh whenever a layout is asked for with
`check`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentkeep import agents
from agentkeep.adapters.base import Root
from agentkeep.paths import Env


@dataclass(frozen=True)
class Paths:
    """The roots' paths as the environment names them."""

    config: Path
    projects: Path
    tmp: tuple[Path, ...]


@dataclass(frozen=True)
class Layout:
    """Claude's roots, each with its problem."""

    config: Root
    # Always `<config>/projects`: a link there is a linked directory below
    # the config root.
    projects: Root
    tmp: tuple[Root, ...]


def paths(env: Env) -> Paths:
    """The roots' paths."""
    config, projects, *tmp = agents.roots("claude", env)
    return Paths(config, projects, tuple(tmp))


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
