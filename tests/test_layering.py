"""Layering of the project packages: no import cycles, and the dependency directions that were untangled.

The graph is read from the source with ``ast`` (nothing is imported). Its nodes are the modules of
``infra``, ``eval``, ``rewards`` and ``data_prep``; an edge ``a -> b`` means module ``a`` imports ``b``.
Two graphs are built:

* **module level**: imports that run when the module is imported (top of the file, class bodies, module
  level ``if``/``try``); imports inside functions are left out, since a lazy import is the accepted way to
  break a dependency, and so are ``if TYPE_CHECKING:`` blocks. Importing ``a.b.c`` also runs the
  ``__init__`` of ``a`` and ``a.b``, so those packages are edges too (except the importer's own parents).
  This graph must have no cycle.
* **all imports**, lazy ones included: used for the directions that must not exist in any form — the
  backend contract never imports a backend, ``eval.html`` never imports ``eval.report``, and rewards
  never import ``data_prep`` (the judge's chat client lives in ``infra.endpoints``).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("infra", "eval", "rewards", "data_prep")

#: (importer, imported) module-name prefixes that must not be connected by any import, lazy or not.
FORBIDDEN = [
    ("infra.backends", "infra.embedded"),
    ("infra.backends", "infra.production"),
    ("infra.backends", "infra.backend_registry"),
    ("infra.embedded", "infra.backend_registry"),
    ("infra.production", "infra.backend_registry"),
    ("eval.html", "eval.report"),
    ("eval.stagewise", "eval.report"),
    ("eval.stagewise", "eval.html"),
    ("rewards", "data_prep"),
    ("infra.endpoints", "data_prep"),
    ("infra.endpoints", "rewards"),
]


@cache
def modules() -> dict[str, Path]:
    """Every module of the project packages, by dotted name (a package by its own name)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(name: str) -> str | None:
    """The project module ``name`` loads: itself, or its nearest ancestor that is a module."""
    mods = modules()
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(module: str, path: Path, lazy: bool) -> set[str]:
    """Dotted names imported by ``module`` (absolute; relative imports resolved)."""
    is_pkg = path.name == "__init__.py"
    names: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not lazy:
                continue
            if isinstance(node, ast.If) and _is_type_checking(node.test) and not lazy:
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_pkg else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join([*base, node.module] if node.module else base)
                else:
                    source = node.module or ""
                names.add(source)
                names.update(f"{source}.{alias.name}" for alias in node.names if alias.name != "*")
            else:
                visit([c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)])

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body)
    return names


@cache
def import_graph(lazy: bool) -> dict[str, frozenset[str]]:
    """``{module: project modules it imports}``; ``lazy`` adds imports inside functions."""
    graph = {}
    for module, path in modules().items():
        own_parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        edges = set()
        for name in _imported_names(module, path, lazy):
            target = _resolve(name)
            if target is None:
                continue
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                edges.add(".".join(parts[:i]))
        graph[module] = frozenset(edges - own_parents - {module})
    return graph


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _describe(component: list[str], graph: dict[str, frozenset[str]]) -> str:
    inside = set(component)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & inside))}" for m in component)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_graph_reads_the_project():
    """A parser that silently found nothing would pass every test below."""
    top, every = import_graph(False), import_graph(True)
    assert len(top) > 50
    assert {"infra.backends", "infra.backend_registry", "infra.recipe"} <= top["infra.driver"]
    assert "eval.html" in top["eval.report"] and "eval.stagewise" in top["eval.html"]
    assert "infra.endpoints" in top["data_prep.teacher"]
    # lazy imports are seen only in the second graph
    assert "infra.embedded.backend" in every["infra.backend_registry"]
    assert "infra.embedded.backend" not in top["infra.backend_registry"]
    assert "infra.endpoints" in every["rewards.instruction_following"]


def test_cycle_finder_finds_cycles():
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": frozenset({"b"}), "b": frozenset()}) == []


def test_no_import_cycle_at_module_level():
    graph = import_graph(False)
    found = cycles(graph)
    assert not found, "module-level import cycles:\n" + "\n".join(_describe(c, graph) for c in found)


@pytest.mark.parametrize(("importer", "imported"), FORBIDDEN, ids=lambda p: p)
def test_forbidden_direction(importer, imported):
    graph = import_graph(True)
    offenders = {
        m: sorted(t for t in targets if _under(t, imported))
        for m, targets in graph.items()
        if _under(m, importer) and any(_under(t, imported) for t in targets)
    }
    assert not offenders, f"{importer} must not import {imported} (not even inside a function): {offenders}"


def test_rewards_do_not_import_data_prep_at_module_level():
    graph = import_graph(False)
    offenders = {
        m: sorted(t for t in targets if _under(t, "data_prep"))
        for m, targets in graph.items()
        if _under(m, "rewards") and any(_under(t, "data_prep") for t in targets)
    }
    assert not offenders


def test_named_pairs_share_no_cycle_even_with_lazy_imports():
    """The three untangled pairs stay apart even if lazy imports are counted."""
    found = cycles(import_graph(True))
    for a, b in [
        ("infra.backends", "infra.embedded.backend"),
        ("infra.backends", "infra.production.backend"),
        ("eval.html", "eval.report"),
        ("rewards.instruction_following", "data_prep.teacher"),
    ]:
        assert not any(a in c and b in c for c in found), (a, b, found)
