"""02_ddp_basics, DDP in practice: train_with_accumulation (train_uneven: checks_uneven.py; BucketedDDP:
checks_bucketed.py).

Every rule of the task text, and the check that verifies it:

train_with_accumulation (4 micro-batches per rank, accumulation_steps=2)
    backward loss / accumulation_steps                      accumulation_matches_big_batch_step
    one optimizer.step() per accumulation_steps             accumulation_matches_big_batch_step (steps counted)
    zero_grad once per step, after the step                 accumulation_matches_big_batch_step (per micro-batch
                                                            and never: each named)
    first accumulation_steps - 1 micro-batches, forward     accumulation_one_all_reduce_per_bucket_per_step
    and backward, inside no_sync; the last all-reduces
    return the mean loss of every micro-batch of every      accumulation_returns_global_mean_loss
    rank, as a float

DDP's all-reduces are counted by a DDP communication hook (it sees DDP's own buckets, whatever the student
writes); the optimizer's steps by a step pre-hook. The loaders hold tensors on the rank's device already.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.i18n import _
from grader.exercises.ddp_basics import reference as ref
from grader.exercises.ddp_basics import reference_practice as rp
from grader.exercises.ddp_basics import EXERCISE


# --- train_with_accumulation -----------------------------------------------------------------

MICRO, K = 4, 2  # 4 micro-batches per rank, 2 per optimizer step: 2 steps


def _counting_hook(events: list, bucket):
    """DDP comm hook: note the bucket, then all-reduce it as DDP does by default."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    events.append(bucket.index())
    return default_hooks.allreduce_hook(None, bucket)


def _in_rank_accumulate(ctx, student):
    model = ref.ddp_fixture(ref.tiny_net(seed=0), ctx.device)
    events: list = []
    model.register_comm_hook(events, _counting_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=rp.LR)
    optimizer.register_step_pre_hook(lambda *_: events.append("step"))  # steps and all-reduces, in order
    loader = rp.on_device(rp.micro_batches(ctx.rank, MICRO), ctx.device)
    loss = student.task("train_with_accumulation")(model, loader, optimizer, nn.MSELoss(), K)
    try:
        loss = float(loss)
    except (TypeError, ValueError, RuntimeError):
        loss = None
    return ref.flat_params(model.module), events, loss


# Its run may share a launch with other tasks' runs (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs("train_with_accumulation", ((_in_rank_accumulate, ()),))


