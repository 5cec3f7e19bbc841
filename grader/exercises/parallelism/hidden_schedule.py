"""Hidden checks of checks_schedule.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.parallelism.checks_schedule import check_step, run_schedule
from grader.exercises.parallelism import EXERCISE


# make selfcheck grades the solution with this line replaced: its task must score less than full marks.
EXERCISE.typical_mistake = (
    '{"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]',
    "ScheduleGPipe  # whatever schedule says",
)


@EXERCISE.check(
    "pipeline_schedule",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("schedule_1f1b_matches_one_process_in_its_order", "schedule_gpipe_matches_one_process_in_its_order"),
)
def schedule_three_stages_uneven(g):
    """3 ranks, 1F1B, 6 microbatches of 12 samples, 5 layers split 2 + 2 + 1 (a middle stage receives and sends)."""
    widths = [6, 9, 7, 5]
    per_rank, expected = run_schedule(g, 3, widths, 12, 6, "1F1B")
    check_step(g, per_rank, expected, widths, 6, "1F1B")
