"""01_parallelism: pipeline_step, one forward and backward over two stages by point-to-point messages."""

from __future__ import annotations

import torch

from grader.checks import CheckFailed
from grader.grading import describe_failure
from grader.engine.stacks import describe_exception, format_exception
from grader.exercises.parallelism import reference as ref
from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.host_copy import host as _host
from grader.exercises.parallelism.pipeline_diagnosis import crash_hint, failure_text

PIPELINE_TIMEOUT = 8.0  # a few tiny messages each way: longer is a deadlock


def _pipeline_in_rank(ctx, student, kind, n):
    step = student.task("pipeline_step")
    first, second, inputs, targets, loss_fn = ref.pipeline_case(kind, n)
    stage = (first, second)[ctx.rank].to(ctx.device)
    inputs, targets = inputs.to(ctx.device), targets.to(ctx.device)
    ran, loss_calls = [], []
    stage.register_forward_hook(lambda module, args, output: ran.append(True))

    def counted_loss(output, target):  # the given loss, counted: rank 1 must use it
        loss_calls.append(True)
        return loss_fn(output, target)

    try:
        value = step(stage, inputs, targets, counted_loss)
    except (CheckFailed, NotImplementedError):
        raise
    except Exception as exc:
        hint = crash_hint(ctx.rank, exc, bool(ran), len(loss_calls))
        if hint is None:
            raise  # the traceback is the best clue
        raise CheckFailed(
            f"pipeline_step raised on rank {ctx.rank} ({ref.pipeline_description(kind, n)}): "
            f"{hint}\n" + format_exception(describe_exception(exc))
        ) from exc
    if isinstance(value, torch.Tensor):
        value = value.detach().item() if value.numel() == 1 else "a tensor of shape " + str(tuple(value.shape))
    return {
        "value": value,
        "loss_calls": len(loss_calls),
        "backend": ctx.backend,
        "grads": [None if p.grad is None else _host(p.grad) for p in stage.parameters()],
    }


def _run_pipeline(g, kind: str, n: int):
    result = g.run_raw(_pipeline_in_rank, kind, n, world_size=2, timeout=PIPELINE_TIMEOUT)
    if not result.ok:
        if any(r.status == "error" and r.error["type"] in ("MissingTask", "NotImplementedError") for r in result.ranks):
            raise CheckFailed(describe_failure(result))
        raise CheckFailed(failure_text(result, kind, n))
    per_rank = [r.value for r in result.ranks]
    if not per_rank[1]["loss_calls"]:
        raise CheckFailed(
            "rank 1 never called loss_fn: the loss must be loss_fn(output of rank 1's stage, targets), "
            "with the loss_fn passed in, not a loss of your own"
        )
    return per_rank, ref.pipeline_reference(kind, n)


def _check_pipeline_loss(g, per_rank, expected, kind, n):
    if per_rank[0]["value"] is not None:
        raise CheckFailed(f"rank 0 returned {per_rank[0]['value']!r}; the first stage has no loss and must return None")
    value = per_rank[1]["value"]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise CheckFailed(
            f"rank 1 (the last stage) returned {value!r}; it must return the loss as a float (loss.item())"
        )
    g.assert_close(
        torch.tensor(float(value)),
        torch.tensor(expected["loss"]),
        f"the loss returned by rank 1 ({ref.pipeline_description(kind, n)})",
        "it must be loss_fn(stage output, targets) of the whole batch, computed from the activation "
        "rank 0 sent; if rank 1's buffer is larger than the activation, dist.recv fills only its "
        "beginning: allocate exactly the shape rank 0 sends",
    )


def _check_pipeline_grads(g, per_rank, expected, kind, n):
    for rank in (1, 0):  # the last stage first: rank 0's gradient comes from it
        got, want = per_rank[rank]["grads"], expected["grads"][rank]
        if any(gr is None for gr in got):
            how = (
                "rank 1 must send the received activation's .grad back to rank 0, and rank 0 must call "
                "activation.backward(that gradient) on its stage's output"
                if rank == 0
                else "rank 1 must call backward() on the loss"
            )
            raise CheckFailed(f"stage {rank} got no gradient: {how}")
        likely = (
            "rank 0's gradients come from activation.backward(grad), with the gradient of the loss with "
            "respect to the activation it sent (the .grad of rank 1's received activation), called once"
            if rank == 0
            else "rank 1 runs its stage on the received activation, computes loss_fn(output, targets) and calls "
            "backward once"
        )
        for i, (a, e) in enumerate(zip(got, want)):
            g.assert_close(
                a,
                e,
                f"stage {rank}, parameter {i}: gradient ({ref.pipeline_description(kind, n)})",
                "each stage's gradients must equal those of the unsplit model, stage 1(stage 0(inputs)), "
                "with the same loss_fn; " + likely,
            )


@EXERCISE.check("pipeline_step", points=1, world_size=2)
def pipeline_loss_matches(g):
    """2 stages, 8 samples, MSELoss: rank 1 returns the unsplit model's loss, rank 0 returns None."""
    per_rank, expected = _run_pipeline(g, "mlp", 8)
    _check_pipeline_loss(g, per_rank, expected, "mlp", 8)


@EXERCISE.check("pipeline_step", points=3, world_size=2, depends_on=("pipeline_loss_matches",))
def pipeline_gradients_match(g):
    """2 stages, 8 samples, MSELoss: both stages' gradients equal the unsplit model's."""
    per_rank, expected = _run_pipeline(g, "mlp", 8)
    _check_pipeline_grads(g, per_rank, expected, "mlp", 8)
