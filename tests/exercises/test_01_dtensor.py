"""Exercise 01_parallelism, task parallelize_mlp (DeviceMesh + DTensor, a SwiGLU block column-then-row): the
solution passes (tests/test_selfcheck.py, from make selfcheck's grading), and each typical mistake and lazy answer fails with a message naming the extra or missing
collective (real multi-process runs). One grading per answer, module-scoped."""

from __future__ import annotations

import pytest

from tests.helpers import assert_one_reason, graded_answers

EXERCISE, TASK = "01_parallelism", "parallelize_mlp"
VALUES, LAYOUT, HIDDEN = (
    "dtensor_block_matches_one_process",
    "dtensor_block_is_column_then_row",
    "dtensor_block_three_ranks_biases_3d",
)

GATHER_THEN_ROW_BODY = """
            from torch.distributed.tensor import Replicate
            return parallelize_module(mlp, mesh, {"gate": ColwiseParallel(output_layouts=Replicate()),
                                                  "up": ColwiseParallel(output_layouts=Replicate()),
                                                  "down": RowwiseParallel(input_layouts=Replicate())})"""
GATHER_THEN_ROW = (
    """
        def parallelize_mlp(mlp, mesh):"""
    + GATHER_THEN_ROW_BODY
)

ANSWERS = {  # the solution's full marks: tests/test_selfcheck.py, from make selfcheck's grading
    # the lesson's plan, one layer more: right numbers and placements, but gate and up each turn x into a
    # replicated DTensor of their own, so the backward all-reduces the input's gradient twice
    "lesson_plan_extended": """
        def parallelize_mlp(mlp, mesh):
            return parallelize_module(mlp, mesh, {"gate": ColwiseParallel(), "up": ColwiseParallel(),
                                                  "down": RowwiseParallel()})""",
    # all three column-parallel: the hidden activation is gathered before down
    "all_column": """
        def parallelize_mlp(mlp, mesh):
            from torch.distributed.tensor import Replicate
            return parallelize_module(mlp, mesh, {"gate": ColwiseParallel(output_layouts=Replicate()),
                                                  "up": ColwiseParallel(output_layouts=Replicate()),
                                                  "down": ColwiseParallel(output_layouts=Replicate())})""",
    # down column-parallel on the hidden DTensor gate and up leave it: DTensor itself gathers the hidden
    # activation inside down's matmul (no call of the student's), then the output (right numbers)
    "down_column_on_dtensors": """
        def parallelize_mlp(mlp, mesh):
            from torch.distributed.tensor.parallel import PrepareModuleInput
            parallelize_module(mlp, mesh, PrepareModuleInput(input_layouts=(Replicate(),),
                                                             desired_input_layouts=(Replicate(),),
                                                             use_local_output=False))
            return parallelize_module(mlp, mesh, {"gate": ColwiseParallel(use_local_output=False),
                                                  "up": ColwiseParallel(use_local_output=False),
                                                  "down": ColwiseParallel(output_layouts=Replicate())})""",
    # down column-parallel on the plain local shards gate and up return: down's matmul fails inside torch
    "down_column_on_local_shards": """
        def parallelize_mlp(mlp, mesh):
            return parallelize_module(mlp, mesh, {"gate": ColwiseParallel(), "up": ColwiseParallel(),
                                                  "down": ColwiseParallel(output_layouts=Replicate())})""",
    # the laziest answer: nothing parallelized (right numbers, no collective)
    "unchanged": """
        def parallelize_mlp(mlp, mesh):
            return mlp""",
    # DTensors that every rank holds whole (Replicate): the right numbers, still nothing split
    "replicated": """
        def parallelize_mlp(mlp, mesh):
            from torch.distributed.tensor import DTensor, distribute_module
            return distribute_module(
                mlp, mesh,
                input_fn=lambda module, args, mesh: tuple(DTensor.from_local(a, mesh, [Replicate()]) for a in args),
                output_fn=lambda module, out, mesh: out.to_local())""",
    # a right plan on a copy: the mlp it was given stays unparallelized
    "parallelized_copy": """
        def parallelize_mlp(mlp, mesh):
            import copy
            from torch.distributed.tensor.parallel import PrepareModuleInput
            copied = parallelize_module(copy.deepcopy(mlp), mesh, PrepareModuleInput(
                input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),), use_local_output=False))
            return parallelize_module(copied, mesh, {"gate": ColwiseParallel(), "up": ColwiseParallel(),
                                                     "down": RowwiseParallel()})""",
    # gathers the hidden activation, then row-wise: right numbers, an extra all_gather (the twin of the tampers)
    "gather_then_row": GATHER_THEN_ROW,
    # the same, hiding its all_gathers from the grader's recorder by swapping its __torch_dispatch__ (the
    # recorder's own count moved too, so the sequence numbers agree)
    "hide_gathers_swapping_the_recorder": """
        def parallelize_mlp(mlp, mesh):
            import grader.exercises.collectives as recorder
            real = recorder._Recorder.__torch_dispatch__
            def hiding(self, func, types, args=(), kwargs=None):
                if "gather" in func._schema.name:
                    self.sequence += 1
                    return func(*args, **(kwargs or {}))
                return real(self, func, types, args, kwargs)
            recorder._Recorder.__torch_dispatch__ = hiding
"""
    + GATHER_THEN_ROW_BODY,
    # hides them by disabling torch's dispatch modes around the block's forward
    "hide_gathers_disabling_modes": """
        def parallelize_mlp(mlp, mesh):
            from torch.utils._python_dispatch import _disable_current_modes
            off = []
            mlp.register_forward_pre_hook(lambda m, a: off.append(_disable_current_modes()) or off[-1].__enter__() and None)
            mlp.register_forward_hook(lambda m, a, out: off.pop().__exit__(None, None, None) and None)
"""
    + GATHER_THEN_ROW_BODY,
    # edits the record instead: a forward hook takes the all_gathers out of the recorder's list
    "hide_gathers_editing_the_record": """
        def parallelize_mlp(mlp, mesh):
            from torch.utils._python_dispatch import _get_current_dispatch_mode
            def forget(module, args, out):
                calls = getattr(_get_current_dispatch_mode(), "calls", [])
                calls[:] = [c for c in calls if c.kind != "all_gather"]
            mlp.register_forward_hook(forget)
"""
    + GATHER_THEN_ROW_BODY,
    # correct alternatives: the input prepared inside the plan (the root's name is ""), and the layers one by one
    "prepared_in_the_plan": """
        def parallelize_mlp(mlp, mesh):
            from torch.distributed.tensor.parallel import PrepareModuleInput
            return parallelize_module(mlp, mesh, {
                "": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),)),
                "gate": ColwiseParallel(), "up": ColwiseParallel(), "down": RowwiseParallel()})""",
    "layer_by_layer": """
        def parallelize_mlp(mlp, mesh):
            from torch.distributed.tensor.parallel import PrepareModuleInput
            parallelize_module(mlp, mesh, PrepareModuleInput(input_layouts=(Replicate(),),
                                                             desired_input_layouts=(Replicate(),),
                                                             use_local_output=False))
            for name, style in (("gate", ColwiseParallel()), ("up", ColwiseParallel()), ("down", RowwiseParallel())):
                parallelize_module(getattr(mlp, name), mesh, style)
            return mlp""",
    # pops the grader's mode off torch's stack for good as the forward starts
    "hide_gathers_popping_the_mode": """
        def parallelize_mlp(mlp, mesh):
            from torch.utils._python_dispatch import _pop_mode
            mlp.register_forward_pre_hook(lambda m, a: _pop_mode() and None)
"""
    + GATHER_THEN_ROW_BODY,
}
TAMPERS = (
    "hide_gathers_swapping_the_recorder",
    "hide_gathers_disabling_modes",
    "hide_gathers_popping_the_mode",
    "hide_gathers_editing_the_record",
)


