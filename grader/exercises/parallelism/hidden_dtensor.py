"""Hidden checks of checks_dtensor.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.checks_dtensor import run_block, check_values, check_communication


@EXERCISE.check(
    "parallelize_mlp",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("dtensor_block_matches_one_process", "dtensor_block_is_column_then_row"),
)
def dtensor_block_three_ranks_biases_3d(g):
    """3 ranks, SwiGLU 6 -> 12 -> 6 with biases (gate's and up's sharded, down's replicated), a 3-D input (2, 3, 6).

    The hidden size splits evenly on purpose, as the task text promises: in torch 2.13 RowwiseParallel rebuilds
    its input DTensor from the local shard assuming even shards, so 10 hidden features on 3 ranks fail inside
    down (measured)."""
    per_rank, expected = run_block(g, 3, 6, 12, True, (2, 3, 6))
    check_values(g, per_rank, expected)
    check_communication(g, per_rank, 3)
