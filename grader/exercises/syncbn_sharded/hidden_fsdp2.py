"""Hidden checks of checks_fsdp2.py and checks_fsdp2_state.py (instructor only): three ranks, another depth and
seed, so shards are uneven in other places (a 3-row head over 3 ranks, 16 rows as 6, 6, 4)."""
from __future__ import annotations

from grader.exercises.syncbn_sharded.checks_fsdp2 import (
    run_build, run_train, verify_accumulation, verify_build, verify_clipped_training, verify_units_and_precision)
from grader.exercises.syncbn_sharded.checks_fsdp2_state import _in_rank_export, verify_export
from grader.exercises.syncbn_sharded.exercise import check

DEPTH, SEED = 4, 5


@check("build_fsdp2_model", points=1, hidden=True, world_size=3)
def fsdp2_build_with_three_ranks(g):
    """Three ranks, four blocks: sharded from meta, initialized, one bf16 gather per unit, fp32 reduction."""
    results = run_build(g, DEPTH, SEED)
    verify_build(g, results, DEPTH, SEED)
    verify_units_and_precision(g, results, DEPTH, SEED)


@check("train_step_fsdp2", points=1, hidden=True, world_size=3)
def fsdp2_step_with_three_ranks(g):
    """Three ranks, four blocks: one sync per step, the global norm, clipped big-batch SGD."""
    results = run_train(g, DEPTH, SEED)
    verify_accumulation(results, DEPTH)
    verify_clipped_training(g, results, DEPTH, SEED)


@check("export_full_state", points=1, hidden=True, world_size=3)
def fsdp2_export_with_three_ranks(g):
    """Three ranks: rank 0 holds the full state, ranks 1 and 2 nothing."""
    verify_export(g, g.run(_in_rank_export, DEPTH, SEED), DEPTH, SEED)
