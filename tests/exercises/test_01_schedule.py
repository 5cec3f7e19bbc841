"""Exercise 01_parallelism, task pipeline_schedule (torch.distributed.pipelining, GPipe and 1F1B): the solution
passes, a hand-written 1F1B in the same order passes too, and each typical mistake and lazy answer fails with a
message naming it (real multi-process runs). One grading per answer, module-scoped."""

from __future__ import annotations

import pytest
import torch

from grader.checks import CheckFailed
from grader.exercises.parallelism.checks_schedule import events, expected_order
from grader.exercises.parallelism.schedule_traffic import check_traffic, layer_outputs
from tests.helpers import assert_one_reason, graded_answers

EXERCISE, TASK = "01_parallelism", "pipeline_schedule"
ONE_F_ONE_B, GPIPE, HIDDEN = (
    "schedule_1f1b_matches_one_process_in_its_order",
    "schedule_gpipe_matches_one_process_in_its_order",
    "schedule_three_stages_uneven",
)

STEP = """
            losses = []
            if rank == 0:
                runner.step(x)
            elif rank == world_size - 1:
                runner.step(target=targets, losses=losses)
            else:
                runner.step()
            return losses"""

# how most answers below build their stage: the model's own layers, split evenly over the ranks
STAGE = """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches, schedule):
            rank, world_size = dist.get_rank(), dist.get_world_size()
            mine = torch.tensor_split(torch.arange(len(model)), world_size)[rank].tolist()
            stage = PipelineStage(model[mine[0]:mine[-1] + 1], rank, world_size, x.device)"""

