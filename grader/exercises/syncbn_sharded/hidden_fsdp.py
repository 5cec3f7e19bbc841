"""Hidden checks of checks_fsdp.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.syncbn_sharded.checks_fsdp import run_fsdp, verify_memory, verify_training
from grader.exercises.syncbn_sharded.fsdp_memory import run_memory, verify_freed
from grader.exercises.syncbn_sharded.fsdp_reference import numels
from grader.exercises.syncbn_sharded.fsdp_traffic import verify_traffic
from grader.exercises.syncbn_sharded import EXERCISE


@EXERCISE.check(
    "MiniFSDP",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=(
        "fsdp_matches_unsharded_training",
        "fsdp_bf16_compute_fp32_masters",
        "fsdp_parameters_are_sharded",
        "fsdp_traffic_is_gathers_and_reduce_scatters",
        "fsdp_gather_full_params_keys_and_shapes",
        "fsdp_frees_full_parameters",
    ),
)
def fsdp_with_three_ranks(g):
    """Three ranks, odd sizes (padding), fp32 and bf16: training, memory, traffic, full parameters freed."""
    results = run_fsdp(g, 5, True)
    verify_training(g, results, 5, True)
    verify_traffic(results, numels(5, True))
    verify_training(g, run_fsdp(g, 6, False, "bfloat16"), 6, False, bf16=True)
    verify_memory(run_fsdp(g, 5, True, None, "adamw"), 5, True)
    verify_freed(run_memory(g, 5), 3)
