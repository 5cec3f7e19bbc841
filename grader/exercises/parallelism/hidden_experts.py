"""Hidden checks of checks_experts.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.checks_experts import check_moe, setting_of

# make selfcheck's mistake for this task: the gates forgotten when the outputs come back.
EXERCISE.typical_mistakes.append(
    ("weighted = back * gates.reshape(-1)[order].unsqueeze(1)", "weighted = back  # the gates forgotten")
)


@EXERCISE.check(
    "moe_layer",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("moe_two_ranks_one_expert_each_matches_one_process", "moe_rank_without_tokens"),
)
def moe_three_ranks_top2_skewed(g):
    """3 ranks, two experts each, top-2, 5, 8 and 3 tokens; most tokens choose rank 0's experts, expert 5 none."""
    check_moe(g, setting_of(3, 2, 2, [5, 8, 3], [6.0, 4.0, 1.0, 0.5, 0.5, 0.0], d=5, hidden=7, seed=59))
