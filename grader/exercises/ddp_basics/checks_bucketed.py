"""02_ddp_basics, DDP in practice: BucketedDDP (gradient buckets all-reduced during backward).

Every rule of the task text, and the check that verifies it (hidden: bucketed_gradients_match_ddp_three_ranks
repeats the gradient comparison on 3 ranks):

    keep `self.module`; `forward` delegates to it          bucketed_gradients_match_ddp
    broadcast rank 0's parameters and buffers at __init__   bucketed_gradients_match_ddp (each rank starts
                                                            from its own weights and buffer)
    only parameters that require a gradient                 bucketed_gradients_match_ddp (frozen model)
    reverse order, greedy buckets of bucket_cap_mb, a       bucketed_one_all_reduce_per_bucket (three caps: the
    larger gradient alone                                   count and each bucket's bytes; torch's greedy rule,
                                                            close a bucket once it reaches the cap, accepted too)
    each Parameter once, a tied one too                     bucketed_one_all_reduce_per_bucket (bytes per
                                                            step, on a model whose weight two modules share)
    launch from the hook of a bucket's last gradient,       bucketed_all_reduce_overlaps_backward
    async_op=True, during backward
    flatten, divide by the world size, all-reduce           bucketed_gradients_match_ddp; the count check
                                                            (one all-reduce per bucket, nothing else)
    finish: launch buckets never ready (zeros for an        bucketed_gradients_match_ddp (unused model);
    unused parameter), wait, copy back                      the count check (no bucket launched twice)
    reset for the next step                                 every check runs two steps and names a second
                                                            step that differs from the first
    built by hand, not torch's DDP                          every check (bucketed_runs.require_by_hand)

Collectives are recorded at the dispatcher (grader/exercises/collectives.py), so every spelling of a call is
counted, and a token call cannot stand in for the real traffic: the count check also adds up the bytes.
"""

from __future__ import annotations

import torch

from grader.checks import CheckFailed
from grader.i18n import _
from grader.exercises.ddp_basics import reference as ref
from grader.exercises.ddp_basics import reference_practice as rp
from grader.exercises.ddp_basics import EXERCISE
from grader.exercises.ddp_basics.bucketed_runs import in_rank_bucketed
from grader.exercises.ddp_basics.bucketed_traffic import RESET, judge_traffic, not_reset, nth


GRADIENT_CASES = (
    ("wide", 0.002),
    ("frozen", 0.0001),
    ("tied", 0.00005),
    ("unused", 0.0001),
    ("shared", 0.0001),
)  # several buckets each


def _broadcast_at_construction(name: str, rank: int, run: dict) -> None:
    rank0 = ref.seeded(rp.MODELS[name], 1)
    how = _(
        "broadcast rank 0's parameters and buffers in __init__ (dist.broadcast(tensor, src=0) for each): every "
        "replica must start from the same weights, or they drift apart from the first step"
    )
    if not torch.equal(run["params"], rp.initial_state(rank0, buffers=False)):
        raise CheckFailed(
            _(
                "{name} model: rank {rank}'s parameters right after BucketedDDP(...) are not rank "
                "0's (the ranks start from different weights): {how}",
                name=name,
                rank=rank,
                how=how,
            )
        )
    if not torch.equal(run["buffers"], rp.initial_state(rank0, params=False)):
        raise CheckFailed(
            _(
                "{name} model: rank {rank}'s buffers right after BucketedDDP(...) are not rank 0's: {how}",
                name=name,
                rank=rank,
                how=how,
            )
        )


