"""Hidden checks of checks_bucketed.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.ddp_basics import EXERCISE
from grader.exercises.ddp_basics.bucketed_runs import in_rank_bucketed
from grader.exercises.ddp_basics.checks_bucketed import GRADIENT_CASES, _bucketed_grads_match

# The hidden checks' runs of one submission share a launch (grader/shared_runs.py: no verdict changes).
EXERCISE.declare_runs("BucketedDDP", ((in_rank_bucketed, (GRADIENT_CASES[:1], False)),), hidden=True, world_size=3)


@EXERCISE.check("BucketedDDP", points=1, hidden=True, world_size=3, depends_on=("bucketed_gradients_match_ddp",))
def bucketed_gradients_match_ddp_three_ranks(g):
    _bucketed_grads_match(g, GRADIENT_CASES[:1])
