"""Hidden check of checks_memory_plan.py (instructor only): three ranks, another model, batch and budgets."""

from __future__ import annotations

from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checks_memory_plan import run_plan, verify_choices, verify_estimates
from grader.exercises.syncbn_sharded.memory_plan import mixed_precision

# Nine layers of 36: ZeRO-1 gives each of 3 ranks three weights and three biases, FSDP2 12 rows of each.
SPEC = {"width": 36, "layers": 9, "rows": 40, "seed": 8}
CASES = (SPEC, mixed_precision(SPEC))


# make selfcheck grades the solution with this line replaced: its task must score less than full marks.
EXERCISE.typical_mistakes.append(
    (
        '"zero1": replicated + optimizer / world_size',
        '"zero1": replicated + optimizer',
    )
)


@EXERCISE.check(
    "plan_memory",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("memory_estimates_match_measured", "memory_choice_fits_budget"),
)
def memory_plan_with_three_ranks(g):
    """Three ranks, another model, fp32 and bf16: the estimates within 5% of the measured bytes, and the choices."""
    for results, spec in zip(run_plan(g, CASES), CASES):
        verify_estimates(results, spec)
        verify_choices(results, spec)
