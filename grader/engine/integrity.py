"""Inside a rank: notice when student code replaces what a check relies on.

A submission runs in the same process as the rank half of a check. Before any
student code runs, `Guard()` records the code objects (functions, classes,
modules) behind every name of the grader's modules and classes, of `builtins`,
and of the torch and standard-library modules the checks import (derived from
their code: guard_list.py), with the classes they import by name and the public
classes of the torch.distributed packages they use (FSDPModule, DTensor, DCP's
planners, ZeroRedundancyOptimizer). `verify()` then names each one that is no longer
the same object (replaced, wrapped or deleted) and raises `Tampered`.

The engine verifies everything after the answers load and after the check's
rank function returns; the check runner verifies the grader's own names after
every call into student code. What this cannot stop, in-process, is code that
reads or writes the grader's memory directly (ctypes, gc; frame walks are refused by frame_guard.py); the
parent side of each check recomputes its expectations itself, and the
README says what is and is not defended.
"""

from __future__ import annotations

import builtins
import importlib
import sys
import types

from grader.engine import frame_guard, guard_list

_BUILTINS = vars(builtins)
# Derived once per process, at import: the forkserver imports this before it forks the ranks.
_WATCHED_MODULES, _IMPORTED_NAMES = guard_list.watched_modules(), guard_list.imported_names()

# Bound at import, before any student code: verify() must work even when builtins were swapped.
_isinstance, _issubclass, _callable, _vars, _type, _list, _getattr = (
    isinstance,
    issubclass,
    callable,
    vars,
    type,
    list,
    getattr,
)
_ModuleType = _type(sys)


class Tampered(Exception):
    """Student code replaced part of the grader (or of torch) while being checked."""


def _grader_modules() -> list:
    # The forkserver preloads every exercise's public checks (processes.preload, from grader.exercises); a hidden
    # check's rank has imported its module when it unpickled the check, before any student code runs.
    return [
        m
        for name, m in _list(sys.modules.items())
        if m is not None and (name == "grader" or name.startswith("grader."))
    ]


# Hooks the standard library exists to let any program replace (an honest notebook may set one).
_REPLACEABLE = {
    ("sys", "excepthook"),
    ("sys", "displayhook"),
    ("sys", "unraisablehook"),
    ("sys", "breakpointhook"),
    ("warnings", "showwarning"),
    ("warnings", "formatwarning"),
}
_REPLACEABLE_SPACES = {where for where, _ in _REPLACEABLE}


def _import_quietly(name: str) -> None:
    """Load a watched module before student code can load and patch it first (a check may import it lazily,
    inside its rank function). The forkserver has it loaded already; a torch build without it has nothing
    to watch."""
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except Exception:
            pass


def import_watched() -> None:
    """Import every watched module now (the forkserver does, once: preload.py)."""
    for name in _WATCHED_MODULES:
        _import_quietly(name)


def _watch_plan() -> tuple[list[str], list[tuple[str, str]]]:
    """The modules and (module, class) pairs watched besides the grader's own: resolved once per Guard."""
    import_watched()
    modules = [name for name in _WATCHED_MODULES if name in sys.modules]
    classes, seen = [], set()

    def add_class(module: str, name: str, value) -> None:
        if _issubclass(_type(value), _type) and id(value) not in seen:  # type(), not isinstance: see _watched
            seen.add(id(value))
            classes.append((module, name))

    for module, name in guard_list.CORE_CLASSES + _IMPORTED_NAMES:
        value = _getattr(sys.modules.get(module), name, None)
        if _isinstance(value, _ModuleType) and sys.modules.get(value.__name__) is value:
            modules.append(value.__name__)  # `from torch.distributed import distributed_c10d`
        add_class(module, name, value)
    for module in _list(modules):  # the classes a torch.distributed package hands out (FSDPModule, DTensor)
        if module.startswith("torch.distributed."):
            for name, value in _list(_vars(sys.modules[module]).items()):
                if not name.startswith("_"):
                    add_class(module, name, value)
    return _list(dict.fromkeys(modules)), classes


def _namespaces(grader_only: bool, plan=None) -> dict[str, dict]:
    spaces = {}
    for module in _grader_modules():
        spaces[module.__name__] = _vars(module)
        for name, value in _list(_vars(module).items()):
            if _issubclass(_type(value), _type) and _getattr(value, "__module__", "") == module.__name__:
                spaces[f"{module.__name__}.{name}"] = _vars(value)
    spaces["builtins"] = _BUILTINS
    if grader_only:
        return spaces
    modules, classes = plan
    for name in modules:
        if name in sys.modules:
            spaces[name] = _vars(sys.modules[name])
    for module, cls in classes:
        value = _getattr(sys.modules.get(module), cls, None)
        if _isinstance(value, _type):
            spaces[f"{module}.{cls}"] = _vars(value)
    return spaces