def _bucketed_grads_match(g, cases):
    try:
        results = g.run(in_rank_bucketed, cases, False)
    except CheckFailed as exc:
        if "doesn't require gradient" in str(exc):
            raise CheckFailed(
                _(
                    "BucketedDDP registered a gradient hook on a frozen parameter: bucket only the "
                    "parameters with requires_grad=True"
                )
            ) from None
        raise
    for rank, runs in enumerate(results):  # the construction first: every rank's
        for (name, _unused), run in zip(cases, runs):
            if not run["kept"]:
                raise CheckFailed(
                    _(
                        "BucketedDDP's `self.module` is not the model it was given: keep it "
                        "(self.module = module) and train that model"
                    )
                )
            _broadcast_at_construction(name, rank, run)
    for rank, runs in enumerate(results):
        for (name, _unused), run in zip(cases, runs):
            for step, record in enumerate(run["steps"]):
                grad, ddp_grad = record["grad"], record["ddp"]
                likely = _("average each bucket (all-reduce the flat bucket, divide by the world size, copy back)")
                if g.close(grad, ddp_grad * g.world_size) and ddp_grad.abs().sum() > 0:
                    likely = _("the gradients are world_size times DDP's: divide the all-reduced sum by the world size")
                elif step > 0:
                    likely = _("the first step was right, the {nth} was not: {reset}", nth=nth(step), reset=_(RESET))
                elif name == "unused":
                    likely = _(
                        "a bucket holding a parameter that forward never uses never becomes ready: "
                        "all-reduce the buckets still pending in finish_gradient_synchronization"
                    )
                g.assert_close(
                    grad,
                    ddp_grad,
                    _(
                        "{name} model, rank {rank}, {nth} step: BucketedDDP's gradient",
                        name=name,
                        rank=rank,
                        nth=nth(step),
                    ),
                    likely,
                )


@EXERCISE.check("BucketedDDP", points=3)
def bucketed_gradients_match_ddp(g):
    _bucketed_grads_match(g, GRADIENT_CASES)


CAPS_MB = (0.0005, 0.003, 100.0)  # one gradient per bucket, a few per bucket, one bucket for all
COUNT_CASES = tuple(("wide", cap) for cap in CAPS_MB) + (("shared", 0.00001),)  # the shared weight alone
OVERLAP_CASES = (("wide", 0.003),)
# The public checks' three runs, in one launch (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs(
    "BucketedDDP",
    (
        (in_rank_bucketed, (GRADIENT_CASES, False)),
        (in_rank_bucketed, (COUNT_CASES,)),
        (in_rank_bucketed, (OVERLAP_CASES,)),
    ),
)


@EXERCISE.check("BucketedDDP", points=2)
def bucketed_one_all_reduce_per_bucket(g):
    results = g.run(in_rank_bucketed, COUNT_CASES)
    for i, (name, cap) in enumerate(COUNT_CASES):
        for rank, runs in enumerate(results):
            judge_traffic(name, cap, rank, runs[i]["steps"])


@EXERCISE.check("BucketedDDP", points=2)
def bucketed_all_reduce_overlaps_backward(g):
    for rank, (run,) in enumerate(g.run(in_rank_bucketed, OVERLAP_CASES)):
        steps = run["steps"]
        stale = not_reset(steps, phase="backward")
        if stale is not None:
            raise CheckFailed(
                _(
                    "from the {nth} step on, no all-reduce was launched during backward (the first "
                    "step launched them from the gradient hooks): {reset}",
                    nth=nth(stale),
                    reset=_(RESET),
                )
            )
        for step, record in enumerate(steps):
            calls = [c for c in record["calls"] if c[1] == "all_reduce"]
            if not calls:
                raise CheckFailed(_("{nth} step: no all-reduce was made: all-reduce each bucket", nth=nth(step)))
            if any(async_op is False for _, _, _, async_op in calls):
                raise CheckFailed(
                    _(
                        "{nth} step: dist.all_reduce was called without async_op=True: backward "
                        "then waits for each bucket; keep the work handle and wait() in "
                        "finish_gradient_synchronization",
                        nth=nth(step),
                    )
                )
            late = [phase for phase, _, _, _ in calls if phase != "backward"]
            if late:
                when = (
                    _("in forward")
                    if "forward" in late
                    else _("after backward returned (in finish_gradient_synchronization)")
                )
                raise CheckFailed(
                    _(
                        "{nth} step: {count} of {total} all-reduces started {when}: launch a "
                        "bucket's all-reduce from the gradient hook of its last parameter, during "
                        "backward",
                        nth=nth(step),
                        count=len(late),
                        total=len(calls),
                        when=when,
                    )
                )
            if not record["before_first"]:
                raise CheckFailed(
                    _(
                        "{nth} step: no bucket's all-reduce started before the first layer's "
                        "gradient was ready: launch each bucket as soon as its own gradients are "
                        "all ready, not all together at the end of backward",
                        nth=nth(step),
                    )
                )
