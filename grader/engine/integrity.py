"""Inside a rank: notice when student code replaces what a check relies on.

A submission runs in the same process as the rank half of a check. Before any
student code runs, `Guard()` records the code objects (functions, classes,
modules) behind every name of the grader's modules and classes, of `builtins`,
and of the torch and standard library modules a check uses. `verify()` then names each one that is no longer
the same object (replaced, wrapped or deleted) and raises `Tampered`.

The engine verifies everything after the answers load and after the check's
rank function returns; the check runner verifies the grader's own names after
every call into student code. What this cannot stop, in-process, is code that
reads or writes the grader's memory directly (ctypes, gc, frame hacks); the
parent side of each check recomputes its expectations itself, and the
README says what is and is not defended.
"""
from __future__ import annotations

import builtins
import sys

_BUILTINS = vars(builtins)

THIRD_PARTY = (
    "torch", "torch.distributed", "torch.distributed.distributed_c10d", "torch.nn", "torch.nn.functional",
    "torch.nn.parallel", "torch.nn.parallel.distributed", "torch.optim", "torch.utils.data",
    "torch.utils.data.distributed", "torch.autograd", "os", "os.path", "io", "pickle", "time", "math",
    "copy", "functools", "cloudpickle", "multiprocessing.connection",
)
CLASSES = (
    ("torch", "Tensor"), ("torch.nn", "Module"), ("torch.nn.parallel", "DistributedDataParallel"),
    ("torch.optim", "Optimizer"), ("torch.utils.data", "DataLoader"),
    ("torch.utils.data.distributed", "DistributedSampler"), ("multiprocessing.connection", "Connection"),
)


# Bound at import, before any student code: verify() must work even when builtins were swapped.
_isinstance, _issubclass, _callable, _vars, _type, _list, _getattr = (
    isinstance, issubclass, callable, vars, type, list, getattr)
_ModuleType = _type(sys)


class Tampered(Exception):
    """Student code replaced part of the grader (or of torch) while being checked."""


def _grader_modules() -> list:
    # The forkserver preloads every exercise's public checks (preload_checks.py); a hidden check's rank has
    # imported its module when it unpickled the check, before any student code runs.
    return [m for name, m in _list(sys.modules.items()) if m is not None and (name == "grader" or name.startswith("grader."))]


def _namespaces(grader_only: bool) -> dict[str, dict]:
    spaces = {}
    for module in _grader_modules():
        spaces[module.__name__] = _vars(module)
        for name, value in _list(_vars(module).items()):
            if _issubclass(_type(value), _type) and _getattr(value, "__module__", "") == module.__name__:
                spaces[f"{module.__name__}.{name}"] = _vars(value)
    spaces["builtins"] = _BUILTINS
    if grader_only:
        return spaces
    for name in THIRD_PARTY:
        if name in sys.modules:
            spaces[name] = _vars(sys.modules[name])
    for module, cls in CLASSES:
        value = _getattr(sys.modules.get(module), cls, None)
        if _isinstance(value, _type):
            spaces[f"{module}.{cls}"] = _vars(value)
    return spaces


def _watched(name: str, value) -> bool:
    """Code, not state: functions, classes and modules (a module's counters and flags change legitimately)."""
    if name.startswith("__") and name.endswith("__") and name not in ("__init__", "__call__", "__import__"):
        return False
    # type(value), never value.__class__: a deprecated object (torch.distributed.reduce_op) warns on attribute access
    return _issubclass(_type(value), (_ModuleType, staticmethod, classmethod, property)) or _callable(value)


def _record(spaces: dict[str, dict]) -> dict[tuple[str, str], object]:
    return {(where, name): value for where, space in spaces.items() for name, value in _list(space.items())
            if _watched(name, value)}


def _put_back(where: str, space, name: str, value) -> None:
    try:
        if _type(space) is dict:
            space[name] = value
        else:  # a class's mappingproxy
            cls = _class_of(where)
            if cls is not None:
                setattr(cls, name, value)
    except Exception:
        pass


def _class_of(where: str):
    module, _, cls = where.rpartition(".")
    return getattr(sys.modules.get(module), cls, None)


class Guard:
    """What the rank saw before student code ran."""

    def __init__(self):
        self._all = _record(_namespaces(False))
        self._grader = {k: v for k, v in self._all.items() if k[0].startswith("grader") or k[0] == "builtins"}
        self._verify = Guard._check  # bound now: a later swap of Guard._check changes nothing

    def verify(self, when: str, grader_only: bool = False) -> None:
        self._verify(self, when, grader_only)

    def _check(self, when: str, grader_only: bool) -> None:
        expected = self._grader if grader_only else self._all
        spaces = _namespaces(grader_only)
        changed = []
        for (where, name), value in expected.items():
            space = spaces.get(where)
            if space is None:
                continue  # a module dropped from sys.modules is not a swap of its names
            if name not in space:
                changed.append(f"{where}.{name} (deleted)")
            elif space[name] is not value:
                changed.append(f"{where}.{name}")
            else:
                continue
            _put_back(where, space, name, value)  # so this rank can still report (a broken isinstance breaks tracebacks)
        if changed:
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            raise Tampered(f"your code changed the grader or torch {when}: {shown} was replaced. A check must see "
                           "your code's own behaviour, so the checks concerned score 0. Remove the code that "
                           "assigns to these names.")
