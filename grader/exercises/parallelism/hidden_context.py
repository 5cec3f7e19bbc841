"""Hidden checks of checks_context.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.checks_context import check_traffic, check_values, run_ring

# make selfcheck's mistake for this task: blocks merged without rescaling what was summed under the old maximum.
EXERCISE.typical_mistakes.append(
    (
        "correction = torch.exp(running_max - new_max)  # rescale what was gathered under the old maximum",
        "correction = torch.ones_like(running_max)  # nothing rescaled",
    )
)


@EXERCISE.check(
    "ring_attention",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("ring_two_ranks_matches_causal_attention", "ring_four_ranks_never_holds_every_block"),
)
def ring_three_ranks_uneven_blocks(g):
    """3 ranks, blocks of 5, 9 and 3 (the receive buffers follow the sender's length)."""
    per_rank, data = run_ring(g, [5, 9, 3], seed=11)
    check_traffic(g, per_rank, data)
    check_values(g, per_rank, data)
