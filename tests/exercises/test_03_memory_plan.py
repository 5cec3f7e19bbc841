"""03_syncbn_sharded, plan_memory: the solution gets full marks (2 ranks and the hidden 3) from one launch per
variant; the untouched release and the laziest answers earn nothing; each typical mistake fails its check with a
message that names it; answers that change what the grader measures earn nothing."""

import os

import pytest

from grader.exercises import get_exercise
from grader.exercises.syncbn_sharded.checks_memory_plan import CASES, SPEC, budgets, totals
from grader.exercises.syncbn_sharded.memory_plan import expected_state, mixed_precision, parameter_count
from grader.runner import run_checks
from grader.submission import read_notebook
from tests.helpers import (
    assert_fails_its_check,
    graded_mutants_fixture,
    ROOT,
    assert_lazy_answer_earns_nothing,
    failed,
    failure_of,
    graded_counting_launches,
    replace_definition,
    solution_source,
)

EXERCISE, TASK = "03_syncbn_sharded", "plan_memory"
CHECKS = ["memory_estimates_match_measured", "memory_estimates_mixed_precision", "memory_choice_fits_budget"]
ESTIMATES, MIXED, CHOICE = CHECKS
WEIGHTS = (
    "    weights = sum(p.numel() * p.element_size() for p in model.parameters())  # in the parameters' own dtype\n"
)
OPTIMIZER = "    optimizer = sum(p.numel() * (8 + (4 if p.element_size() < 4 else 0)) for p in model.parameters())\n"
REPLICATED = (
    "    replicated = 3 * weights  # parameters, gradients and DDP's buckets beside them, in the parameters' dtype\n"
)
DDP = '        "ddp": replicated + optimizer + activation_bytes,\n'
ZERO1 = '        "zero1": replicated + optimizer / world_size + activation_bytes,\n'
FSDP2 = '        "fsdp2": (2 * weights + optimizer) / world_size + activation_bytes,\n'
PICK = '    return {**estimates, "choice": fits[0] if fits else None}\n'


