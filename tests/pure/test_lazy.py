"""agentkeep.lazy: a package's names come from their modules when asked for,
and the list Python reads is the one the type checker reads."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
LAZY = ["agentkeep.core", "agentkeep.prune", "agentkeep.trash"]


def type_checked(package: str) -> dict[str, str]:
    """name -> module, as the package imports them under TYPE_CHECKING."""
    tree = ast.parse((SRC / package.replace(".", "/") / "__init__.py").read_text())
    (block,) = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    return {
        alias.name: node.module.rsplit(".", 1)[1]
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


@pytest.mark.parametrize("package", LAZY)
def test_the_names_python_finds_are_those_the_type_checker_sees(package: str) -> None:
    module = importlib.import_module(package)
    checked = type_checked(package)

    assert checked, "SETUP INVALID: no imports under TYPE_CHECKING"
    assert sorted(module.__all__) == sorted(checked)
    for name, home in checked.items():
        assert getattr(module, name) is getattr(importlib.import_module(f"{package}.{home}"), name)


@pytest.mark.parametrize("package", LAZY)
def test_a_name_the_package_does_not_give_is_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)

    with pytest.raises(AttributeError, match=f"{package}.*no_such_name"):
        module.no_such_name  # noqa: B018
