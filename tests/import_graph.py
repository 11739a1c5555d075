"""The import graph of one Python package, read from its sources with ``ast`` (nothing imported
but the package itself, to find its folder), for tests that check a package's arrows.

``module_graph`` gives module -> the package's modules it imports; ``collapse`` folds that onto
sub-packages. A test then asks ``graphlib`` for an order (``CycleError`` names a cycle).
"""

from __future__ import annotations

import ast
import types
from pathlib import Path


def package_modules(package: types.ModuleType) -> dict[str, Path]:
    """Dotted name -> source file of each module under ``package`` (``__init__``: the package)."""
    root = Path(package.__file__).resolve().parent
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [*package.__name__.split("."), *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _import_time_nodes(tree: ast.Module) -> list[ast.stmt]:
    """Import statements that run at import time (module level, in if/try/with blocks too)."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for field in ("body", "orelse", "finalbody", "handlers"):
                todo.extend(getattr(node, field, []))
        elif isinstance(node, ast.ExceptHandler):
            todo.extend(node.body)
    return found


def _is_type_checking(node: ast.AST) -> bool:
    tests = ("TYPE_CHECKING", "typing.TYPE_CHECKING")
    return isinstance(node, ast.If) and ast.unparse(node.test) in tests


def _imports(path: Path, deferred: bool) -> list[tuple[str, list[str]]]:
    """(module, names) per imported module: ``import a.b`` -> (``a.b``, []), ``from a import b, c``
    -> (``a``, [``b``, ``c``]). See :func:`module_graph` for ``deferred``."""
    tree = ast.parse(path.read_text())
    skipped = {id(n) for t in ast.walk(tree) if _is_type_checking(t) for n in ast.walk(t)}
    nodes = (
        [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        if deferred
        else _import_time_nodes(tree)
    )
    found: list[tuple[str, list[str]]] = []
    for node in nodes:
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        else:
            assert node.level == 0, f"{path}: relative import"
            found.append((node.module or "", [alias.name for alias in node.names]))
    return found


def imported_modules(path: Path, *, deferred: bool = False) -> set[str]:
    """The modules (and packages) named by the import statements of the file at ``path``."""
    return {module for module, _ in _imports(path, deferred)}


def module_graph(package: types.ModuleType, *, deferred: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports by name (parent packages run first anyway).

    ``from a import b`` is an edge to ``a.b`` when that is a module of the package, else to ``a``.
    ``deferred=False``: import-time imports only (module level, if/try/with blocks).
    ``deferred=True``: also imports inside functions, which are dependencies too, only later.
    ``if TYPE_CHECKING:`` blocks never count.

    Raises:
      AssertionError: a relative import (the graph is read from absolute names).
    """
    modules = package_modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, set())
        for module, names in _imports(path, deferred):
            targets = [f"{module}.{n}" if f"{module}.{n}" in modules else module for n in names]
            edges.update(t for t in targets or [module] if t in modules and t != name)
    return graph


def collapse(graph: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """``graph`` with each module named by its first ``depth`` dotted parts (its sub-package at
    ``depth`` = the package's depth + 1); edges inside one part are dropped."""

    def part(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    folded: dict[str, set[str]] = {}
    for name, edges in graph.items():
        folded.setdefault(part(name), set()).update(part(e) for e in edges)
    for name, edges in folded.items():
        edges.discard(name)
    return folded