@EXERCISE.check("train_with_accumulation", points=3)
def accumulation_matches_big_batch_step(g):
    expected, _unused = rp.accumulation_reference(g.world_size, MICRO, K)
    undivided, _unused = rp.accumulation_reference(g.world_size, MICRO, K, divide=False)
    cleared_every, _unused = rp.accumulation_reference(g.world_size, MICRO, K, zero_grad="per micro-batch")
    never_cleared, _unused = rp.accumulation_reference(g.world_size, MICRO, K, zero_grad="never")
    for rank, (params, events, _unused) in enumerate(g.run(_in_rank_accumulate)):
        _judge_step_count(events.count("step"))
        if g.close(params, undivided) and not g.close(params, expected):
            raise CheckFailed(
                _(
                    "the parameters moved as if the gradient were {k} times too large: the loss is "
                    "not divided by the number of micro-batches; backward (loss / "
                    "accumulation_steps)",
                    k=K,
                )
            )
        if g.close(params, cleared_every) and not g.close(params, expected):
            raise CheckFailed(
                _(
                    "each step used only the last micro-batch's gradient: zero_grad() ran before "
                    "every micro-batch and cleared the gradients accumulated so far; call "
                    "optimizer.zero_grad() once per optimizer step, after optimizer.step()"
                )
            )
        if g.close(params, never_cleared) and not g.close(params, expected):
            raise CheckFailed(
                _(
                    "the second step also used the first step's gradients: zero_grad() was never "
                    "called; call optimizer.zero_grad() after each optimizer.step()"
                )
            )
        g.assert_close(
            params,
            expected,
            _("rank {rank}'s parameters after {steps} accumulated steps", rank=rank, steps=MICRO // K),
            _(
                "each step must equal one step on the global batch (every rank's accumulation_steps "
                "micro-batches): accumulate loss / accumulation_steps, all-reduce once, then step"
            ),
        )


def _judge_step_count(steps: int) -> None:
    """optimizer.step() once every K micro-batches, and no more."""
    if steps == MICRO:
        raise CheckFailed(
            _(
                "optimizer.step() ran {steps} times for {micro} micro-batches: the step is "
                "taken every micro-batch; step (then zero_grad) once every "
                "accumulation_steps={k} micro-batches",
                steps=steps,
                micro=MICRO,
                k=K,
            )
        )
    if steps != MICRO // K:
        raise CheckFailed(
            _(
                "optimizer.step() ran {steps} times, expected {expected} ({micro} micro-batches, "
                "accumulation_steps={k}): one step per accumulation_steps micro-batches",
                steps=steps,
                expected=MICRO // K,
                micro=MICRO,
                k=K,
            )
        )


def _all_reduces_per_step(events: list) -> list[list[int]]:
    groups, current = [], []
    for event in events:
        if event == "step":
            groups.append(current)
            current = []
        else:
            current.append(event)
    return groups + ([current] if current else [])


@EXERCISE.check("train_with_accumulation", points=2)
def accumulation_one_all_reduce_per_bucket_per_step(g):
    for rank, (_unused, events, _unused) in enumerate(g.run(_in_rank_accumulate)):
        groups = _all_reduces_per_step(events)
        if not any(groups):
            raise CheckFailed(
                _(
                    "rank {rank}: DDP all-reduced no gradient at all: the last micro-batch of each "
                    "step must run forward and backward outside model.no_sync()",
                    rank=rank,
                )
            )
        if len(groups) != MICRO // K or not all(groups):
            raise CheckFailed(
                _(
                    "rank {rank}: gradient all-reduces per optimizer step: {counts}, expected "
                    "{steps} steps each with one all-reduce per bucket",
                    rank=rank,
                    counts=[len(x) for x in groups],
                    steps=MICRO // K,
                )
            )
        for step, buckets in enumerate(groups):
            worst = max(buckets.count(b) for b in buckets)
            if worst > 1:
                raise CheckFailed(
                    _(
                        "rank {rank}, optimizer step {step}: a bucket was all-reduced {worst} "
                        "times, once per micro-batch: no_sync is missing, so accumulation costs "
                        "{k} times the traffic (or only backward is inside it: DDP decides at "
                        "forward whether backward all-reduces); run forward and backward of the "
                        "first accumulation_steps - 1 micro-batches inside `with model.no_sync():`",
                        rank=rank,
                        step=step + 1,
                        worst=worst,
                        k=K,
                    )
                )


@EXERCISE.check("train_with_accumulation", points=1)
def accumulation_returns_global_mean_loss(g):
    _unused, expected = rp.accumulation_reference(g.world_size, MICRO, K)
    losses = [loss for _unused, _unused, loss in g.run(_in_rank_accumulate)]
    if any(loss is None for loss in losses):
        raise CheckFailed(_("train_with_accumulation must return the mean loss as a number (a float)"))
    if len(set(losses)) > 1:
        raise CheckFailed(
            _(
                "the ranks returned different losses {losses}: each returned its own mean; "
                "all_reduce the loss sum and the sample count, then divide",
                losses=losses,
            )
        )
    if abs(losses[0] * K - expected) <= 1e-4 * abs(expected) + 1e-6:
        raise CheckFailed(
            _(
                "returned {loss:.5f}, {k} times less than the mean loss {expected:.5f}: return "
                "the mean of the micro-batch losses, not of loss / accumulation_steps",
                loss=losses[0],
                k=K,
                expected=expected,
            )
        )
    g.assert_close(
        torch.tensor(losses[0]),
        torch.tensor(expected),
        _("the returned loss"),
        _("return the mean loss over every micro-batch of every rank"),
    )
