"""grader/ uses other libraries, and other grader modules, through their public names only.

A private name is one with a leading underscore (not a dunder). No grader module
- imports from a private module (`torch._C`, `cloudpickle.cloudpickle._x`) or imports a private name
  (`from nbgrader... import _x`) from another package;
- imports a private name from another grader module, except a sibling in its own package: an
  exercise's hidden_*.py reuses the rank helpers of its public checks_*.py (one exercise, split in two
  files so the student build can leave the hidden half out);
- reads a private attribute it does not define itself (`late._check_late_penalty`, `os._x`), which is how
  a private API is reached once its module is imported.
Exempt: DOCUMENTED_PUBLIC (an underscore name its library documents as public: os._exit), and ALLOWED,
each entry with its reason: torch internals a check must inspect, or what the engine cannot do otherwise. Pins then guard
versions, not private code.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys

from tests.grader_imports import ROOT, grader_modules, imports_of

ALLOWED = {  # (file under grader/, the private names it uses) -> why it needs them
    (
        "engine/forked_forkserver.py",
        ("_forkserver", "_forkserver_pid", "_forkserver_address", "_forkserver_alive_fd"),
    ): "multiprocessing has no public way to adopt a forkserver forked from this process (one torch import "
    "per grading worker, not two); start_here() falls back to a fresh forkserver when a Python lacks these "
    "names (getattr/hasattr), so a change there costs speed, never a grade",
    (
        "engine/flight_recorder.py",
        ("_C", "_distributed_c10d", "_dump_fr_trace"),
    ): "torch's Flight Recorder (every collective of a rank, with the frames that called it) has no public dump "
    "in Python; a torch without it only makes a hang's message say less (serve writes an error), never a grade",
    (
        "exercises/dispatch_mode.py",
        ("_python_dispatch",),
    ): "TorchDispatchMode has no public home; the checks take it from this one module (collectives, live bytes, "
    "FSDP2's traffic): a dispatch mode is the only place that sees every spelling of an operator",
    (
        "exercises/collectives.py",
        ("_schema",),
    ): "an op overload's schema is the only record of which collective the dispatcher ran with what "
    "arguments: the c10d ops see every spelling of a collective",
    (
        "exercises/syncbn_sharded/live_bytes.py",
        ("_new_with_weak_ptr",),
    ): "the size of a storage held only weakly (StorageWeakRef.cdata), read without keeping it alive: a "
    "storage FSDP resized to nothing must count 0, and a strong reference would change what is measured",
    (
        "exercises/collectives.py",
        ("_get_sequence_number_for_group", "_world"),
    ): "each process group's own count of collectives issued (c10d's registry of groups), to tell a "
    "recorder that missed calls",
    (
        "exercises/syncbn_sharded/reference.py",
        ("_BatchNorm",),
    ): "the one base class of BatchNorm1d/2d/3d and SyncBatchNorm, to find a student's batch-norm layers",
    (
        "exercises/syncbn_sharded/reference.py",
        ("_fsspec_filesystem",),
    ): "imported only to warm the forkserver (optional: ImportError tolerated): dcp imports it in every rank",
    (
        "exercises/syncbn_sharded/checks_fsdp.py",
        ("_parameters",),
    ): "a module's directly registered parameters, the ones an FSDP wrapper swaps for its shards",
}


# Public despite the underscore: documented in the standard library's reference (os._exit: end a process at
# once, no atexit handlers, no flushing; ranks, forked jobs and the nursery end this way; sys._current_frames:
# another thread's stack, which exercise 4's checkpoint marker reads to see the training thread wait on a future).
DOCUMENTED_PUBLIC = {"os._exit", "sys._current_frames"}


def _private(name: str) -> bool:
    """`_` alone is not private: it is gettext's translate function (grader/i18n.py), public by convention."""
    return name.startswith("_") and not name.startswith("__") and name != "_"


