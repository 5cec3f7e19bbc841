"""03_syncbn_sharded: plan_memory (which strategy fits a per-rank memory budget).

The ranks measure, with the grader's own code, the bytes a rank holds after one Adam step under DDP, ZeRO-1 and
FSDP2, and the activations of one forward (memory_plan.py); then they call the student's plan_memory on the same
model built on the meta device, once per budget. Both checks judge that one launch (the same run, shared by the
runner). The parent first compares the measurement with the formulas: a measurement the answers disturbed pays
nothing. Each rule of the task text and its check:

| plan_memory(model, world_size, activation_bytes, budget_bytes)   | verified by                               |
|------------------------------------------------------------------|-------------------------------------------|
| per-rank bytes of fp32 parameters + gradients + Adam state +     | memory_estimates_match_measured (each     |
| activations, for "ddp", "zero1", "fsdp2", within 5% of measured  | strategy, each rank; the usual mistakes   |
|                                                                  | named)                                    |
| "choice": the first of ddp, zero1, fsdp2 whose measured bytes    | memory_choice_fits_budget (four budgets:  |
| fit the budget, None when none does                              | each strategy's, and one nothing fits)    |
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
    measuring_group,
    parameter_count,
    planning_net,
)

ESTIMATE_RTOL = 0.05  # of the measured bytes: Adam's step counters and rounding are far below it
MEASURE_RTOL = 0.01  # the grader's measurement against its formulas
SPEC = {"width": 48, "layers": 6, "rows": 64, "seed": 3}


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


def _in_rank_plan(ctx, student, spec: dict, budget_list: list):
    """The student's plans first, then the grader's measurement: nothing it compares with exists while the
    student's code runs (a walk up the frames finds the task's inputs only)."""
    import torch

    activations = measure_activations(ctx, spec)  # an input of the task (activation_bytes), not an expectation
    plan = student.task("plan_memory")
    answers = []
    for budget in budget_list:
        with torch.device("meta"):
            model = planning_net(spec)
        answers.append(_answer(plan(model, ctx.world_size, activations, budget)))
    group = measuring_group()  # on the CPU whatever the plan: bytes do not depend on the device
    measured = {kind: measure_state(ctx, spec, kind, group) for kind in STRATEGIES}
    return {"measured": measured, "activations": activations, "answers": answers}


def run_plan(g, spec: dict = SPEC) -> list:
    results = g.run(_in_rank_plan, spec, budgets(spec, g.world_size))
    world = len(results)
    state, activations = expected_state(spec, world), expected_activations(spec)
    for rank, got in enumerate(results):
        ok = isinstance(got, dict) and isinstance(got.get("measured"), dict) and isinstance(got.get("answers"), list)
        ok = ok and all(isinstance(got["measured"].get(k), int) for k in STRATEGIES)
        ok = ok and isinstance(got.get("activations"), int) and len(got["answers"]) == len(budgets(spec, world))
        ok = ok and all(
            isinstance(a, dict) and (set(a) == {"type"} or set(a) == {*STRATEGIES, "choice"}) for a in got["answers"]
        )
        if not ok:
            raise CheckFailed(
                f"rank {rank} did not send back the grader's measurement: the grader's code in the ranks was changed"
            )
        measured = dict(got["measured"], activations=got["activations"])
        for kind, want in dict(state, activations=activations).items():
            if abs(measured[kind] - want) > MEASURE_RTOL * want:
                raise CheckFailed(
                    f"rank {rank}: the grader measured {measured[kind]} bytes for {NAMES.get(kind, kind)}, where "
                    f"its model of the run predicts {want}: something in your answers changed how torch keeps "
                    "memory (a patched optimizer, wrapper or allocation). Define plan_memory only, and leave "
                    "torch as it is"
                )
    return results


def _mistakes(kind: str, psi: int, world: int, act: int, state: int) -> list[tuple[float, str]]:
    """(what a typical mistake estimates, what to say) for one strategy."""
    full, shard = 4 * psi, 4 * psi / world
    out = _activation_and_unit_mistakes(world, act, state)
    if kind in ("ddp", "zero1"):
        out.append(
            (
                state + full + act,
                "you count DDP's buckets beside the gradients: the runs use gradient_as_bucket_view=True, so the "
                "gradients are views into the buckets (4 bytes per parameter, not 8)",
            )
        )
    by_kind = {"ddp": _ddp_mistakes, "zero1": _zero1_mistakes, "fsdp2": _fsdp2_mistakes}
    return out + by_kind[kind](full, shard, act)


def _activation_and_unit_mistakes(world: int, act: int, state: int) -> list[tuple[float, str]]:
    return [
        (
            state,
            "the activations are left out: add activation_bytes (they are per rank and sharded by none of the "
            "three strategies)",
        ),
        (
            state + act / world,
            "the activations are divided by the world size: each rank keeps those of its own "
            "batch, whatever the strategy",
        ),
        ((state + act) / 4, "you seem to count elements, not bytes: an fp32 value takes 4 bytes"),
        (
            state / 4 + act,
            "you seem to count the parameters, gradients and Adam's moments as elements: an fp32 value takes 4 bytes",
        ),
    ]


def _ddp_mistakes(full: float, shard: float, act: int) -> list[tuple[float, str]]:
    return [
        (
            3 * full + act,
            "16 bytes per parameter under DDP, you count 12: the gradients (4 bytes per "
            "parameter, on every rank) are the usual part to forget",
        ),
        (
            2 * full + act,
            "Adam keeps two fp32 moments per parameter (8 bytes), beside the parameter and its gradient",
        ),
    ]


def _zero1_mistakes(full: float, shard: float, act: int) -> list[tuple[float, str]]:
    return [
        (
            full + 2 * shard + act,
            "ZeRO-1 without the gradients: every rank still holds a full gradient (4 "
            "bytes per parameter), as under DDP",
        ),
        (  # parameters or gradients sharded: the same number
            shard + full + 2 * shard + act,
            "ZeRO-1 shards only the optimizer state: every rank keeps all the parameters and all the "
            "gradients, as under DDP (sharding the gradients too is ZeRO-2); only Adam's moments are split, "
            "8Ψ/N",
        ),
        (
            4 * shard + act,
            "ZeRO-1 shards only the optimizer state: every rank keeps all the parameters (and "
            "gradients) as under DDP; what you estimated is FSDP2's",
        ),
        (
            4 * full + act,
            "ZeRO-1's optimizer state is not divided by the world size: each rank keeps Adam's "
            "moments of 1/N of the parameters",
        ),
    ]


def _fsdp2_mistakes(full: float, shard: float, act: int) -> list[tuple[float, str]]:
    return [
        (
            4 * full + act,
            "FSDP2's estimate is not divided by the world size: each rank keeps 1/N of the "
            "parameters, of the gradients and of Adam's moments",
        ),
        (3 * shard + act, "FSDP2 without the gradients: each rank keeps its shard of the gradients too"),
        (
            full + 3 * shard + act,
            "FSDP2 shards the parameters too: between steps each rank keeps only its 1/N of them",
        ),
    ]


def _likely(kind: str, estimate: float, psi: int, world: int, act: int, state: int) -> str:
    """The message of the typical mistake nearest to the estimate, if one is within the tolerance."""
    near = [
        (abs(estimate - wrong) / max(wrong, 1), message)
        for wrong, message in _mistakes(kind, psi, world, act, state)
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
            likely = _likely(kind, estimate, psi, world, act, state)
            raise CheckFailed(
                f"rank {rank}: {NAMES[kind]}: you estimated {estimate:.0f} bytes per rank, the grader measured "
                f"{measured} ({state} of parameters, gradients and Adam state after a step, {act} of activations; "
                f"Ψ = {psi} parameters, {world} ranks; within {ESTIMATE_RTOL:.0%} passes)"
                + (f": {likely}" if likely else "")
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
                f"rank {rank}: for a budget of {budget} bytes per rank you chose {choice!r}, expected {want!r} "
                f"(measured per rank: {need}): {why}"
            )


@EXERCISE.check("plan_memory", points=2)
def memory_estimates_match_measured(g):
    """Each strategy's estimate within 5% of the bytes measured on a real run (2 ranks, Adam, fp32)."""
    verify_estimates(run_plan(g), SPEC)


@EXERCISE.check("plan_memory", points=2, depends_on=("memory_estimates_match_measured",))
def memory_choice_fits_budget(g):
    """For four budgets, the strategy cheapest in communication whose measured bytes fit, or None."""
    results = run_plan(g)
    verify_choices(results, SPEC)