@pytest.fixture(scope="module")
def reports():
    # the mistakes' public checks only (they name the mistake); the right and the lazy answers: all
    mistakes = ("lesson_plan_extended", "all_column", "parallelized_copy", "down_column_on_local_shards")
    return graded_answers(EXERCISE, TASK, ANSWERS, lambda name: [VALUES, LAYOUT] if name in mistakes else None)


@pytest.mark.parametrize("answer", ["prepared_in_the_plan", "layer_by_layer"])
def test_solution_gets_full_marks(reports, answer):
    report, bad = reports[answer]
    assert bad == {}
    assert report.score == report.max_score == 7
    assert {c.name for c in report.checks} == {VALUES, LAYOUT, HIDDEN}


def test_the_lesson_plan_extended_is_told_its_second_backward_all_reduce(reports):
    report, bad = reports["lesson_plan_extended"]
    assert set(bad) == {LAYOUT}  # the numbers and placements are right; the backward's communication is not
    message = bad[LAYOUT]
    assert "backward made all_reduce" in message and message.count("all_reduce (") == 2, message
    assert "gate and up each sum their own partial input gradient" in message and "once" in message
    assert report.score == 3


def test_all_column_names_the_gathers(reports):
    _, bad = reports["all_column"]
    assert set(bad) == {LAYOUT}
    assert "forward made all_gather" in bad[LAYOUT] and "the extra all_gather" in bad[LAYOUT]
    assert "all_reduce" not in bad[LAYOUT].split(";")[0]  # the one all_reduce column-then-row makes is missing


