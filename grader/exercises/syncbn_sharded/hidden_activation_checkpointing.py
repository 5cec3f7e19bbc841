"""Hidden checks of checks_activation_checkpointing.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.syncbn_sharded.checks_activation_checkpointing import (
    TASK,
    run_checkpointing,
    verify_gradients,
    verify_budget,
    verify_recomputes,
)
from grader.exercises.syncbn_sharded import EXERCISE


@EXERCISE.check(
    TASK,
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("checkpointing_keeps_gradients", "checkpointing_frees_activations"),
)
def checkpointing_with_three_ranks(g):
    """Three ranks, another model and budget: gradients, one recompute per checkpointed block, the budget met
    with the fewest recomputed."""
    results = run_checkpointing(g, 3)
    verify_gradients(g, results, 3)
    verify_recomputes(results)
    verify_budget(results)