def test_formulas_match_the_measured_ratios():
    # fp32: DDP 20Ψ (default buckets), ZeRO-1 12Ψ + 8Ψ/N, FSDP2 16Ψ/N; bf16 with fp32 master copies and moments:
    # 18Ψ, 6Ψ + 12Ψ/N, 16Ψ/N (and Adam's 4-byte step counters): the budgets lie between them
    psi = parameter_count(SPEC)
    for spec, per_psi in ((SPEC, (20, 16, 8)), (mixed_precision(SPEC), (18, 12, 8))):
        state = expected_state(spec, 2)
        assert (state["ddp"] // psi, state["zero1"] // psi, state["fsdp2"] // psi) == per_psi
        t = totals(spec, 2)
        low, all_fit, none_fit, mid = budgets(spec, 2)
        assert t["fsdp2"] <= low < t["zero1"] and t["ddp"] <= all_fit and none_fit < t["fsdp2"]
        assert t["zero1"] <= mid < t["ddp"]
    assert CASES == (SPEC, mixed_precision(SPEC))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("hidden", [False, True], ids=["public", "hidden_3_ranks"])
def test_solution_full_marks_from_one_launch(hidden):
    report, launched = graded_counting_launches(EXERCISE, solution_source(EXERCISE), TASK, hidden)
    assert report.checks and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert report.score == report.max_score
    assert launched == ["_in_rank_plan"], launched  # every public check judges the same launch


# Right answers written another way than the solution: floats, nbytes instead of numel * element_size, the
# formulas in units of Ψ with the dtype read once, the choice from a loop.
IN_UNITS_OF_PSI = """
import torch


def plan_memory(model, world_size, activation_bytes, budget_bytes):
    psi = sum(p.numel() for p in model.parameters())
    mixed = next(model.parameters()).dtype == torch.bfloat16
    p, s = (2, 12) if mixed else (4, 8)
    per_psi = {"ddp": 3 * p + s, "zero1": 3 * p + s / world_size, "fsdp2": (2 * p + s) / world_size}
    plan = {name: k * psi + activation_bytes for name, k in per_psi.items()}
    plan["choice"] = None
    for name in ("ddp", "zero1", "fsdp2"):
        if plan[name] <= budget_bytes:
            plan["choice"] = name
            break
    return plan
"""

FROM_NBYTES = """
import numpy as np


def plan_memory(model, world_size, activation_bytes, budget_bytes):
    weights = np.int64(sum(p.nbytes for p in model.parameters()))  # a numpy integer is a number too
    count = sum(p.numel() for p in model.parameters())
    master = 4 * count if weights < 4 * count else 0
    optimizer = 8 * count + master
    state = {"ddp": 3 * weights + optimizer, "zero1": 3 * weights + optimizer / world_size,
             "fsdp2": (2 * weights + optimizer) / world_size}
    estimates = {k: v + activation_bytes for k, v in state.items()}
    fitting = [k for k in ("ddp", "zero1", "fsdp2") if estimates[k] <= budget_bytes]
    return dict(estimates, choice=fitting[0] if fitting else None)
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("hidden", [False, True], ids=["public", "hidden_3_ranks"])
@pytest.mark.parametrize("code", [IN_UNITS_OF_PSI, FROM_NBYTES], ids=["units_of_psi", "from_nbytes"])
def test_right_answers_written_otherwise_get_full_marks(code, hidden):
    report, _ = graded_counting_launches(EXERCISE, code, TASK, hidden)
    assert report.checks and report.score == report.max_score, "\n".join(report.lines())


@pytest.mark.timeout(240)
def test_untouched_release_earns_nothing():
    notebook = os.path.join(ROOT, "exercises", EXERCISE, f"{EXERCISE}.ipynb")
    report = run_checks(get_exercise(EXERCISE), read_notebook(notebook), task=TASK, timeout=60)
    assert report.checks and report.score == 0, "\n".join(report.lines())


# (replacements in the solution, the check that must fail, a phrase of its message)
MUTANTS = {
    "forgot_gradients": ({REPLICATED: "    replicated = 2 * weights\n"}, ESTIMATES, "one copy of the gradients"),
    "buckets_as_views": (  # the lesson's gradient_as_bucket_view=True numbers, under DDP's defaults
        {REPLICATED: "    replicated = 2 * weights  # parameters and gradients; the buckets are their views\n"},
        ESTIMATES,
        "gradient_as_bucket_view=False",
    ),
    "zero1_shards_parameters": (
        {ZERO1: '        "zero1": weights / world_size + 2 * weights + optimizer / world_size + activation_bytes,\n'},
        ESTIMATES,
        "ZeRO-1 shards only the optimizer state",
    ),
    "zero1_as_fsdp2": (
        {ZERO1: '        "zero1": (2 * weights + optimizer) / world_size + activation_bytes,\n'},
        ESTIMATES,
        "what you estimated is FSDP2's",
    ),
    "fsdp2_not_divided": (
        {FSDP2: '        "fsdp2": 2 * weights + optimizer + activation_bytes,\n'},
        ESTIMATES,
        "FSDP2's estimate is not divided by the world size",
    ),
    "no_activations": (
        {
            DDP: '        "ddp": replicated + optimizer,\n',
            ZERO1: '        "zero1": replicated + optimizer / world_size,\n',
            FSDP2: '        "fsdp2": (2 * weights + optimizer) / world_size,\n',
        },
        ESTIMATES,
        "the activations are left out",
    ),
    "elements_not_bytes": (
        {
            WEIGHTS: "    weights = sum(p.numel() for p in model.parameters())\n",
            OPTIMIZER: "    optimizer = 2 * weights\n",
        },
        ESTIMATES,
        "elements, not bytes",
    ),
    "no_master_copy": (
        {OPTIMIZER: "    optimizer = sum(8 * p.numel() for p in model.parameters())\n"},
        MIXED,
        "an fp32 master copy (4) and Adam's two fp32 moments (8)",
    ),
    "master_copy_not_sharded_by_zero1": (
        {
            OPTIMIZER: OPTIMIZER
            + "    master = sum(4 * p.numel() for p in model.parameters() if p.element_size() < 4)\n",
            ZERO1: '        "zero1": replicated + master + (optimizer - master) / world_size + activation_bytes,\n',
        },
        MIXED,
        "the fp32 master copies with the moments",
    ),
    "everything_fp32": (
        {
            WEIGHTS: "    weights = sum(4 * p.numel() for p in model.parameters())\n",
            OPTIMIZER: "    optimizer = 2 * weights\n",
        },
        MIXED,
        "the parameters are bf16 here",
    ),
    "always_most_sharded": ({PICK: '    return {**estimates, "choice": "fsdp2"}\n'}, CHOICE, "communicates less"),
    "last_that_fits": (
        {PICK: '    return {**estimates, "choice": fits[-1] if fits else None}\n'},
        CHOICE,
        "the most sharded strategy is not always the best",
    ),
    "never_none": ({PICK: '    return {**estimates, "choice": fits[0] if fits else "fsdp2"}\n'}, CHOICE, "return None"),
}


graded = graded_mutants_fixture(EXERCISE, TASK, MUTANTS, CHECKS)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(MUTANTS))
def test_typical_mistake_fails_its_check(graded, name):
    assert_fails_its_check(graded[name], *MUTANTS[name][1:])


def test_estimates_right_choice_wrong_keeps_the_estimate_points(graded):
    assert set(failed(graded["always_most_sharded"])) == {CHOICE}


def test_a_mixed_precision_mistake_keeps_the_fp32_points(graded):
    # fp32 plans hold whatever the master copy's rule: only the bf16 estimates (and maybe their choices) fail
    for name in ("no_master_copy", "master_copy_not_sharded_by_zero1", "everything_fp32"):
        assert ESTIMATES not in failed(graded[name]), name


CONSTANTS = """
def plan_memory(model, world_size, activation_bytes, budget_bytes):
    return {"ddp": 10**6, "zero1": 10**6, "fsdp2": 10**6, "choice": "ddp"}
"""

# Patched at import: Adam keeps no state, so the run measures less than any strategy holds.
PATCHED_ADAM = """
import torch

torch.optim.Adam.step = lambda self, closure=None: None


def plan_memory(model, world_size, activation_bytes, budget_bytes):
    return {"ddp": 0, "zero1": 0, "fsdp2": 0, "choice": None}
"""

# A choice that claims to equal every strategy: only a plain str is taken as a strategy's name.
ANYTHING = """
class Anything(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def plan_memory(model, world_size, activation_bytes, budget_bytes):
    return {"ddp": 0, "zero1": 0, "fsdp2": 0, "choice": Anything("ddp")}
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "code, phrase",
    [
        (
            "def plan_memory(model, world_size, activation_bytes, budget_bytes):\n    return 0",
            "returned a value of type int",
        ),
        (CONSTANTS, "you estimated 1000000 bytes"),
        (PATCHED_ADAM, "changed how torch keeps memory"),
        (ANYTHING, "you estimated 0 bytes"),  # the choice's check points to the estimates' (one reason)
    ],
    ids=["zero", "constants", "patched_adam", "equal_to_anything"],
)
def test_laziest_answers_earn_nothing(code, phrase):
    assert_lazy_answer_earns_nothing(EXERCISE, TASK, code, phrase)


def test_a_choice_equal_to_anything_is_named_by_its_own_check():
    source = replace_definition(solution_source(EXERCISE), TASK, ANYTHING)
    assert "'choice' is a value of type Anything" in failure_of(EXERCISE, source, TASK, CHOICE, timeout=60)
