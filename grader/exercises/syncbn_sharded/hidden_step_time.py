"""Hidden check of checks_step_time.py (instructor only): another model on 2 nodes of 4 devices, where the choice
changes: on a slow network tensor parallelism within the nodes (dp=2, tp=4), on a fast one with less memory FSDP
over all 8 (in both, faster layouts do not fit)."""

from __future__ import annotations

from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checks_step_time import (
    RTOL,
    TIMES,
    layout,
    run_layouts,
    verify,
    verify_choices,
)
from grader.exercises.syncbn_sharded.hidden_step_time_model import expected

# The line of the solution a student typically writes otherwise: the ring all-reduce without its 2(k−1)/k factor
# (make selfcheck grades it; tests/exercises/test_03_step_time.py names it).
TYPICAL_MISTAKE = (
    'return 2 * (k - 1) / k * nbytes * link["beta"] + 2 * (k - 1) * link["alpha"]',
    'return nbytes * link["beta"] + 2 * (k - 1) * link["alpha"]',
)
EXERCISE.typical_mistakes.append(TYPICAL_MISTAKE)

MODEL = {"params": 3e9, "layers": 24, "hidden": 3072, "activation_bytes": 3 * 2**16}
BATCH = {"tokens": 2**19, "micro_batches": 16}
CLUSTER = {
    "gpus_per_node": 4,
    "nodes": 2,
    "flops": 150e12,
    "memory": 40e9,
    "intra": {"alpha": 8e-6, "beta": 1 / 150e9},
    "inter": {"alpha": 5e-5, "beta": 1 / 5e9},
}
LAYOUTS = [
    layout(8, 1, 1),
    layout(8, 1, 1, sharded=True),
    layout(2, 4, 1),
    layout(1, 4, 2),
    layout(4, 1, 2),
    layout(1, 8, 1),
    layout(2, 2, 2, sharded=True),
]
SCENARIOS = [
    (MODEL, CLUSTER, BATCH, LAYOUTS),
    (MODEL, dict(CLUSTER, inter={"alpha": 5e-5, "beta": 1 / 50e9}, memory=30e9), BATCH, LAYOUTS),
]


@EXERCISE.check(
    "plan_layout",
    points=1,
    hidden=True,
    depends_on=(
        "layout_times_follow_the_alpha_beta_model",
        "layout_memory_follows_the_plan",
        "layout_choice_is_the_fastest_that_fits",
    ),
)
def layout_plan_on_another_cluster(g):
    """Another model on 2 nodes of 4: the times, the memory and the choice, on a slow and a fast network."""
    results = run_layouts(g, SCENARIOS)
    model = expected(SCENARIOS, RTOL)  # computed in the parent, after the runs
    verify(results, SCENARIOS, (*TIMES, "memory"), model)
    verify_choices(results, SCENARIOS, model)