ANSWERS = {
    "solution": None,
    # the typical mistake: one schedule whatever the argument says
    "always_gpipe": STAGE
    + """
            runner = ScheduleGPipe(stage, n_microbatches=n_microbatches, loss_fn=loss_fn)"""
    + STEP,
    # no microbatching: the schedule runs the whole batch as one microbatch
    "one_microbatch": STAGE
    + """
            kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]
            runner = kind(stage, n_microbatches=1, loss_fn=loss_fn)"""
    + STEP,
    # the stage built from copies of the layers: model's own parameters never get a gradient
    "copied_layers": """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches, schedule):
            import copy
            rank, world_size = dist.get_rank(), dist.get_world_size()
            mine = torch.tensor_split(torch.arange(len(model)), world_size)[rank].tolist()
            stage = PipelineStage(copy.deepcopy(model[mine[0]:mine[-1] + 1]), rank, world_size, x.device)
            kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]
            runner = kind(stage, n_microbatches=n_microbatches, loss_fn=loss_fn)"""
    + STEP,
    # the last rank keeps the losses to itself
    "no_losses": STAGE
    + """
            kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]
            runner = kind(stage, n_microbatches=n_microbatches, loss_fn=loss_fn)
            runner.step(x) if rank == 0 else runner.step(target=targets) if rank == world_size - 1 else runner.step()
            return []""",
    # the laziest answers: nothing at all, and the whole model on every rank (right losses, no pipeline)
    "nothing": """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches, schedule):
            return []""",
    "whole_model_everywhere": """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches, schedule):
            loss_fn(model(x), targets).backward()
            last = dist.get_rank() == dist.get_world_size() - 1
            return [loss_fn(model(a), b).detach() for a, b in zip(x.tensor_split(n_microbatches),
                                                                 targets.tensor_split(n_microbatches))] if last else []""",
    # the tamper that never pipelines: every rank runs the whole model on the whole batch, keeps its own
    # stage's gradients, computes the losses without autograd and sends zeros of the right shapes in the order
    "never_pipelines": """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches, schedule):
            rank, world_size, m = dist.get_rank(), dist.get_world_size(), n_microbatches
            mine = torch.tensor_split(torch.arange(len(model)), world_size)[rank].tolist()
            loss_fn(model(x), targets).backward()
            for i, layer in enumerate(model):
                if i not in mine:
                    for p in layer.parameters():
                        p.grad = None
            xs, ts = x.tensor_split(m), targets.tensor_split(m)
            with torch.no_grad():
                shapes, h = [], xs[0]
                for layer in model:
                    h = layer(h)
                    shapes.append(h.shape)
            first, last = rank == 0, rank == world_size - 1
            out_shape, in_shape = shapes[mine[-1]], xs[0].shape if first else shapes[mine[0] - 1]
            w = min(m, world_size - rank)
            order = "F" * m + "B" * m if schedule == "GPipe" else "F" * w + "BF" * (m - w) + "B" * w
            pending = []
            for step in order:
                if step == "F":
                    if not first:
                        dist.recv(torch.empty(in_shape), rank - 1)
                    if not last:
                        pending.append(dist.isend(torch.zeros(out_shape), rank + 1))
                else:
                    if not last:
                        dist.recv(torch.empty(out_shape), rank + 1)
                    if not first:
                        pending.append(dist.isend(torch.zeros(in_shape), rank - 1))
            for request in pending:
                request.wait()
            if not last:
                return []
            with torch.no_grad():
                return [loss_fn(model(a), b) for a, b in zip(xs, ts)]""",
    # a stage holding the whole model (the notebook names it)
    "whole_model_stage": """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches, schedule):
            rank, world_size = dist.get_rank(), dist.get_world_size()
            stage = PipelineStage(model, rank, world_size, x.device)
            kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]
            runner = kind(stage, n_microbatches=n_microbatches, loss_fn=loss_fn)"""
    + STEP,
    # the layers split as len(model) // world_size each, the remainder to the last rank
    "remainder_to_last": """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches, schedule):
            rank, world_size = dist.get_rank(), dist.get_world_size()
            per = len(model) // world_size
            end = len(model) if rank == world_size - 1 else (rank + 1) * per
            stage = PipelineStage(model[rank * per:end], rank, world_size, x.device)
            kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]
            runner = kind(stage, n_microbatches=n_microbatches, loss_fn=loss_fn)"""
    + STEP,
    # one microbatch fewer than asked
    "minus_one": STAGE
    + """
            kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]
            runner = kind(stage, n_microbatches=n_microbatches - 1, loss_fn=loss_fn)"""
    + STEP,
    # correct too: the other stages' layers moved to "meta" to free their memory (moved, never run)
    "frees_other_stages": STAGE
    + """
            for i, layer in enumerate(model):
                if i not in mine:
                    layer.to("meta")
            kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]
            runner = kind(stage, n_microbatches=n_microbatches, loss_fn=loss_fn)"""
    + STEP,
    # a correct alternative: the schedules written by hand with send and recv, in torch's order
    "hand_written": """
        def pipeline_schedule(model, x, targets, loss_fn, n_microbatches, schedule):
            rank, world_size = dist.get_rank(), dist.get_world_size()
            mine = torch.tensor_split(torch.arange(len(model)), world_size)[rank].tolist()
            stage = model[mine[0]:mine[-1] + 1]
            first, last, m = rank == 0, rank == world_size - 1, n_microbatches
            xs, ts = x.tensor_split(m), targets.tensor_split(m)
            saved, losses, pending = {}, [], []  # sends do not wait for their receive (as torch's)
            def forward(i):
                if first:
                    inp = xs[i]
                else:  # a header first, as task 6: the number of dimensions, then the sizes
                    ndim = torch.empty(1, dtype=torch.int64)
                    dist.recv(ndim, rank - 1)
                    shape = torch.empty(int(ndim), dtype=torch.int64)
                    dist.recv(shape, rank - 1)
                    inp = torch.empty(shape.tolist())
                    dist.recv(inp, rank - 1)
                    inp.requires_grad_()
                out = stage(inp)
                if last:
                    loss = loss_fn(out, ts[i])
                    losses.append(loss.detach())
                    out = loss / m
                else:
                    header = [torch.tensor([out.dim()]), torch.tensor(out.shape)]
                    pending.extend(dist.isend(t, rank + 1) for t in header)
                    pending.append(dist.isend(out.detach().contiguous(), rank + 1))
                saved[i] = (inp, out)
            def backward(i):
                inp, out = saved.pop(i)
                if last:
                    out.backward()
                else:
                    grad = torch.empty(out.shape)
                    dist.recv(grad, rank + 1)
                    out.backward(grad)
                if not first:
                    pending.append(dist.isend(inp.grad.contiguous(), rank - 1))
            order = [("F" if c == "F" else "B") for c in
                     ("F" * m + "B" * m if schedule == "GPipe" else
                      "F" * min(m, world_size - rank) + "BF" * (m - min(m, world_size - rank)) +
                      "B" * min(m, world_size - rank))]
            nf = nb = 0
            for step in order:
                if step == "F":
                    forward(nf)
                    nf += 1
                else:
                    backward(nb)
                    nb += 1
            for request in pending:
                request.wait()
            return losses""",
}


