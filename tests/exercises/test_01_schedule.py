"""Exercise 01_parallelism, task pipeline_schedule (an interleaved 1F1B schedule, two stages per rank): the solution
passes (tests/test_selfcheck.py, from make selfcheck's grading), and each typical mistake and lazy answer fails with a message naming it (real multi-process runs). One
grading per answer, module-scoped; the grader's plan of the order is compared with torch's own."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, _ComputationType

from grader.checks import CheckFailed
from grader.exercises.parallelism.interleaved import compute_order, expected_sends
from grader.exercises.parallelism.schedule_traffic import check_traffic, layer_outputs, rank_layers
from tests.helpers import assert_one_reason, graded_answers

EXERCISE, TASK = "01_parallelism", "pipeline_schedule"
FOUR, SIX, HIDDEN = (
    "interleaved_schedule_matches_one_process",
    "interleaved_schedule_in_three_rounds",
    "interleaved_schedule_three_ranks_uneven",
)
ALL = {FOUR, SIX, HIDDEN}

HEAD = """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches):
            rank, world_size = dist.get_rank(), dist.get_world_size()"""

# the two stages of a rank built from `indices` (the stages' numbers) and run by the interleaved schedule
TWO_STAGES = """
            bounds = torch.tensor_split(torch.arange(len(model)), 2 * world_size)
            stages = [PipelineStage(model[int(bounds[s][0]):int(bounds[s][-1]) + 1], s, 2 * world_size, x.device)
                      for s in INDICES]
            runner = ScheduleInterleaved1F1B(stages, n_microbatches=MICRO, loss_fn=loss_fn)
            losses = []
            runner.step(*((x,) if rank == 0 else ()), target=targets, losses=losses)
            return losses"""


def two_stages(indices: str, micro: str = "n_microbatches") -> str:
    return HEAD + TWO_STAGES.replace("INDICES", indices).replace("MICRO", micro)


ANSWERS = {  # the solution's full marks, hidden 3-rank run included: tests/test_selfcheck.py (make selfcheck's grading)
    # the typical mistake: a rank's two stages side by side
    "contiguous": two_stages("(2 * rank, 2 * rank + 1)"),
    # the lesson's pipeline: one stage per rank, 1F1B
    "one_stage": HEAD
    + """
            mine = torch.tensor_split(torch.arange(len(model)), world_size)[rank].tolist()
            stage = PipelineStage(model[mine[0]:mine[-1] + 1], rank, world_size, x.device)
            runner = Schedule1F1B(stage, n_microbatches=n_microbatches, loss_fn=loss_fn)
            losses = []
            runner.step(*((x,) if rank == 0 else ()), target=targets, losses=losses)
            return losses""",
    # the microbatch count replaced by the number of ranks
    "ranks_as_microbatches": two_stages("(rank, rank + world_size)", "world_size"),
    # copies of the layers: the model's own parameters never get a gradient
    "copied_layers": two_stages("(rank, rank + world_size)")
    .replace(
        "model[int(bounds[s][0]):int(bounds[s][-1]) + 1]",
        "copy.deepcopy(model[int(bounds[s][0]):int(bounds[s][-1]) + 1])",
    )
    .replace("            bounds =", "            import copy\n            bounds ="),
    # the laziest answers: nothing at all, and the whole model on every rank (right losses, no pipeline)
    "nothing": """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches):
            return []""",
    "whole_model_everywhere": """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches):
            loss_fn(model(x), targets).backward()
            last = dist.get_rank() == dist.get_world_size() - 1
            return [loss_fn(model(a), b).detach() for a, b in zip(x.tensor_split(n_microbatches),
                                                                 targets.tensor_split(n_microbatches))] if last else []""",
}


@pytest.fixture(scope="module")
def reports():
    return graded_answers(EXERCISE, TASK, ANSWERS)


def test_stages_side_by_side_are_told_round_robin(reports):
    report, bad = reports["contiguous"]
    assert report.score == 0 and set(bad) == ALL, bad
    assert "side by side" in bad[FOUR] and "round-robin" in bad[FOUR], bad
    assert_one_reason(report, FOUR)  # the later checks point to it: one mistake, one reason


def test_one_stage_per_rank_is_named(reports):
    report, bad = reports["one_stage"]
    assert report.score == 0 and set(bad) == ALL, bad
    assert "built a single stage" in bad[FOUR] and "One stage per rank" in bad[FOUR], bad
    assert_one_reason(report, FOUR)  # the later checks point to it: one mistake, one reason


def test_a_changed_microbatch_count_is_named(reports):
    report, bad = reports["ranks_as_microbatches"]
    assert report.score == 0 and set(bad) == ALL, bad
    assert "the schedule ran 2 microbatches" in bad[FOUR] and "nor the number of ranks" in bad[FOUR], bad
    assert_one_reason(report, FOUR)  # the later checks point to it: one mistake, one reason


def test_copied_layers_are_told_they_are_copies(reports):
    report, bad = reports["copied_layers"]
    assert report.score == 0
    assert "built from copies of its layers" in bad[FOUR], bad


@pytest.mark.parametrize("lazy", ["nothing", "whole_model_everywhere"])
def test_lazy_answers_earn_nothing(reports, lazy):
    report, bad = reports[lazy]
    assert report.score == 0 and set(bad) == ALL
    phrase = {"nothing": "got no gradient", "whole_model_everywhere": "ran every layer of the model"}[lazy]
    assert phrase in bad[FOUR], bad


def _torch_order(rank, world_size, m):
    """torch's own plan of ScheduleInterleaved1F1B, built without a process group."""
    plan = object.__new__(ScheduleInterleaved1F1B)
    plan.n_local_stages, plan.pp_group_size, plan._n_microbatches = 2, world_size, m
    plan.number_of_rounds = max(1, m // world_size)
    plan.microbatches_per_round = m // plan.number_of_rounds
    return [
        ("F" if a.computation_type == _ComputationType.FORWARD else "B", a.stage_index, a.microbatch_index)
        for a in plan._calculate_single_rank_operations(rank)
        if a is not None
    ]


@pytest.mark.parametrize("world_size, m", [(2, 4), (2, 6), (3, 6), (2, 2), (4, 8)])
def test_the_planned_order_is_torchs(world_size, m):
    for rank in range(world_size):
        assert compute_order(rank, world_size, m) == _torch_order(rank, world_size, m)
    # rank 0 of 2 with 4 microbatches, as torch 2.13 runs it: stage 0 and 2 forwards first, then alternation
    assert compute_order(0, 2, 4)[:6] == [("F", 0, 0), ("F", 0, 1), ("F", 2, 0), ("F", 2, 1), ("F", 0, 2), ("B", 2, 0)]


class _Close:
    """The parent's comparison (Grading.close) at fp32 CPU tolerance: the traffic checks read only this of it."""

    @staticmethod
    def close(actual, expected):
        return actual.shape == expected.shape and torch.allclose(actual, expected, rtol=1e-5, atol=1e-6)


def _right_traffic(reference, widths, world_size, m):
    n_layers = 2 * (len(widths) - 1) - 1
    bounds = torch.tensor_split(torch.arange(n_layers), 2 * world_size)
    per_rank = []
    for rank in range(world_size):
        sent = []
        for peer, kind, stage, i in expected_sends(rank, world_size, m):
            layers = bounds[stage].tolist()
            t = reference["outputs"][i][layers[-1]] if kind == "F" else reference["grads"][i][layers[0] - 1] / m
            sent.append((peer, t))
        per_rank.append({"sent": sent})
    return per_rank


def test_what_travels_is_compared_with_one_process_in_order():
    widths, n, m = [8, 12, 10, 6, 4], 8, 4
    reference = layer_outputs(41, widths, n, m)
    right = _right_traffic(reference, widths, 2, m)
    check_traffic(_Close, right, reference, widths, n)  # gradients: any one positive factor
    assert rank_layers(7, 0, 2) == [0, 1, 4, 5] and rank_layers(7, 1, 2) == [2, 3, 6]
    zeros = [{"sent": [(p, torch.zeros_like(t)) for p, t in right[0]["sent"]]}, right[1]]
    with pytest.raises(CheckFailed, match="was zeros"):
        check_traffic(_Close, zeros, reference, widths, n)
    swapped = [{"sent": [right[0]["sent"][1], right[0]["sent"][0], *right[0]["sent"][2:]]}, right[1]]
    with pytest.raises(CheckFailed, match="should be microbatch 0's activation from stage 0.*it was microbatch 1's"):
        check_traffic(_Close, swapped, reference, widths, n)
    flipped = [right[0], {"sent": [(p, -t) for p, t in right[1]["sent"]]}]
    with pytest.raises(CheckFailed, match="not what its stages' layers compute"):
        check_traffic(_Close, flipped, reference, widths, n)
    short = [{"sent": right[0]["sent"][:-1]}, right[1]]
    with pytest.raises(CheckFailed, match="sent 11 tensors where the interleaved schedule sends 12"):
        check_traffic(_Close, short, reference, widths, n)
