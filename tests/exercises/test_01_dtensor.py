"""Exercise 01_parallelism, task parallelize_mlp (DeviceMesh + DTensor, column-then-row): the solution
passes, and each typical mistake and lazy answer fails with a message naming the extra or missing
collective (real multi-process runs). One grading per answer, module-scoped."""
from __future__ import annotations

import pytest

from tests.helpers import failed, grade_source, replace_definition, solution_source

EXERCISE, TASK = "01_parallelism", "parallelize_mlp"
VALUES, LAYOUT, HIDDEN = ("dtensor_block_matches_one_process", "dtensor_block_is_column_then_row",
                          "dtensor_block_three_ranks_gelu_3d")

ANSWERS = {
    "solution": None,
    # the plan the other way round: it only runs with a gather of fc2's output columns
    "row_then_column": '''
        def parallelize_mlp(mlp, mesh):
            from torch.distributed.tensor import Replicate
            return parallelize_module(mlp, mesh, {"fc1": RowwiseParallel(input_layouts=Replicate()),
                                                  "fc2": ColwiseParallel(output_layouts=Replicate())})''',
    # both column-parallel: the hidden activation is gathered between the layers
    "both_column": '''
        def parallelize_mlp(mlp, mesh):
            from torch.distributed.tensor import Replicate
            return parallelize_module(mlp, mesh, {"fc1": ColwiseParallel(output_layouts=Replicate()),
                                                  "fc2": ColwiseParallel(output_layouts=Replicate())})''',
    # the laziest answer: nothing parallelized (right numbers, no collective)
    "unchanged": '''
        def parallelize_mlp(mlp, mesh):
            return mlp''',
    # DTensors that every rank holds whole (Replicate): the right numbers, still nothing split
    "replicated": '''
        def parallelize_mlp(mlp, mesh):
            from torch.distributed.tensor import DTensor, distribute_module
            return distribute_module(
                mlp, mesh,
                input_fn=lambda module, args, mesh: tuple(DTensor.from_local(a, mesh, [Replicate()]) for a in args),
                output_fn=lambda module, out, mesh: out.to_local())''',
}


@pytest.fixture(scope="module")
def reports():
    solution = solution_source(EXERCISE)
    out = {}
    for name, code in ANSWERS.items():
        source = solution if code is None else replace_definition(solution, TASK, code)
        # the mistakes' public checks only (they name the mistake); the solution and the lazy answer: all
        checks = [VALUES, LAYOUT] if name in ("row_then_column", "both_column") else None
        report = grade_source(EXERCISE, source, task=TASK, checks=checks)
        out[name] = (report, failed(report))
    return out


def test_solution_gets_full_marks(reports):
    report, bad = reports["solution"]
    assert bad == {}
    assert report.score == report.max_score == 7
    assert {c.name for c in report.checks} == {VALUES, LAYOUT, HIDDEN}


def test_row_then_column_names_the_extra_all_gather(reports):
    report, bad = reports["row_then_column"]
    assert set(bad) == {LAYOUT}  # the numbers are right; the communication is not
    assert "forward made all_reduce" in bad[LAYOUT] and "the extra all_gather" in bad[LAYOUT]
    assert report.score == 3


def test_both_column_names_the_gathers(reports):
    _, bad = reports["both_column"]
    assert set(bad) == {LAYOUT}
    assert "forward made all_gather" in bad[LAYOUT] and "the extra all_gather" in bad[LAYOUT]
    assert "all_reduce" not in bad[LAYOUT].split(";")[0]  # the one all_reduce column-then-row makes is missing


@pytest.mark.parametrize("lazy", ["unchanged", "replicated"])
def test_unparallelized_block_earns_nothing(reports, lazy):
    report, bad = reports[lazy]
    assert report.score == 0 and set(bad) == {VALUES, LAYOUT, HIDDEN}
    assert "not parallelized" in bad[VALUES]
    assert "made no collective" in bad[LAYOUT]