# The same tamper running a deep copy of the model: computing with a copy of a layer is running it.
ANSWERS["never_pipelines_on_a_copy"] = ANSWERS["never_pipelines"].replace(
    "            loss_fn(model(x), targets).backward()\n",
    "            import copy\n"
    "            twin = copy.deepcopy(model)\n"
    "            loss_fn(twin(x), targets).backward()\n"
    "            for p, q in zip(model.parameters(), twin.parameters()):\n"
    "                p.grad = q.grad\n",
)


@pytest.fixture(scope="module")
def reports():
    return graded_answers(EXERCISE, TASK, ANSWERS)


@pytest.mark.parametrize("answer", ["solution", "hand_written", "frees_other_stages"])
def test_solution_gets_full_marks(reports, answer):
    report, bad = reports[answer]
    assert bad == {}, bad
    assert report.score == report.max_score == 6
    assert {c.name for c in report.checks} == {ONE_F_ONE_B, GPIPE, HIDDEN}


def test_one_schedule_for_both_is_told_it_ran_gpipe(reports):
    report, bad = reports["always_gpipe"]
    assert_one_reason(report, ONE_F_ONE_B)  # the typical mistake: the hidden check points to it
    assert set(bad) == {ONE_F_ONE_B, HIDDEN} and report.score == 2
    assert "FFFFBBBB" in bad[ONE_F_ONE_B] and "FFBFBFBB" in bad[ONE_F_ONE_B]
    assert "that is GPipe's order" in bad[ONE_F_ONE_B]


def test_one_microbatch_is_told_the_count(reports):
    report, bad = reports["one_microbatch"]
    assert report.score == 0 and set(bad) == {ONE_F_ONE_B, GPIPE, HIDDEN}
    assert "Number of microbatches (1)" in bad[ONE_F_ONE_B], bad  # torch's own error: 1F1B needs m >= p
    assert_one_reason(report, ONE_F_ONE_B)  # GPipe's check points to it


def test_copied_layers_are_told_they_are_copies(reports):
    report, bad = reports["copied_layers"]
    assert report.score == 0
    assert "built from copies of its layers" in bad[ONE_F_ONE_B], bad


@pytest.mark.parametrize("tamper", ["never_pipelines", "never_pipelines_on_a_copy"])
def test_a_rank_that_never_pipelines_is_told_it_ran_the_whole_model(reports, tamper):
    report, bad = reports[tamper]
    assert report.score == 0 and set(bad) == {ONE_F_ONE_B, GPIPE, HIDDEN}, bad
    assert "ran every layer of the model" in bad[ONE_F_ONE_B] and "not a pipeline" in bad[ONE_F_ONE_B], bad
    assert_one_reason(report, ONE_F_ONE_B)


def test_a_stage_of_the_whole_model_is_named(reports):
    report, bad = reports["whole_model_stage"]
    assert report.score == 0 and set(bad) == {ONE_F_ONE_B, GPIPE, HIDDEN}, bad
    assert "not from the whole model" in bad[ONE_F_ONE_B], bad


