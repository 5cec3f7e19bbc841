"""03_syncbn_sharded: plan_memory (which strategy fits a per-rank memory budget).

The ranks call the student's plan_memory on the model built on the meta device, once per budget, for two cases:
fp32 parameters with Adam, and bf16 parameters with fp32 master copies and moments (memory_plan.py,
master_weights.py). Then they measure, with the grader's own code, the bytes a rank holds after one step under DDP
(default buckets), ZeRO-1 and FSDP2 in each case, and the activations of one forward. Every check judges that one
launch (the same run, shared by the runner). The parent first compares the measurement with the formulas: a
measurement the answers disturbed pays nothing. Each rule of the task text and its check:

| plan_memory(model, world_size, activation_bytes, budget_bytes)   | verified by                               |
|------------------------------------------------------------------|-------------------------------------------|
| per-rank bytes of fp32 parameters + gradients + DDP's buckets +  | memory_estimates_match_measured (each     |
| Adam state + activations, for "ddp", "zero1", "fsdp2", within 5% | strategy, each rank; the usual mistakes   |
| of measured                                                      | named)                                    |
| the same for bf16 parameters, gradients and buckets with fp32    | memory_estimates_mixed_precision          |
| master copies and moments                                        |                                           |
| "choice": the first of ddp, zero1, fsdp2 whose measured bytes    | memory_choice_fits_budget (four budgets   |
| fit the budget, None when none does                              | per case: each strategy's, and one        |
|                                                                  | nothing fits)                             |
"""

from __future__ import annotations

import functools
import numbers
import random

from grader.checks import CheckFailed
from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.memory_plan import (
    NAMES,
    STRATEGIES,
    expected_activations,
    expected_state,
    measure_activations,
    measure_state,
    bytes_per_parameter,
    measuring_group,
    mixed_precision,
    parameter_count,
    planning_net,
)
from grader.exercises.syncbn_sharded.memory_mistakes import mistakes

ESTIMATE_RTOL = 0.05  # of the measured bytes: Adam's step counters and rounding are far below it
MEASURE_RTOL = 0.01  # the grader's measurement against its formulas
SPEC = {"width": 48, "layers": 6, "rows": 64, "seed": 3}
CASES = (SPEC, mixed_precision(SPEC))  # fp32 Adam; bf16 parameters with fp32 master copies and moments


def totals(spec: dict, world: int) -> dict[str, int]:
    activations = expected_activations(spec)
    return {k: v + activations for k, v in expected_state(spec, world).items()}


def budgets(spec: dict, world: int) -> list[int]:
    """Four budgets far from every boundary: FSDP2's alone fits, all fit, nothing fits, ZeRO-1's fits first.
    Each lies at a point of its gap drawn once per process, so that the budgets a rank holds do not tell the
    totals (fixed fractions would: three budgets, three unknowns)."""
    return list(_budgets(tuple(sorted(spec.items())), world))


@functools.lru_cache(maxsize=None)  # the same budgets for both checks of a grading: one shared launch
def _budgets(spec_items: tuple, world: int) -> tuple[int, ...]:
    t, draw = totals(dict(spec_items), world), random.SystemRandom().uniform
    return (
        int(t["fsdp2"] + draw(0.3, 0.7) * (t["zero1"] - t["fsdp2"])),
        int(t["ddp"] * draw(1.1, 1.25)),
        int(t["fsdp2"] * draw(0.75, 0.9)),
        int(t["zero1"] + draw(0.3, 0.7) * (t["ddp"] - t["zero1"])),
    )


def _answer(value) -> dict:
    """Plain data from what the student returned (nothing of its own kind leaves the rank)."""
    if not isinstance(value, dict):
        return {"type": type(value).__name__}
    out = {}
    for key in STRATEGIES:
        v = value.get(key)
        out[key] = float(v) if isinstance(v, numbers.Real) and not isinstance(v, bool) else type(v).__name__
    choice = value.get("choice")
    if type(choice) is str:  # a plain str: a subclass could compare equal to anything
        out["choice"] = choice if choice in STRATEGIES else repr(choice)[:40]
    else:
        out["choice"] = None if choice is None else f"a value of type {type(choice).__name__}"
    return out


def _in_rank_plan(ctx, student, specs: list, budget_lists: list):
    """The student's plans first (every case, every budget), then the grader's measurement: nothing it compares with
    exists while the student's code runs (a walk up the frames finds the task's inputs only)."""
    import torch

    plan = student.task("plan_memory")
    cases = []
    for spec, budget_list in zip(specs, budget_lists):
        activations = measure_activations(ctx, spec)  # an input of the task (activation_bytes), not an expectation
        answers = []
        for budget in budget_list:
            with torch.device("meta"):
                model = planning_net(spec)
            answers.append(_answer(plan(model, ctx.world_size, activations, budget)))
        cases.append({"activations": activations, "answers": answers})
    group = measuring_group()  # on the CPU whatever the plan: bytes do not depend on the device
    for spec, case in zip(specs, cases):
        case["measured"] = {kind: measure_state(ctx, spec, kind, group) for kind in STRATEGIES}
    return cases


def _well_formed(got, n_budgets: int) -> bool:
    ok = isinstance(got, dict) and isinstance(got.get("measured"), dict) and isinstance(got.get("answers"), list)
    ok = ok and all(isinstance(got["measured"].get(k), int) for k in STRATEGIES)
    ok = ok and isinstance(got.get("activations"), int) and len(got["answers"]) == n_budgets
    return ok and all(
        isinstance(a, dict) and (set(a) == {"type"} or set(a) == {*STRATEGIES, "choice"}) for a in got["answers"]
    )


