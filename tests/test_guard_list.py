"""The tamper guard watches what the checks use, derived from their code.

The rule: every torch and standard-library module that a module under
grader/exercises/ imports (found here by a full `ast` walk of each file) is
watched by integrity.Guard; so are the classes the torch.distributed packages
hand out. The rule is shown to fail on a module that imports something unwatched.
Real submissions that tamper through these modules: tests/test_tamper.py.
"""

import ast
import functools
import os

import pytest

from grader.engine import guard_list, integrity
from grader.exercises import exercise_ids, get_exercise

# The torch.distributed packages whose objects the checks build in a rank (checkpoints, FSDP, device meshes, DTensors,
# ZeRO), and classes a check's objects are instances of: a submission that patched one would change a verdict.
CHECKED_OBJECTS_MODULES = [
    "torch.distributed.checkpoint",
    "torch.distributed.fsdp",
    "torch.distributed.device_mesh",
    "torch.distributed.tensor",
    "torch.distributed.optim",
]
CLASSES = [
    "torch.distributed.fsdp.FSDPModule",
    "torch.distributed.tensor.DTensor",
    "torch.distributed.optim.ZeroRedundancyOptimizer",
    "torch.distributed.checkpoint.FileSystemReader",
]


def unwatched(folder: str, watched) -> list[str]:
    """'file: module' for each torch or standard-library module a .py file under `folder` imports (full ast walk)
    that is not in `watched`."""
    found = []
    for root, _, files in os.walk(folder):
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(root, file)
                with open(path) as f:
                    modules, _ = guard_list.imports(ast.parse(f.read()))
                found += [
                    f"{os.path.relpath(path, folder)}: {m}"
                    for m in sorted(modules)
                    if guard_list.watched_root(m) and m not in watched
                ]
    return found


def test_every_module_the_checks_import_is_watched():
    missing = unwatched(guard_list.EXERCISES, set(guard_list.watched_modules()))
    assert not missing, "imported by the checks but not watched by the guard:\n" + "\n".join(missing)


def test_the_rule_fails_for_a_check_importing_an_unwatched_module(tmp_path):
    """A new check imports torch.distributed.pipelining inside its rank function and names from
    torch.distributed.elastic over several lines: the rule names both, and the derivation finds both."""
    (tmp_path / "checks_new.py").write_text('''"""A new check."""
from torch.distributed.elastic.multiprocessing import (
    Std,
)


def _in_rank(ctx, student):
    import torch.distributed.pipelining as pp
    return pp
''')
    missing = unwatched(str(tmp_path), set(guard_list.watched_modules()))
    assert "checks_new.py: torch.distributed.pipelining" in missing, missing
    assert "checks_new.py: torch.distributed.elastic.multiprocessing" in missing, missing
    modules, names = guard_list.derive(str(tmp_path))
    assert {"torch.distributed.pipelining", "torch.distributed.elastic.multiprocessing"} <= set(modules)
    assert ("torch.distributed.elastic.multiprocessing", "Std") in names


def test_the_fast_derivation_finds_what_the_full_walk_finds():
    """The guard parses only the import statements (speed); it finds every import a full parse finds."""
    full = {m for line in unwatched(guard_list.EXERCISES, set()) for m in [line.split(": ")[1]]}
    assert full <= set(guard_list.derive(guard_list.EXERCISES)[0])


@functools.lru_cache(maxsize=None)
def _guard() -> integrity.Guard:
    for exercise_id in exercise_ids():
        get_exercise(exercise_id)  # the checks imported, as in a rank
    return integrity.Guard()


def test_the_guard_watches_the_packages_and_classes_of_the_checks_objects():
    watched = _guard().watched()
    assert not [m for m in CHECKED_OBJECTS_MODULES + CLASSES if m not in watched], sorted(watched)


def _swap(owner, name: str, value):
    original = vars(owner)[name]
    setattr(owner, name, value)
    return original


@pytest.mark.parametrize("target", ["dcp.save", "dcp.load", "fully_shard", "FSDPModule.unshard", "DTensor.full_tensor"])
def test_a_swap_in_a_derived_module_is_tampering(target):
    import torch.distributed.checkpoint as dcp
    import torch.distributed.fsdp as fsdp
    import torch.distributed.tensor as dtensor

    owner, name = {
        "dcp.save": (dcp, "save"),
        "dcp.load": (dcp, "load"),
        "fully_shard": (fsdp, "fully_shard"),
        "FSDPModule.unshard": (fsdp.FSDPModule, "unshard"),
        "DTensor.full_tensor": (dtensor.DTensor, "full_tensor"),
    }[target]
    guard = _guard()
    original = _swap(owner, name, lambda *a, **k: None)
    try:
        with pytest.raises(integrity.Tampered, match=name):
            guard.verify("in a test")
        assert vars(owner)[name] is original  # put back by the guard
    finally:
        setattr(owner, name, original)
    guard.verify("after the test")  # nothing else changed


def test_torchs_own_step_wrapper_is_not_tampering_and_a_forged_one_is():
    """Optimizer.__init__ wraps its class's step in torch's profiling hook, once per class: not a swap.
    A look-alike (same attributes, its own code) is."""
    from torch.distributed.optim import ZeroRedundancyOptimizer as Zero
    from torch.optim import Optimizer

    guard = _guard()
    original = vars(Zero)["step"]
    try:
        Zero.step = Optimizer.profile_hook_step(original)  # what torch does at the first construction
        Zero.step.hooked = True
        guard.verify("after torch wrapped step")

        @functools.wraps(original)
        def forged(*args, **kwargs):
            return None

        forged.hooked = True
        Zero.step = forged
        with pytest.raises(integrity.Tampered, match="ZeroRedundancyOptimizer.step"):
            guard.verify("after a forged wrapper")
    finally:
        Zero.step = original


@pytest.mark.parametrize(
    "target",
    [
        "_Recorder.__torch_dispatch__",
        "_Recorder.__init__",
        "Collective.__eq__",
        "TorchDispatchMode.__enter__",
        "TorchDispatchMode.__exit__",
    ],
)
def test_a_swapped_dunder_of_a_measuring_class_is_tampering(target):
    """The grader's own classes are watched whole, dunders included (a recorder whose __torch_dispatch__ is
    swapped hides what it records); torch's classes for the dunders a measurement runs through."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from grader.exercises import collectives

    owner_name, name = target.split(".")
    owner = {
        "_Recorder": collectives._Recorder,
        "Collective": collectives.Collective,
        "TorchDispatchMode": TorchDispatchMode,
    }[owner_name]
    guard = _guard()
    original = _swap(owner, name, lambda *a, **k: None)
    try:
        with pytest.raises(integrity.Tampered, match=name):
            guard.verify("in a test", grader_only=owner is not TorchDispatchMode)
        assert vars(owner)[name] is original  # put back by the guard
    finally:
        setattr(owner, name, original)
    guard.verify("after the test")
