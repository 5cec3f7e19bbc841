"""Hidden checks of checks_mini_ddp.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.ddp_basics import EXERCISE
from grader.exercises.ddp_basics.checks_mini_ddp import _compare_mini_to_ddp, _in_rank_mini_vs_ddp

# The hidden checks' runs of one submission share a launch (grader/shared_runs.py: no verdict changes).
EXERCISE.declare_runs("MiniDDP", ((_in_rank_mini_vs_ddp, ("tiny",)),), hidden=True, world_size=3)


@EXERCISE.check("MiniDDP", points=1, hidden=True, world_size=3, depends_on=("mini_ddp_matches_ddp",))
def mini_ddp_matches_ddp_three_ranks(g):
    _compare_mini_to_ddp(g, "tiny")