def run_plan(g, specs: tuple = CASES) -> list[list[dict]]:
    """One launch for every case: per case (in the order of `specs`), each rank's measurement and answers."""
    world = g.world_size
    results = g.run(_in_rank_plan, list(specs), [budgets(spec, world) for spec in specs])
    by_case = []
    for index, spec in enumerate(specs):
        state, activations = expected_state(spec, world), expected_activations(spec)
        case = [got[index] if isinstance(got, list) and len(got) == len(specs) else None for got in results]
        for rank, got in enumerate(case):
            if not _well_formed(got, len(budgets(spec, world))):
                raise CheckFailed(
                    f"rank {rank} did not send back the grader's measurement: the grader's code in the ranks was "
                    "changed"
                )
            measured = dict(got["measured"], activations=got["activations"])
            for kind, want in dict(state, activations=activations).items():
                if abs(measured[kind] - want) > MEASURE_RTOL * want:
                    raise CheckFailed(
                        f"rank {rank}: the grader measured {measured[kind]} bytes for {NAMES.get(kind, kind)}, "
                        f"where its model of the run predicts {want}: something in your answers changed how torch "
                        "keeps memory (a patched optimizer, wrapper or allocation). Define plan_memory only, and "
                        "leave torch as it is"
                    )
        by_case.append(case)
    return by_case


def _likely(kind: str, estimate: float, psi: int, p: int, world: int, act: int, state: int) -> str:
    """The message of the typical mistake nearest to the estimate, if one is within the tolerance."""
    near = [
        (abs(estimate - wrong) / max(wrong, 1), message)
        for wrong, message in mistakes(kind, psi, p, world, act, state)
        if abs(estimate - wrong) <= ESTIMATE_RTOL * max(wrong, 1)
    ]
    return min(near)[1] if near else ""


def verify_estimates(results: list, spec: dict) -> None:
    world, psi = len(results), parameter_count(spec)
    for rank, got in enumerate(results):
        answer = got["answers"][0]
        if "type" in answer:
            raise CheckFailed(
                f"rank {rank}: plan_memory returned a value of type {answer['type']}, not a dict with the keys "
                "'ddp', 'zero1', 'fsdp2' and 'choice'"
            )
        for kind in STRATEGIES:
            estimate = answer[kind]
            if isinstance(estimate, str):
                raise CheckFailed(f"rank {rank}: plan_memory's '{kind}' is a {estimate}, not a number of bytes")
            state, act = got["measured"][kind], got["activations"]
            measured = state + act
            if abs(estimate - measured) <= ESTIMATE_RTOL * measured:
                continue
            likely = _likely(kind, estimate, psi, bytes_per_parameter(spec)[0], world, act, state)
            raise CheckFailed(
                f"rank {rank}: {NAMES[kind]} with {spec.get('precision', 'fp32')} parameters: you estimated "
                f"{estimate:.0f} bytes per rank, the grader measured {measured} ({state} of parameters, gradients, "
                f"buckets and optimizer state after a step, {act} of activations; Ψ = {psi} parameters, {world} "
                f"ranks; within {ESTIMATE_RTOL:.0%} passes)" + (f": {likely}" if likely else "")
            )


def expected_choice(measured: dict, budget: int):
    return next((kind for kind in STRATEGIES if measured[kind] <= budget), None)


def verify_choices(results: list, spec: dict) -> None:
    budget_list = budgets(spec, len(results))
    for rank, got in enumerate(results):
        measured = {k: got["measured"][k] + got["activations"] for k in STRATEGIES}
        need = ", ".join(f"{NAMES[k]} {measured[k]}" for k in STRATEGIES)
        for budget, answer in zip(budget_list, got["answers"]):
            if "type" in answer:
                raise CheckFailed(f"rank {rank}: plan_memory returned a value of type {answer['type']}, not a dict")
            want, choice = expected_choice(measured, budget), answer["choice"]
            if choice == want:
                continue
            if choice not in STRATEGIES and choice is not None:
                why = f"'choice' is {choice}: return 'ddp', 'zero1', 'fsdp2' or None"
            elif want is None:
                why = "nothing fits: return None (the job needs more ranks, or less memory per rank)"
            elif choice is None:
                why = f"{NAMES[want]} fits: None is for a budget nothing fits"
            elif measured[choice] > budget:
                why = f"{NAMES[choice]} does not fit: it needs {measured[choice]} bytes per rank"
            else:
                why = (
                    f"{NAMES[want]} fits too, and communicates less: pick the first that fits in the order DDP, "
                    "ZeRO-1, FSDP2 (the most sharded strategy is not always the best: it all-gathers the "
                    "parameters in forward and again in backward)"
                )
            raise CheckFailed(
                f"rank {rank}, {spec.get('precision', 'fp32')} parameters: for a budget of {budget} bytes per rank "
                f"you chose {choice!r}, expected {want!r} "
                f"(measured per rank: {need}): {why}"
            )


@EXERCISE.check("plan_memory", points=2)
def memory_estimates_match_measured(g):
    """fp32 parameters and Adam: each strategy's estimate within 5% of the bytes measured on a real run (2 ranks,
    DDP's default buckets)."""
    verify_estimates(run_plan(g)[0], CASES[0])


@EXERCISE.check("plan_memory", points=2, depends_on=("memory_estimates_match_measured",))
def memory_estimates_mixed_precision(g):
    """bf16 parameters, fp32 master copies and moments: each estimate within 5% of the bytes measured (2 ranks)."""
    verify_estimates(run_plan(g)[1], CASES[1])


@EXERCISE.check("plan_memory", points=2, depends_on=("memory_estimates_match_measured",))
def memory_choice_fits_budget(g):
    """For four budgets per precision, the strategy cheapest in communication whose measured bytes fit, or None."""
    for results, spec in zip(run_plan(g), CASES):
        verify_choices(results, spec)
