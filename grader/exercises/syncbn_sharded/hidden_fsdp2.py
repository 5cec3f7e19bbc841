"""Hidden checks of checks_fsdp2.py and checks_fsdp2_state.py (instructor only): three ranks, another depth and
seed, so shards are uneven in other places (a 3-row head over 3 ranks, 16 rows as 6, 6, 4); for build_fsdp2_model,
another tied model and budget."""

from __future__ import annotations

from grader.exercises.syncbn_sharded.checks_fsdp2 import run_train, verify_accumulation, verify_clipped_training
from grader.exercises.syncbn_sharded.checks_fsdp2_build import run_build, verify_build, verify_units_and_precision
from grader.exercises.syncbn_sharded.checks_fsdp2_state import _in_rank_export, verify_export
from grader.exercises.syncbn_sharded import EXERCISE

DEPTH, SEED = 4, 5
# Seven blocks of other widths, another vocabulary and budget: the fewest units are 4 runs (1, 2, 2, 2 blocks).
TIED_MODEL = {"widths": (21, 39, 15, 27, 12, 33, 21), "vocab": 48, "seed": 5, "budget": 3000}


@EXERCISE.check(
    "build_fsdp2_model",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("fsdp2_build_sharded_from_meta", "fsdp2_units_and_mixed_precision"),
)
def fsdp2_build_with_three_ranks(g):
    """Three ranks, seven blocks, another budget: sharded from meta, tied, initialized, the fewest units within
    the budget, bf16 gathers, fp32 reduction."""
    results = run_build(g, TIED_MODEL)
    verify_build(g, results, TIED_MODEL)
    verify_units_and_precision(g, results, TIED_MODEL)


@EXERCISE.check(
    "train_step_fsdp2",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("fsdp2_accumulation_syncs_once", "fsdp2_step_clips_global_norm"),
)
def fsdp2_step_with_three_ranks(g):
    """Three ranks, four blocks: one sync per step, the global norm, clipped big-batch SGD."""
    results = run_train(g, DEPTH, SEED)
    verify_accumulation(results, DEPTH)
    verify_clipped_training(g, results, DEPTH, SEED)


@EXERCISE.check(
    "export_full_state", points=1, hidden=True, world_size=3, depends_on=("fsdp2_export_full_state_on_rank0",)
)
def fsdp2_export_with_three_ranks(g):
    """Three ranks: rank 0 holds the full state, ranks 1 and 2 nothing."""
    verify_export(g, g.run(_in_rank_export, DEPTH, SEED), DEPTH, SEED)
