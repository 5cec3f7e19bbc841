"""Hidden checks of checks_state.py (instructor only: a student build leaves this module out)."""
from __future__ import annotations

from grader.exercises.ddp_basics.exercise import check
from grader.exercises.ddp_basics.checks_state import _compare_mini_to_ddp  # noqa: F401


@check("MiniDDP", points=1, hidden=True, world_size=3)
def mini_ddp_matches_ddp_three_ranks(g):
    _compare_mini_to_ddp(g, "tiny")
