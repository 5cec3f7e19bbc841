"""Hidden checks of checks_sharded_checkpoint.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checks_sharded_checkpoint import (
    _run_checkpoint,
    _verify_checkpoint_written,
    _verify_resume,
)  # noqa: F401


@EXERCISE.check(
    "save_sharded_checkpoint",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("checkpoint_complete_and_written_once", "resume_matches_uninterrupted_run"),
)
def checkpoint_with_three_ranks(g):
    """Three ranks: written once, complete, and resumes exactly."""
    results = _run_checkpoint(g, resume=True, world_size=3, held_write=True)
    _verify_checkpoint_written(results)
    _verify_resume(g, results)
