"""Hidden checks of checks_checkpointing.py (instructor only: a student build leaves this module out)."""
from __future__ import annotations

from grader.exercises.syncbn_sharded.checks_checkpointing import (
    TASK,
    run_checkpointing,
    verify_gradients,
    verify_memory_drop,
    verify_recomputes,
)
from grader.exercises.syncbn_sharded.exercise import check


@check(TASK, points=1, hidden=True, world_size=3)
def checkpointing_with_three_ranks(g):
    """Three ranks, another block count and width: gradients, one recompute per block, activations freed."""
    results = run_checkpointing(g, 3)
    verify_gradients(g, results, 3)
    verify_recomputes(results)
    verify_memory_drop(results)
