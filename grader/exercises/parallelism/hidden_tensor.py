"""Hidden checks of checks_tensor.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.checks_tensor import (
    _run_column,
    _check_column_forward,
    _check_column_shard_grads,
    _check_column_input_grad,
)  # noqa: F401


@EXERCISE.check(
    "ColumnParallelLinear",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("column_parallel_forward", "column_parallel_shard_gradients", "column_parallel_input_gradient"),
)
def column_parallel_uneven_three_ranks(g):
    """3 ranks, 5 -> 7 features (shards of 3, 2, 2 rows), a 3-D input."""
    per_rank, expected = _run_column(g, 3, 5, 7, (2, 3, 5))
    _check_column_forward(g, per_rank, expected)
    _check_column_shard_grads(g, per_rank, expected, 3)
    _check_column_input_grad(g, per_rank, expected)
