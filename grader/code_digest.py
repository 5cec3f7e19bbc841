"""One digest of the code that grades an assignment.

It covers every `grader` module a grading run of that exercise can load: the exercise's
package (found by grader.exercises.discover: its declaration, public and hidden checks), what
those modules import, transitively (shared helpers in grader/exercises/*.py included), the
runner, reading submissions, and what the forkserver preloads. The set is derived by walking
the import statements (every one, also those inside functions), so a helper imported only when
a check runs is in it too. The other exercises' declarations, which discovery imports to learn
their ids, grade nothing here and are not in it. Cached verdicts (the progress view's, `make grade`'s results) carry
the digest and are stale as soon as it differs.
"""

from __future__ import annotations

import ast
import hashlib
import os

_GRADER = os.path.dirname(os.path.abspath(__file__))
ENTRY_POINTS = ("grader.runner", "grader.submission")  # what grades (checks and engine follow from them)


def _path(module: str) -> str | None:
    """The source file of a grader module (a package's __init__.py), or None if there is none."""
    parts = module.split(".")[1:]
    base = os.path.join(_GRADER, *parts)
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _imports(module: str, path: str) -> set[str]:
    """The grader modules `module` names in its import statements (a `from X import y` names X, and
    X.y when y is a module), and the modules it names as strings (the forkserver's preload)."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("grader."):
            found.add(node.value)  # importlib.import_module("grader.x"), the forkserver's preload list
    return {name for name in found if name.split(".")[0] == "grader" and all(p.isidentifier() for p in name.split("."))}


def _with_parents(module: str) -> list[str]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py first."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def loaded_modules(assignment: str) -> dict[str, str]:
    """Every grader module a grading run of `assignment` can load, with its source file."""
    from grader.exercises import find

    found = find(assignment)
    todo = [*ENTRY_POINTS, found.package, *found.public, *found.hidden]
    seen: dict[str, str] = {}
    visited: set[str] = set()
    while todo:
        for name in _with_parents(todo.pop()):
            if name in visited:
                continue
            visited.add(name)
            path = _path(name)
            if path is not None:
                seen[name] = path
                todo.extend(_imports(name, path))
    return dict(sorted(seen.items()))


def grader_digest(assignment: str) -> str:
    h = hashlib.sha256()
    for path in sorted(loaded_modules(assignment).values()):
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, _GRADER).encode() + b"\0" + f.read())
    return h.hexdigest()[:16]