def _profile_wrapper_code():
    """The code of torch's own step wrapper: Optimizer.__init__ wraps its class's `step` in it once per class
    (torch.optim.Optimizer._patch_step_function), which is not a student's swap."""
    optimizer = _getattr(sys.modules.get("torch.optim.optimizer"), "Optimizer", None)
    hook = _getattr(optimizer, "profile_hook_step", None)
    consts = _getattr(_getattr(hook, "__code__", None), "co_consts", ())
    return next((c for c in consts if _isinstance(c, types.CodeType) and c.co_name == "wrapper"), None)


def _rewrapped_by_torch(old, new, wrapper_code) -> bool:
    """new is torch's step wrapper around old itself (its code is torch's, the function it calls is old)."""
    return (
        wrapper_code is not None
        and _type(new) is types.FunctionType
        and new.__code__ is wrapper_code
        and new.__closure__ is not None
        and any(cell.cell_contents is old for cell in new.__closure__)
    )


# Among dunders, torch's and the standard library's namespaces are watched for those a check's measurement
# runs through (a mode's __torch_dispatch__, a context manager's __enter__/__exit__); the grader's own modules
# and classes for every one (a recorder's __torch_dispatch__ swapped hides what it records).
_WATCHED_DUNDERS = frozenset(
    (
        "__init__",
        "__new__",
        "__call__",
        "__import__",
        "__enter__",
        "__exit__",
        "__torch_dispatch__",
        "__torch_function__",
        "__getattr__",
        "__getattribute__",
        "__setattr__",
    )
)


def _watched_name(where: str, name: str) -> bool:
    return (
        name[:2] != "__" or name[-2:] != "__" or name in _WATCHED_DUNDERS or where[:7] == "grader." or where == "grader"
    )


def _watched(value) -> bool:
    """Code, not state: functions, classes and modules (a module's counters and flags change legitimately)."""
    # type(value), never value.__class__: a deprecated object (torch.distributed.reduce_op) warns on attribute access
    return _issubclass(_type(value), (_ModuleType, staticmethod, classmethod, property)) or _callable(value)


def _record(spaces: dict[str, dict]) -> dict[tuple[str, str], object]:
    """_watched for every name, its type's half decided once per type (callable() is the type's property)."""
    kinds, recorded = {}, {}
    for where, space in spaces.items():
        for name, value in _list(space.items()):
            kind = _type(value)
            watched = kinds.get(kind)
            if watched is None:
                watched = kinds[kind] = _watched(value)
            if (
                watched
                and _watched_name(where, name)
                and not (where in _REPLACEABLE_SPACES and (where, name) in _REPLACEABLE)
            ):
                recorded[(where, name)] = value
    return recorded


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
        self._plan = _watch_plan()
        self._step_wrapper = _profile_wrapper_code()
        self._all = _record(_namespaces(False, self._plan))
        self._grader = {k: v for k, v in self._all.items() if k[0].startswith("grader") or k[0] == "builtins"}
        # Bound now: a later swap of Guard._check or of these module functions changes nothing.
        self._verify, self._spaces, self._rewrapped = Guard._check, _namespaces, _rewrapped_by_torch

    def watched(self) -> set[str]:
        """The namespaces recorded: modules ('torch.distributed.fsdp') and classes ('torch.Tensor')."""
        return {where for where, _ in self._all}

    def verify(self, when: str, grader_only: bool = False) -> None:
        self._verify(self, when, grader_only)

    def _check(self, when: str, grader_only: bool) -> None:
        walked = frame_guard.report()
        if walked:
            raise Tampered(walked)
        expected = self._grader if grader_only else self._all
        spaces = self._spaces(grader_only, self._plan)
        changed = []
        for (where, name), value in expected.items():
            space = spaces.get(where)
            if space is None:
                continue  # a module dropped from sys.modules is not a swap of its names
            if name not in space:
                changed.append(f"{where}.{name} (deleted)")
            elif space[name] is not value and not self._rewrapped(value, space[name], self._step_wrapper):
                changed.append(f"{where}.{name}")
            else:
                continue
            _put_back(
                where, space, name, value
            )  # so this rank can still report (a broken isinstance breaks tracebacks)
        if changed:
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            raise Tampered(
                f"your code changed the grader or torch {when}: {shown} was replaced. A check must see "
                "your code's own behaviour, so the checks concerned score 0. Remove the code that "
                "assigns to these names."
            )
