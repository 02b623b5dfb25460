"""Imports go one way: down the layers below, never in a cycle.

Every module under src/agentkeep is parsed (not imported) and each import
in it is an edge: at the top, inside a function, under TYPE_CHECKING (a
cycle a type checker sees is still one a reader must follow). A module
imports only from its own layer or the ones below, and the modules of one
layer import each other without a cycle. Every module is named in LAYERS:
a new one forces a decision about where it stands.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# Lowest first. A module may import its own layer and any below it.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "base helpers",
        {
            "agentkeep",
            "agentkeep.agents",
            "agentkeep.children",
            "agentkeep.dependencies",
            "agentkeep.descriptors",
            "agentkeep.disk",
            "agentkeep.fsio",
            "agentkeep.errors",
            "agentkeep.jsonedit",
            "agentkeep.jsontext",
            "agentkeep.logs",
            "agentkeep.methods",
            "agentkeep.model",
            "agentkeep.mounts",
            "agentkeep.paths",
            "agentkeep.processes",
            "agentkeep.progress",
            "agentkeep.protocol",
            "agentkeep.rootsafety",
            "agentkeep.spool",
            "agentkeep.statefiles",
        },
    ),
    ("config", {"agentkeep.config", "agentkeep.config.values"}),
    (
        "adapters",
        {
            "agentkeep.adapters",
            "agentkeep.adapters.base",
            "agentkeep.adapters.claude",
            "agentkeep.adapters.claude.artifacts",
            "agentkeep.adapters.claude.finding",
            "agentkeep.adapters.claude.grouping",
            "agentkeep.adapters.claude.ids",
            "agentkeep.adapters.claude.listing",
            "agentkeep.adapters.claude.listings",
            "agentkeep.adapters.claude.reading",
            "agentkeep.adapters.claude.registry",
            "agentkeep.adapters.claude.roots",
            "agentkeep.adapters.claude.transcripts",
            "agentkeep.adapters.codex",
            "agentkeep.adapters.codex.listing",
            "agentkeep.adapters.codex.removal",
            "agentkeep.adapters.codex.rollouts",
            "agentkeep.adapters.copilot",
            "agentkeep.adapters.copilot.events",
            "agentkeep.adapters.copilot.listing",
            "agentkeep.adapters.dirs",
            "agentkeep.adapters.gemini",
            "agentkeep.adapters.gemini.chats",
            "agentkeep.adapters.grok",
            "agentkeep.adapters.heads",
            "agentkeep.adapters.opencode",
            "agentkeep.adapters.opencode.listing",
            "agentkeep.adapters.opencode.removal",
            "agentkeep.adapters.opencode.storage",
            "agentkeep.adapters.owndelete",
            "agentkeep.adapters.pi",
            "agentkeep.adapters.qwen",
            "agentkeep.adapters.qwen.layout",
            "agentkeep.adapters.rows",
            "agentkeep.adapters.sqlite",
            "agentkeep.adapters.stores",
            "agentkeep.adapters.times",
            "agentkeep.adapters.zero",
            "agentkeep.lookagain",
            "agentkeep.watchplan",
        },
    ),
    (
        "index",
        {
            "agentkeep.children.scan",
            "agentkeep.index",
            "agentkeep.index.queries",
            "agentkeep.index.rows",
            "agentkeep.index.schema",
            "agentkeep.index.store",
            "agentkeep.index.writing",
        },
    ),
    ("leases", {"agentkeep.leases"}),
    (
        "removal",
        {
            "agentkeep.history",
            "agentkeep.compaction",
            "agentkeep.journal",
            "agentkeep.leftovers",
            "agentkeep.prune",
            "agentkeep.prune.act",
            "agentkeep.prune.evidence",
            "agentkeep.prune.lock",
            "agentkeep.prune.pause",
            "agentkeep.prune.plan",
            "agentkeep.prune.recovery",
            "agentkeep.prune.remove",
            "agentkeep.prune.run",
            "agentkeep.prune.shapes",
            "agentkeep.prune.report",
            "agentkeep.prune.view",
            "agentkeep.removal",
            "agentkeep.rmtree",
            "agentkeep.trash",
            "agentkeep.trash.archive",
            "agentkeep.trash.entries",
            "agentkeep.trash.expiry",
            "agentkeep.trash.packing",
            "agentkeep.trash.restored",
            "agentkeep.trash.restoring",
            "agentkeep.trash.unpack",
            "agentkeep.trash.writing",
        },
    ),
    (
        "answers",
        {
            "agentkeep.adopt",
            "agentkeep.adopt.settings",
            "agentkeep.client",
            "agentkeep.core",
            "agentkeep.core.bykind",
            "agentkeep.core.context",
            "agentkeep.core.gone",
            "agentkeep.core.ending",
            "agentkeep.core.indexing",
            "agentkeep.core.pruning",
            "agentkeep.core.reclaim",
            "agentkeep.core.sessions",
            "agentkeep.core.status",
            "agentkeep.core.trashcan",
            "agentkeep.preview",
            "agentkeep.render",
            "agentkeep.render.bar",
            "agentkeep.render.reports",
            "agentkeep.render.sessions",
            "agentkeep.render.settings",
            "agentkeep.render.status",
            "agentkeep.render.table",
            "agentkeep.render.words",
            "agentkeep.verdict",
            "agentkeep.view",
        },
    ),
    (
        "service",
        {
            "agentkeep.service",
            "agentkeep.service.apply",
            "agentkeep.service.files",
            "agentkeep.service.managers",
            "agentkeep.service.state",
        },
    ),
    (
        "front ends",
        {
            "agentkeep.__main__",
            "agentkeep.cli",
            "agentkeep.cli.daemon",
            "agentkeep.cli.group",
            "agentkeep.cli.pruning",
            "agentkeep.cli.sessions",
            "agentkeep.daemon",
            "agentkeep.daemon.child",
            "agentkeep.daemon.answers",
            "agentkeep.daemon.changes",
            "agentkeep.daemon.connection",
            "agentkeep.daemon.events",
            "agentkeep.daemon.inotify",
            "agentkeep.daemon.limits",
            "agentkeep.daemon.main",
            "agentkeep.daemon.memory",
            "agentkeep.daemon.notify",
            "agentkeep.daemon.observer",
            "agentkeep.daemon.schedule",
            "agentkeep.daemon.server",
            "agentkeep.daemon.watch",
            "agentkeep.daemon.work",
            "agentkeep.demo",
            "agentkeep.demo.agents",
            "agentkeep.demo.claude",
            "agentkeep.demo.codex",
            "agentkeep.demo.home",
            "agentkeep.demo.opencode",
            "agentkeep.doctor",
            "agentkeep.doctor.agents",
            "agentkeep.doctor.check",
            "agentkeep.manpage",
            "agentkeep.runner",
            "agentkeep.ui",
            "agentkeep.ui.app",
            "agentkeep.ui.backend",
            "agentkeep.ui.charts",
            "agentkeep.ui.dialogs",
            "agentkeep.ui.live",
            "agentkeep.ui.overview",
            "agentkeep.ui.reading",
            "agentkeep.ui.sessions",
            "agentkeep.ui.text",
            "agentkeep.ui.trash",
        },
    ),
]

Edges = dict[str, dict[str, int]]


def modules(src: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted((src / "agentkeep").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> list[str]:
    """The modules of ours an import statement names: `from a import b` is
    module a.b when that is a module, else a."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        subs = [f"{origin}.{alias.name}" for alias in node.names]
        names = [s for s in subs if s in known] or [origin]
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            out.append(name)
    return out


