"""Hidden checks of checks_batchnorm.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checks_batchnorm import _bn_case, _verify_bn_backward, _verify_bn_running_stats  # noqa: F401


@EXERCISE.check(
    "DistributedBatchNorm",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=(
        "training_output_matches_one_batchnorm",
        "gradients_match_one_batchnorm",
        "running_stats_and_eval_match",
    ),
)
def distributed_bn_with_three_ranks(g):
    """Three ranks holding 4, 1 and 6 samples of a 2-d input: outputs, gradients, running statistics."""
    case = _bn_case(g, (), 3)
    _verify_bn_backward(g, *case)
    _verify_bn_running_stats(g, *case)