def test_the_remainder_on_the_last_rank_fails_the_public_checks_too(reports):
    report, bad = reports["remainder_to_last"]
    assert report.score == 0 and set(bad) == {ONE_F_ONE_B, GPIPE, HIDDEN}, bad
    assert "the output of layer 2; the stage ends with layer 3" in bad[ONE_F_ONE_B], bad
    assert "the first ranks one layer more" in bad[ONE_F_ONE_B] and "3 ranks" in bad[ONE_F_ONE_B], bad


def test_one_microbatch_fewer_is_named(reports):
    report, bad = reports["minus_one"]
    assert report.score == 0 and set(bad) == {ONE_F_ONE_B, GPIPE, HIDDEN}, bad
    assert "n_microbatches - 1" in bad[ONE_F_ONE_B], bad
    assert_one_reason(report, ONE_F_ONE_B)


def test_losses_kept_to_the_schedule_are_asked_for(reports):
    report, bad = reports["no_losses"]
    assert report.score == 0
    assert "expected the 4 microbatches' losses" in bad[ONE_F_ONE_B] and "losses=" in bad[ONE_F_ONE_B]


@pytest.mark.parametrize("lazy", ["nothing", "whole_model_everywhere"])
def test_lazy_answers_earn_nothing(reports, lazy):
    report, bad = reports[lazy]
    assert report.score == 0 and set(bad) == {ONE_F_ONE_B, GPIPE, HIDDEN}
    phrase = {"nothing": "got no gradient", "whole_model_everywhere": "ran every layer of the model"}[lazy]
    assert phrase in bad[ONE_F_ONE_B], bad


def test_the_orders_read_from_messages():
    # rank 0 of 2, 1F1B, 3 microbatches: integer metadata first, then activations out and gradients in
    meta = [("send", 1, "int64"), ("recv", 1, "int64")]
    sends = (
        [("send", 1, "float32")] * 2 + [("recv", 1, "float32"), ("send", 1, "float32")] + [("recv", 1, "float32")] * 2
    )
    assert events(meta + sends, 0, 2) == ("FFBFBB", []) == (expected_order("1F1B", 0, 2, 3), [])
    # a middle rank counts its sends: activation i onwards, gradient i back
    middle = [("recv", 0, "float32"), ("send", 2, "float32"), ("recv", 2, "float32"), ("send", 0, "float32")]
    assert events(middle, 1, 3) == ("FB", [])
    assert events([("all_reduce", None, "float32")], 0, 2) == ("", ["all_reduce"])
    assert expected_order("GPipe", 1, 3, 2) == "FFBB" and expected_order("1F1B", 2, 3, 3) == "FBFBFB"


class _Close:
    """The parent's comparison (Grading.close) at fp32 CPU tolerance: the traffic checks read only this of it."""

    @staticmethod
    def close(actual, expected):
        return actual.shape == expected.shape and torch.allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_what_travels_is_compared_with_one_process():
    widths, n, m = [8, 12, 10, 6, 4], 8, 4
    reference = layer_outputs(41, widths, n, m)
    right = [
        {"sent": [(1, reference["outputs"][i][3]) for i in range(m)]},
        {"sent": [(0, reference["grads"][i][3] / m) for i in range(m)]},  # any one positive factor
    ]
    check_traffic(_Close, right, reference, widths, n)
    zeros = [{"sent": [(1, torch.zeros_like(t)) for _, t in right[0]["sent"]]}, right[1]]
    with pytest.raises(CheckFailed, match="microbatch 0, sent to rank 1, was zeros"):
        check_traffic(_Close, zeros, reference, widths, n)
    flipped = [right[0], {"sent": [(0, -t) for _, t in right[1]["sent"]]}]
    with pytest.raises(CheckFailed, match="not the gradient of its input"):
        check_traffic(_Close, flipped, reference, widths, n)