def import_graph(src: Path) -> Edges:
    """module -> {imported module: line of the first import of it}."""
    found = modules(src)
    known = set(found)
    graph: Edges = {}
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(node, package, known):
                    if target != name:
                        edges[target] = min(edges.get(target, node.lineno), node.lineno)
        graph[name] = edges
    return graph


def find_cycle(graph: Edges) -> list[str] | None:
    """One cycle as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def upward_imports(graph: Edges) -> list[str]:
    rank = {m: i for i, (_, members) in enumerate(LAYERS) for m in members}
    return [
        f"{m} ({LAYERS[rank[m]][0]}) imports {t} ({LAYERS[rank[t]][0]}), line {line}"
        for m, edges in sorted(graph.items())
        for t, line in sorted(edges.items())
        if rank[t] > rank[m]
    ]


def test_every_module_has_a_layer() -> None:
    placed = [m for _, members in LAYERS for m in members]
    assert len(placed) == len(set(placed)), "a module is in two layers"
    found = set(modules(SRC))
    assert not found - set(placed), f"modules in no layer: {sorted(found - set(placed))}"
    assert not set(placed) - found, f"no such modules: {sorted(set(placed) - found)}"


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph(SRC))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_from_a_higher_layer() -> None:
    upward = upward_imports(import_graph(SRC))
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_checks_see_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    """The parser and both checks on a tree made to break them."""
    pkg = tmp_path / "agentkeep"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text("from typing import TYPE_CHECKING\n")
    (pkg / "core.py").write_text("from agentkeep import model\n")
    (pkg / "config.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import core\n"
    )
    graph = import_graph(tmp_path)
    assert graph["agentkeep.core"] == {"agentkeep.model": 1}
    assert find_cycle(graph) is None
    assert upward_imports(graph) == [
        "agentkeep.config (config) imports agentkeep.core (answers), line 3"
    ]
    (pkg / "model.py").write_text("def f():\n    import agentkeep.core\n")
    cycle = find_cycle(import_graph(tmp_path))
    assert cycle == ["agentkeep.core", "agentkeep.model", "agentkeep.core"]
