"""02_ddp_basics, DDP in practice: train_uneven (train_with_accumulation: checks_practice.py).

Every rule of the task text, and the check that verifies it:

train_uneven (rank 0 has 5 batches, rank 1 has 3; hidden: none)
    one step per batch of the rank's own loader             uneven_finishes_without_hang (steps counted)
    inside `with Join([model]):`, no hang                   uneven_finishes_without_hang (a hang, or gloo's own
                                                            timeout, is named as the missing Join)
    every rank ends with the longest-training rank's        uneven_matches_join_semantics
    parameters; the average over the whole world size
    zero_grad every step                                    uneven_matches_join_semantics (named)

The optimizer's steps are counted by a step pre-hook. The loaders hold tensors on the rank's device already.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.i18n import _
from grader.exercises.ddp_basics import reference as ref
from grader.exercises.ddp_basics import reference_practice as rp
from grader.exercises.ddp_basics import EXERCISE
from grader.grading import describe_failure

LENGTHS = [5, 3]  # rank 0's batches, rank 1's
UNEVEN_TIMEOUT_S = 15.0  # a forgotten Join hangs: the run is stopped after this bound


def _in_rank_uneven(ctx, student, lengths):
    model = ref.ddp_fixture(ref.tiny_net(seed=0), ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=rp.LR)
    steps: list = []
    optimizer.register_step_pre_hook(lambda *_: steps.append(1))
    data = rp.on_device(rp.micro_batches(ctx.rank, lengths[ctx.rank], seed=1), ctx.device)
    student.task("train_uneven")(model, data, optimizer, nn.MSELoss())
    return ref.flat_params(model.module), len(steps)


_COMMUNICATION_ERRORS = ("Timed out", "timed out", "Connection closed", "Connection reset")


def _waited_for_a_finished_rank(result) -> bool:
    """A hang, or gloo's own timeout (or a lost peer) ending the wait before the check's bound does: either
    way a rank waited in a collective the others never joined, not an error in the student's own code."""
    errors = [r.error for r in result.ranks if r.status == "error" and r.error]
    return (
        result.hung
        or bool(errors)
        and all(
            e.get("type") in ("DistBackendError", "DistError", "RuntimeError")
            and any(word in e.get("message", "") for word in _COMMUNICATION_ERRORS)
            for e in errors
        )
    )


def _uneven_run(g) -> list:
    lengths = LENGTHS + [4] * (g.world_size - len(LENGTHS))
    result = g.run_raw(_in_rank_uneven, lengths, timeout=min(g.timeout, UNEVEN_TIMEOUT_S))
    if _waited_for_a_finished_rank(result):
        raise CheckFailed(
            _(
                "the ranks hung: rank 0 has {batches0} batches and rank 1 has {batches1}; once rank 1 "
                "has run out, rank 0's backward waits in an all-reduce that rank 1 never joins. Use "
                "Join: wrap the loop in `with Join([model]):` (torch.distributed.algorithms.join)",
                batches0=lengths[0],
                batches1=lengths[1],
            )
            + "\n"
            + result.failure()
        )
    if not result.ok:
        raise CheckFailed(describe_failure(result))
    values = [r.value for r in result.ranks]
    for rank, (_unused, steps) in enumerate(values):
        if steps != lengths[rank]:
            shortest = (
                " "
                + _(
                    "(it stopped at the shortest loader: with Join the ranks with more data train on all "
                    "of it, while the finished ranks shadow their all-reduces)"
                )
                if steps == min(lengths)
                else ""
            )
            raise CheckFailed(
                _(
                    "rank {rank} took {steps} optimizer steps for its {batches} batches{shortest}: "
                    "one step per batch of its own loader, all of them",
                    rank=rank,
                    steps=steps,
                    batches=lengths[rank],
                    shortest=shortest,
                )
            )
    return [params for params, _ in values]


@EXERCISE.check("train_uneven", points=2)
def uneven_finishes_without_hang(g):
    _uneven_run(g)


@EXERCISE.check("train_uneven", points=2, depends_on=("uneven_finishes_without_hang",))
def uneven_matches_join_semantics(g):
    expected = rp.join_reference(LENGTHS)
    for rank, params in enumerate(_uneven_run(g)):
        if g.close(params, rp.join_reference(LENGTHS, zero_grad=False)):
            raise CheckFailed(
                _(
                    "rank {rank}: each step also applied the earlier steps' gradients: zero_grad() "
                    "was not called; call optimizer.zero_grad() before every batch's backward",
                    rank=rank,
                )
            )
        if g.close(params, rp.join_reference(LENGTHS, divide_by_world_size=False)):
            raise CheckFailed(
                _(
                    "rank {rank}: the last steps averaged over the ranks still training only; DDP "
                    "with Join (its default divide_by_initial_world_size=True) divides by the "
                    "whole world size",
                    rank=rank,
                )
            )
        g.assert_close(
            params,
            expected,
            _("rank {rank}'s parameters after training with {lengths} batches", rank=rank, lengths=LENGTHS),
            _(
                "train every batch of the loader, one step per batch, inside `with Join([model]):`; "
                "every rank then ends with the longest-training rank's parameters"
            ),
        )
