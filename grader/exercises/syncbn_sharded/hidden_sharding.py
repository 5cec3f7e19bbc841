"""Hidden checks of checks_sharding.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checks_sharding import (
    _partition_cases,
    _verify_covering,
    _verify_balance,
    SHARDED_STEPS,
    _in_rank_sharded,
    _verify_sharded_params,
    _verify_sharded_state,
)  # noqa: F401

HIDDEN_PARTITION_CASES = [
    ([(5,), (7,), (3,)], [1, 4, 5]),  # more ranks than parameters: some ranks own nothing
    ([(10,)] * 9, [3]),  # equal sizes: every rank gets three
]


@EXERCISE.check(
    "partition_parameters",
    points=1,
    hidden=True,
    depends_on=("every_parameter_owned_once", "balanced_by_element_count"),
)
def more_ranks_than_parameters(g):
    """world_size 1, ranks that own nothing, equal sizes."""
    for case in _partition_cases(g, HIDDEN_PARTITION_CASES):
        _verify_covering(*case)
        _verify_balance(*case)


@EXERCISE.check(
    "ShardedOptimizer",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=(
        "matches_unsharded_adam",
        "matches_unsharded_sgd_momentum",
        "optimizer_state_is_sharded",
        "zero_grad_clears_every_gradient",
    ),
)
def sharded_with_three_ranks(g):
    """Three ranks: Adam results and state sharding."""
    results = g.run(_in_rank_sharded, "adam", SHARDED_STEPS)
    _verify_sharded_params(g, results, "adam")
    _verify_sharded_state(results, "adam")
