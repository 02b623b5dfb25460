"""The dependencies agentkeep runs on, checked against the ranges it was
tested with (pyproject.toml).

A dependency missing or outside its range is named in words when the daemon
starts (it refuses to) and by `doctor`, never met later as a traceback in a
thread. Only the specifiers the project writes are read (`>=X`, `<Y`,
`==Z`); the `ui` extra's are checked only when installed, the `dev` extra's
not at all.
"""

from __future__ import annotations

import operator
import re
from importlib import metadata

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$")
_SPECIFIER = re.compile(r"^(>=|<=|==|<|>)\s*([0-9][0-9A-Za-z.]*)$")
_OPERATORS = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}


def problems(distribution: str = "agentkeep") -> list[str]:
    """What is wrong with the installed dependencies, one sentence each."""
    try:
        requires = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return [f"{distribution} itself is not installed (its metadata is missing)"]
    found: list[str] = []
    for line in requires:
        parsed = _REQUIREMENT.match(line)
        if parsed is None:
            continue
        name, _, specifiers, marker = parsed.groups()
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)", marker or "")
        if extra is not None and extra.group(1) != "ui":
            continue
        problem = _problem(name, specifiers, optional=extra is not None)
        if problem is not None:
            found.append(problem)
    return found


def _problem(name: str, specifiers: str, optional: bool) -> str | None:
    # Lower bounds first, as pyproject.toml writes them (metadata sorts them).
    specs = [s.strip() for s in specifiers.split(",") if s.strip()]
    specs.sort(key=lambda s: s[0] != ">")
    wanted = name + ",".join(specs)
    try:
        installed = metadata.version(name)
    except metadata.PackageNotFoundError:
        return None if optional else f"{name} is missing (agentkeep needs {wanted})"
    for spec in specs:
        match = _SPECIFIER.match(spec)
        if match is not None and not _holds(_version(installed), *match.groups()):
            return f"{name} {installed} is installed; agentkeep is tested with {wanted}"
    return None


def _version(text: str) -> tuple[int, ...]:
    """The leading numeric release of a version (7.1.1rc1 -> (7, 1, 1))."""
    release = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(map(int, release.group().split("."))) if release else ()


def _holds(installed: tuple[int, ...], op: str, wanted: str) -> bool:
    want = _version(wanted)
    width = max(len(installed), len(want))
    have = installed + (0,) * (width - len(installed))
    want = want + (0,) * (width - len(want))
    return bool(_OPERATORS[op](have, want))
