"""grader/'s modules and the imports each one writes, read with ast (nothing is imported).

Shared by tests/test_layers.py (which way the imports point) and tests/test_public_apis.py
(what they import). Every import statement counts, at module level or inside a function:
an import deferred to call time is still a dependency.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. "grader.runner"
    target: str  # the module imported from, e.g. "grader.checks" (absolute)
    name: str | None  # the name taken from it (`from target import name`); None for `import target`
    line: int


def grader_modules(root: str = ROOT) -> dict[str, str]:
    """Dotted module name -> file, for every .py file under root/grader."""
    found = {}
    for folder, _, files in os.walk(os.path.join(root, "grader")):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                found[name.removesuffix(".__init__")] = path
    return found


def imports_of(module: str, source: str, is_package: bool = False) -> list[Import]:
    """Every import statement of `source` (the text of `module`), relative ones made absolute."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{target}" if target else base
            found += [Import(module, target, alias.name, node.lineno) for alias in node.names]
    return found


def all_imports(root: str = ROOT) -> list[Import]:
    found = []
    for module, path in grader_modules(root).items():
        with open(path, encoding="utf-8") as f:
            found += imports_of(module, f.read(), path.endswith("__init__.py"))
    return found


def grader_edges(imports: list[Import], modules: set[str]) -> set[tuple[str, str]]:
    """(importer, imported) between grader modules: `from grader.x import y` points at grader.x.y
    when that is a module, else at grader.x."""
    edges = set()
    for imp in imports:
        target = f"{imp.target}.{imp.name}" if imp.name and f"{imp.target}.{imp.name}" in modules else imp.target
        if target in modules and target != imp.module:
            edges.add((imp.module, target))
    return edges
