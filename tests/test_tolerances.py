"""Tolerances come from the run's hardware plan.

Every comparison a check makes takes its backend from the plan of its runs
(`g.assert_close`, `g.close`, `g.tolerance`, or an explicit backend argument that
is neither a literal nor what a rank reported); `grader.tolerances` has no default
backend left. Under an nccl plan the nccl bounds apply: shown at unit level, since
nccl needs one GPU per rank.
"""

import ast
import inspect
import os

import pytest
import torch

from grader import grading, tolerances
from grader.checks import CheckFailed
from grader.engine.plan import plan_for
from grader.grading import Grading
from grader.submission import Cell, SourceSubmission
from tests.helpers import ROOT

EXERCISES = os.path.join(ROOT, "grader", "exercises")
COMPARISONS = {"assert_close", "tolerance", "allclose", "close", "assert_close_scaled"}


def _backend_argument(call: ast.Call, name: str):
    """The expression passed as the backend, or None when the call leaves it to a default."""
    for keyword in call.keywords:
        if keyword.arg == "backend":
            return keyword.value
    position = {"tolerance": 1, "allclose": 2, "assert_close": 4}.get(name)
    return call.args[position] if position is not None and len(call.args) > position else None


def bare_comparisons(source: str) -> list[str]:
    """Comparisons in `source` that do not take the backend from the run's plan, as 'line N: reason'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
        if owner == "g":
            continue  # Grading's own: bound to the backend of the check's runs
        if owner == "torch" and name == "allclose":
            literal = [k.arg for k in node.keywords if k.arg in ("rtol", "atol") and isinstance(k.value, ast.Constant)]
            if literal:
                found.append(f"line {node.lineno}: torch.allclose() with a literal {' and '.join(literal)}")
            continue  # without bounds: torch's defaults, tighter than any backend's (an equality test)
        if name not in COMPARISONS:
            continue
        if name in ("close", "assert_close_scaled"):  # syncbn_sharded.scaled_closeness's: their first argument is g
            if isinstance(func, ast.Attribute) and owner != "scaled_closeness":
                continue  # a file's .close()
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Name) and first.id == "g"):
                found.append(f"line {node.lineno}: {name}() without the check's g")
            continue
        backend = _backend_argument(node, name)
        if backend is None:
            found.append(f"line {node.lineno}: {name}() with the default backend")
        elif isinstance(backend, ast.Constant):
            found.append(f"line {node.lineno}: {name}() with the literal backend {backend.value!r}")
        elif (
            isinstance(backend, ast.Subscript)
            and isinstance(backend.slice, ast.Constant)
            and backend.slice.value == "backend"
        ):
            found.append(f"line {node.lineno}: {name}() with the backend a rank reported")
    return found


def _check_sources():
    for folder, _, files in os.walk(EXERCISES):
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                with open(path) as f:
                    yield os.path.relpath(path, ROOT), f.read()


def test_no_check_compares_under_the_bare_default():
    offenders = [f"{path} {where}" for path, source in _check_sources() for where in bare_comparisons(source)]
    assert not offenders, "comparisons that ignore the run's plan:\n" + "\n".join(offenders)


def test_the_walk_catches_each_way_of_ignoring_the_plan():
    """The walk above can fail: each spelling of a comparison that ignores the plan is named."""
    source = """
assert_close(a, b, "x")
tolerances.assert_close(a, b, "x", backend="gloo")
assert_close(a, b, "x", "likely", got["backend"])
tolerance(torch.float32)
close(a, b, "gloo")
g.assert_close(a, b, "x")
tolerances.assert_close(a, b, "x", backend=g.plan(2).backend)
close(g, a, b)
torch.allclose(a, b, rtol=1e-4, atol=1e-6)
torch.allclose(a, b)
"""
    found = bare_comparisons(source)
    assert [f.split(":")[0] for f in found] == ["line 2", "line 3", "line 4", "line 5", "line 6", "line 10"], found


def test_the_comparisons_have_no_default_backend():
    assert inspect.signature(tolerances.assert_close).parameters["backend"].default is inspect.Parameter.empty
    assert inspect.signature(tolerances.tolerance).parameters["backend"].default is inspect.Parameter.empty
    with pytest.raises(TypeError):
        tolerances.assert_close(torch.zeros(1), torch.zeros(1), "x")
    with pytest.raises(ValueError, match="no tolerances for backend 'mpi'"):
        tolerances.tolerance(torch.float32, "mpi")


def _grading_under(monkeypatch, gpus: int) -> Grading:
    """A check's Grading whose hardware plan is that of a machine with `gpus` GPUs."""
    monkeypatch.setattr(grading, "current_plan", lambda world_size: plan_for(world_size, gpus))
    return Grading(SourceSubmission([Cell("<answers>", "")]), world_size=2)


def test_nccl_bounds_apply_under_an_nccl_plan(monkeypatch):
    g = _grading_under(monkeypatch, gpus=2)
    assert g.plan().backend == "nccl" and g.backend == "nccl"
    assert g.tolerance(torch.float32) == tolerances.TOLERANCES[("nccl", torch.float32)]
    expected = torch.ones(4)
    reordered = expected * (1 + 5e-4)  # within nccl's float32 bound (2e-3), beyond gloo's (1e-4)
    g.assert_close(reordered, expected, "the gradient")
    assert g.close(reordered, expected)


def test_gloo_bounds_apply_under_a_cpu_plan(monkeypatch):
    g = _grading_under(monkeypatch, gpus=1)  # 1 GPU, 2 ranks: gloo on CPU
    assert g.backend == "gloo"
    expected = torch.ones(4)
    with pytest.raises(CheckFailed, match=r"\(torch.float32, gloo\)"):
        g.assert_close(expected * (1 + 5e-4), expected, "the gradient")
    assert not g.close(expected * (1 + 5e-4), expected)


def _nothing(ctx, student):
    return ctx.backend


def test_the_backend_is_the_one_the_runs_had():
    """A real 2-rank run: g.backend is its plan's, as the parent chose it (here, without 2 GPUs, gloo)."""
    g = Grading(SourceSubmission([Cell("<answers>", "x = 1\n")]), world_size=2)
    assert g.run(_nothing) == [g.plan().backend] * 2
    assert g.backend == g.plan().backend
