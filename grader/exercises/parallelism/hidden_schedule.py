"""Hidden checks of checks_schedule.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.parallelism.checks_schedule import check_step, run_schedule
from grader.exercises.parallelism import EXERCISE


# make selfcheck grades the solution with this line replaced: its task must score less than full marks.
EXERCISE.typical_mistakes.append(
    (
        "for index in (rank, rank + world_size):",
        "for index in (2 * rank, 2 * rank + 1):  # neighbouring stages on one rank",
    )
)


@EXERCISE.check(
    "pipeline_schedule",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("interleaved_schedule_matches_one_process", "interleaved_schedule_in_three_rounds"),
)
def interleaved_schedule_three_ranks_uneven(g):
    """3 ranks, 6 stages, 6 microbatches of 12 samples, 11 layers split 2 + 2 + 2 + 2 + 2 + 1 (middle ranks
    receive and send both ways)."""
    widths = [6, 9, 7, 5, 8, 6, 4]
    per_rank, expected = run_schedule(g, 3, widths, 12, 6)
    check_step(g, per_rank, expected, widths, 6)
