"""What the integrity guard watches, derived from the grader's own code.

    watched_modules()  # ('contextlib', ..., 'torch.distributed.checkpoint', 'torch.distributed.fsdp', ...)

The torch and standard-library modules that the check and reference code imports
(every import statement under grader/exercises/, public and hidden), plus the
fixed core the engine itself relies on in a rank. A check that starts using a new
torch module is watched without anyone editing a list; tests/test_guard_list.py
holds this to a full `ast` walk of every module.

The files are read, never imported (the engine imports no exercise). Only the
import statements are parsed (found by a regex, each parsed with `ast`): parsing
whole files cost 0.9 s here against 0.05 s, and this runs in every process that
starts ranks. A line of a docstring that reads like an import may add a module:
watching one more module is harmless. A file that cannot be read (a hidden module
masked in a sandbox) adds nothing: its checks do not run there.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import sys

EXERCISES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "exercises")

# What the engine's own rank code uses, whatever the checks import.
CORE_MODULES = (
    "torch",
    "torch.distributed",
    "torch.distributed.distributed_c10d",
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.parallel",
    "torch.nn.parallel.distributed",
    "torch.optim",
    "torch.utils.data",
    "torch.utils.data.distributed",
    "torch.autograd",
    "os",
    "os.path",
    "io",
    "pickle",
    "time",
    "math",
    "copy",
    "functools",
    "cloudpickle",
    "multiprocessing.connection",
)
CORE_CLASSES = (
    ("torch", "Tensor"),
    ("torch.nn", "Module"),
    ("torch.nn.parallel", "DistributedDataParallel"),
    ("torch.optim", "Optimizer"),
    ("torch.utils.data", "DataLoader"),
    ("torch.utils.data.distributed", "DistributedSampler"),
    ("multiprocessing.connection", "Connection"),
)
# Watched: torch and the standard library (builtins has its own entry in the guard; grader is watched whole).
NOT_WATCHED = {"builtins", "__future__", "__main__"}

_IMPORT = re.compile(r"^[ \t]*(from[ \t]+[\w.]+[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)", re.M)


def watched_root(module: str) -> bool:
    root = module.partition(".")[0]
    return root not in NOT_WATCHED and (root == "torch" or root in sys.stdlib_module_names)


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def imports(tree: ast.AST) -> tuple[set[str], set[tuple[str, str]]]:
    """The absolute imports of a parsed module: modules (with their parent packages), and (module, name) of
    each `from module import name`."""
    modules, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules.update(_with_parents(alias.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.update(_with_parents(node.module))
            names.update((node.module, alias.name) for alias in node.names if alias.name != "*")
    return modules, names


def import_statements(text: str) -> ast.Module:
    """The import statements of a source text, parsed (a match that is not Python is skipped)."""
    body = []
    for match in _IMPORT.finditer(text):
        try:
            body += ast.parse(match.group(1).strip()).body
        except SyntaxError:
            pass
    return ast.Module(body=body, type_ignores=[])


def derive(folder: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The watched modules and (module, name) pairs that every .py file under `folder` imports."""
    modules, names = set(), set()
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for file in files:
            if not file.endswith(".py"):
                continue
            try:
                with open(os.path.join(root, file), encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            found_modules, found_names = imports(import_statements(text))
            modules |= found_modules
            names |= found_names
    return (
        tuple(sorted(m for m in modules if watched_root(m))),
        tuple(sorted((m, n) for m, n in names if watched_root(m))),
    )


@functools.lru_cache(maxsize=None)
def _derived() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    return derive(EXERCISES)


def watched_modules() -> tuple[str, ...]:
    """The fixed core, then every torch and standard-library module the checks import."""
    return tuple(dict.fromkeys(CORE_MODULES + _derived()[0]))


def imported_names() -> tuple[tuple[str, str], ...]:
    """(module, name) of every `from torch... import name` (or standard library) in the checks."""
    return _derived()[1]