def _is_module(name: str) -> bool:
    """Whether `from a import b` takes a module (a standard-library one: finding torch's would import torch)."""
    if name.split(".")[0] not in sys.stdlib_module_names:
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _defined_here(tree: ast.AST) -> set[str]:
    """Every name the module itself binds: defs, classes, assignments (to self.x and cls.x too), arguments.
    Writing another object's private attribute (`server._pid = ...`) binds nothing of ours."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, (ast.Store, ast.Del))
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
    return names


def private_uses(module: str, source: str, is_package: bool = False) -> list[tuple[str, int, str]]:
    """(private name, line, what) for each use of another module's private name in `source`."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for imp in imports_of(module, source, is_package):
        for part in imp.target.split("."):
            if _private(part):
                found.append((part, imp.line, f"imports from the private module {imp.target}"))
        if imp.name and _private(imp.name) and imp.target != module:
            sibling = imp.target.startswith("grader.") and imp.target.rpartition(".")[0] == package
            if not sibling:
                found.append((imp.name, imp.line, f"imports the private name {imp.name} from {imp.target}"))
    tree = ast.parse(source)
    own = _defined_here(tree)
    modules = {
        alias.asname or alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    modules |= {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if _is_module(f"{node.module}.{alias.name}")
    }  # from multiprocessing import forkserver
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            on_a_module = isinstance(root, ast.Name) and root.id in modules  # a module's name: never ours
            if ast.unparse(node) in DOCUMENTED_PUBLIC:
                continue
            if on_a_module or node.attr not in own:
                found.append((node.attr, node.lineno, f"uses the private attribute {ast.unparse(node)}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and node.args[1].value not in own
        ):
            found.append((node.args[1].value, node.lineno, f"uses the private attribute {ast.unparse(node)}"))
    return found


def violations(root: str = ROOT) -> list[str]:
    out = []
    for module, path in sorted(grader_modules(root).items()):
        where = os.path.relpath(path, os.path.join(root, "grader"))
        with open(path, encoding="utf-8") as f:
            uses = private_uses(module, f.read(), path.endswith("__init__.py"))
        allowed = {name for (file, names) in ALLOWED if file == where for name in names}
        out += [f"grader/{where}:{line}: {what}" for name, line, what in uses if name not in allowed]
    return out


def test_no_grader_module_uses_a_private_name_of_another():
    found = violations()
    assert not found, "private APIs used (use a public one, or add to ALLOWED with the reason):\n" + "\n".join(found)


def test_every_allowed_name_says_why():
    assert all(len(reason) > 30 for reason in ALLOWED.values())
    assert sum(len(names) for _, names in ALLOWED) <= 15, (
        "the allow-list is for a few internals, not a way around the rule"
    )


def test_the_private_apis_this_rule_replaced_are_caught():
    """Private APIs of other packages once called here are caught, each in the spelling it had: cloudpickle's
    reducer, nbgrader's late-penalty clamp, IPython's file map, and another grader module's private name."""
    source = (
        "import cloudpickle\n"
        "from nbgrader.preprocessors.latesubmissions import _helper\n"
        "from grader.engine.processes import _held\n"
        "def _code_reduce(code, late, nb, shell):\n"
        "    cloudpickle.cloudpickle._code_reduce(code)\n"
        "    late._check_late_penalty(nb, 3)\n"
        "    return getattr(shell.compile, '_filename_map', {}), shell.compile._filename_map\n"
    )
    found = {(name, line) for name, line, _ in private_uses("grader.submission", source)}
    assert found == {
        ("_helper", 2),
        ("_held", 3),
        ("_code_reduce", 5),
        ("_check_late_penalty", 6),
        ("_filename_map", 7),
    }
    assert not private_uses("grader.submission", "import torch._C\n") == []
    # allowed: a sibling's helper (a hidden module and its public checks), a name the module defines itself
    sibling = "from grader.exercises.ddp_basics.checks_mini_ddp import _compare\nclass A:\n    _x = 1\nA()._x\n"
    assert private_uses("grader.exercises.ddp_basics.hidden_mini_ddp", sibling) == []
    assert private_uses("grader.exercises.torchrun.hidden_env", sibling)  # another exercise's internals