@pytest.mark.parametrize("lazy", ["unchanged", "replicated"])
def test_unparallelized_block_earns_nothing(reports, lazy):
    report, bad = reports[lazy]
    assert report.score == 0 and set(bad) == {VALUES, LAYOUT, HIDDEN}
    assert "not parallelized" in bad[VALUES]
    assert_one_reason(report, VALUES)  # the layout's check points to it


def test_the_twin_of_the_tampers_is_told_its_extra_all_gather(reports):
    report, bad = reports["gather_then_row"]
    assert set(bad) == {LAYOUT, HIDDEN} and report.score == 3
    assert "forward made all_gather" in bad[LAYOUT] and "the extra all_gather" in bad[LAYOUT]


@pytest.mark.parametrize("tamper", TAMPERS)
def test_hiding_collectives_from_the_recorder_scores_no_more_than_the_twin(reports, tamper):
    report, bad = reports[tamper]
    assert report.score <= reports["gather_then_row"][0].score, report.lines()
    assert report.score == 0 and set(bad) == {VALUES, LAYOUT, HIDDEN}
    said = {
        "hide_gathers_swapping_the_recorder": "changed the grader or torch",
        "hide_gathers_disabling_modes": "moved data where the grader could not see them",
        "hide_gathers_popping_the_mode": "turned off the grader's collective recorder",
        "hide_gathers_editing_the_record": "moved data where the grader could not see them",
    }[tamper]
    assert said in bad[VALUES], bad  # a hidden check does not show its text
    assert said in bad[LAYOUT] or f"`{VALUES}`" in bad[LAYOUT], bad  # said again (a tamper) or pointed to


def test_a_parallelized_copy_is_told_to_parallelize_in_place(reports):
    report, bad = reports["parallelized_copy"]
    assert report.score == 0 and set(bad) == {VALUES, LAYOUT}
    assert "not the mlp it was given" in bad[VALUES] and "in place" in bad[VALUES], bad
    assert_one_reason(report, VALUES)


DOWN_COLUMN = "down.weight is placed Shard(dim=0)"


def test_down_column_parallel_is_told_its_plan_not_accused_of_hiding_collectives(reports):
    # DTensor's own all-gathers are the plan's, counted as such: the numbers are right, the plan is not
    report, bad = reports["down_column_on_dtensors"]
    assert set(bad) == {LAYOUT, HIDDEN} and report.score == 3, report.lines()
    message = bad[LAYOUT]
    assert message.startswith(f"rank 0: {DOWN_COLUMN}") and "expected Shard(dim=1)" in message, message
    assert "the forward made all_gather (192 B), all_gather (64 B) and the backward made" in message, message
    assert "(2 and 4 collective(s))" in message and "the extra all_gather" in message, message
    assert "could not see" not in message and "Traceback" not in message


def test_down_column_parallel_failing_inside_torch_is_told_its_plan(reports):
    report, bad = reports["down_column_on_local_shards"]
    assert report.score == 0 and set(bad) == {VALUES, LAYOUT}, report.lines()
    message = bad[VALUES]
    assert message.startswith(DOWN_COLUMN) and "With this plan the forward failed: RuntimeError" in message
    assert "Traceback" not in message and "/" not in message, message
    assert_one_reason(report, VALUES)
