"""Hidden checks of checks_syncbn.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checks_syncbn import (
    _in_rank_convert,
    _verify_structure,
    _verify_state_kept,
    _in_rank_stats,
    _verify_stats,
)  # noqa: F401


@EXERCISE.check(
    "convert_to_sync_bn",
    points=0.5,
    hidden=True,
    depends_on=(
        "every_batchnorm_becomes_syncbn",
        "weights_and_running_stats_kept",
        "sync_bn_trains_under_nccl_with_2_gpus",
    ),
)
def model_that_is_a_batchnorm(g):
    """A model that is itself a BatchNorm layer comes back as an nn.SyncBatchNorm."""
    result = g.run(_in_rank_convert, True)[0]
    _verify_structure(result)
    _verify_state_kept(result)


@EXERCISE.check(
    "global_batch_stats", points=1, hidden=True, world_size=3, depends_on=("stats_of_the_concatenated_batch",)
)
def stats_with_three_ranks(g):
    """Three ranks holding 4, 1 and 6 samples of a 3-d input."""
    tails = [(5,)]
    _verify_stats(g, g.run(_in_rank_stats, tails), 3, tails)
