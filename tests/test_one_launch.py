"""Declared runs in one launch (grader/shared_runs.py): in real ranks, each part starts from the random state the
rank started with, and a part whose ranks fall out of step (a collective one rank makes and the other does not)
fails the shared launch, so its checks make their own runs, instead of the fence meeting another part's collective
unseen; a run is answered from a declared part only when its function and arguments are the declared ones."""

import torch
import torch.distributed as dist

from grader.engine import run_distributed
from grader import shared_runs


def _draw(ctx, student):
    return torch.rand(3)


def _extra_collective_on_rank0(ctx, student):
    if ctx.rank == 0:
        dist.all_reduce(torch.ones(1))
    return ctx.rank


def _parts(ctx, parts):
    return shared_runs._in_rank_parts(ctx, None, parts)


def test_every_part_starts_from_the_random_state_the_rank_started_with():
    result = run_distributed(_parts, 2, ((((_draw, ()), (_draw, ())),)), trusted=True, timeout=60)
    assert result.ok, result.failure()
    for first, second in (r.value for r in result.ranks):
        assert torch.equal(first, second)
    fresh = run_distributed(_draw, 2, (None,), trusted=True, timeout=60)
    assert torch.equal(fresh.ranks[0].value, result.ranks[0].value[0])  # as in a run of its own


def test_ranks_out_of_step_fail_the_shared_launch():
    result = run_distributed(_parts, 2, ((((_extra_collective_on_rank0, ()), (_draw, ())),)), trusted=True, timeout=10)
    assert not result.ok, [r.value for r in result.ranks]


def test_a_run_is_answered_from_a_declared_part_only_for_the_same_function_and_arguments():
    parts = ((_draw, ()), (_extra_collective_on_rank0, (1, (2, 3))))
    assert shared_runs._index(parts, (_extra_collective_on_rank0, (1, (2, 3)))) == 1
    assert shared_runs._index(parts, (_extra_collective_on_rank0, (1, [2, 3]))) is None  # a list is not the tuple
    assert shared_runs._index(parts, (_extra_collective_on_rank0, (torch.ones(1), (2, 3)))) is None  # nor a tensor
    assert shared_runs._index(parts, (_draw, (torch.ones(3),))) is None  # its == is no truth value: undeclared
