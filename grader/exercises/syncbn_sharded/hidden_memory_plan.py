"""Hidden check of checks_memory_plan.py (instructor only): three ranks, another model, batch and budgets."""

from __future__ import annotations

from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checks_memory_plan import run_plan, verify_choices, verify_estimates

# Nine layers of 36: ZeRO-1 gives each of 3 ranks three weights and three biases, FSDP2 12 rows of each.
SPEC = {"width": 36, "layers": 9, "rows": 40, "seed": 8}


# make selfcheck grades the solution with this line replaced: its task must score less than full marks.
EXERCISE.typical_mistake = ('"zero1": params + grads + adam // world_size', '"zero1": params + grads + adam')


@EXERCISE.check(
    "plan_memory",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("memory_estimates_match_measured", "memory_choice_fits_budget"),
)
def memory_plan_with_three_ranks(g):
    """Three ranks, another model: the estimates within 5% of the measured bytes, and the four choices."""
    results = run_plan(g, SPEC)
    verify_estimates(results, SPEC)
    verify_choices(results, SPEC)
