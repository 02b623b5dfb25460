"""A package's names, each imported from its module when first asked for.

So a command loads only the modules it calls: `agentkeep scan` never
imports the prune, and `status` never imports the removal. A package lists
each name with its module here for Python, and imports them again under
TYPE_CHECKING for the type checker; tests/pure/test_lazy.py holds the two
lists equal.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

Getter = Callable[[str], object]


def names(package: str, homes: Mapping[str, tuple[str, ...]]) -> tuple[list[str], Getter]:
    """`__all__` and the `__getattr__` (PEP 562) of `package`, whose names
    are `homes`: module -> the names it gives."""
    module_of = {name: module for module, given in homes.items() for name in given}
    namespace = sys.modules[package].__dict__

    def attribute(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value  # asked once: the next lookup finds it here
        return value

    return sorted(module_of), attribute
