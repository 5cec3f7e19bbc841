"""03_syncbn_sharded: plan_layout (the step time and MFU of (dp, tp, pp) layouts, and the fastest that fits).

Pure arithmetic, graded through the ranks like any task: each rank calls the student's plan_layout on the
scenarios below and sends back plain numbers; the parent compares them, after the runs, with the numbers of the
task's α-β model stored in step_time_expected.py (plain data: the model itself is the answer, so it lives in
hidden_step_time_model.py, which the student build leaves out), and names a mistake whose stored numbers match
(step_time_mistakes.py). The three checks judge the same launch (the runner shares it). Each rule of the task
text and its check:

| plan_layout(model, cluster, batch, layouts)                       | verified by                               |
|-------------------------------------------------------------------|-------------------------------------------|
| per layout: compute, comm, step (s), mfu, as the text's α-β model | layout_times_follow_the_alpha_beta_model  |
| per layout: memory per device (task 14's 16 bytes per parameter   | layout_memory_follows_the_plan            |
| held, plus the activations in flight)                             |                                           |
| "choice": the index of a fastest layout that fits, None if none   | layout_choice_is_the_fastest_that_fits    |
"""

from __future__ import annotations

import copy
import numbers

from grader.checks import CheckFailed
from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.step_time_expected import EXPECTED
from grader.exercises.syncbn_sharded.step_time_mistakes import MISTAKES

RTOL = 1e-6  # relative: the model is exact arithmetic, only the order of operations differs
TIMES = ("compute", "comm", "step", "mfu")
QUANTITIES = (*TIMES, "memory")


def layout(dp: int, tp: int, pp: int, sharded: bool = False) -> dict:
    return {"dp": dp, "tp": tp, "pp": pp, "sharded": sharded}


MODEL = {"params": 8e9, "layers": 32, "hidden": 4096, "activation_bytes": 2**17}
BATCH = {"tokens": 2**20, "micro_batches": 8}
NVLINK = {"alpha": 5e-6, "beta": 1 / 300e9}
CLUSTER = {"gpus_per_node": 8, "nodes": 4, "flops": 400e12, "memory": 80e9, "intra": NVLINK}
LAYOUTS = [
    layout(32, 1, 1),
    layout(32, 1, 1, sharded=True),
    layout(4, 8, 1),
    layout(1, 8, 4),
    layout(8, 1, 4, sharded=True),
    layout(2, 16, 1),
    layout(2, 4, 4),
    layout(8, 4, 1),
]
# Three clusters of 4 nodes of 8: a slow network (TP within the nodes wins), a fast one (FSDP wins, and plain DP,
# faster still, does not fit), and one with too little memory for any layout.
SCENARIOS = [
    (MODEL, dict(CLUSTER, inter={"alpha": 2e-5, "beta": 1 / 25e9}), BATCH, LAYOUTS),
    (MODEL, dict(CLUSTER, inter={"alpha": 2e-5, "beta": 1 / 100e9}), BATCH, LAYOUTS),
    (MODEL, dict(CLUSTER, inter={"alpha": 2e-5, "beta": 1 / 100e9}, memory=16e9), BATCH, LAYOUTS),
]


def _number(v):
    return float(v) if isinstance(v, numbers.Real) and not isinstance(v, bool) else f"a {type(v).__name__}"


def _answer(value, count: int) -> dict:
    """Plain data from what the student returned (nothing of its own kind leaves the rank)."""
    if not isinstance(value, dict):
        return {"error": f"plan_layout returned a value of type {type(value).__name__}, not a dict"}
    plans = value.get("plans")
    if not isinstance(plans, (list, tuple)) or len(plans) != count:
        return {"error": f"'plans' must be a list of {count} dicts, one per layout in the order given"}
    if not all(isinstance(p, dict) for p in plans):
        return {"error": "each entry of 'plans' must be a dict"}
    choice = value.get("choice")
    if isinstance(choice, numbers.Integral) and not isinstance(choice, bool):
        choice = int(choice)
    elif choice is not None:
        choice = f"a value of type {type(choice).__name__}"
    return {"plans": [{q: _number(p.get(q)) for q in QUANTITIES} for p in plans], "choice": choice}


def _in_rank_layouts(ctx, student, scenarios: list):
    """The student's answers only: the model they are compared with is computed in the parent, afterwards."""
    plan = student.task("plan_layout")
    return [_answer(plan(*copy.deepcopy(s)), len(s[3])) for s in scenarios]


def run_layouts(g, scenarios: list = SCENARIOS) -> list:
    """Every rank's answers, checked for shape: one list of per-scenario answers per rank."""
    results = g.run(_in_rank_layouts, scenarios, init_group=False)
    for rank, got in enumerate(results):
        if not isinstance(got, list) or len(got) != len(scenarios) or not all(isinstance(a, dict) for a in got):
            raise CheckFailed(f"rank {rank} did not send back its answers: the grader's code in the ranks was changed")
        for answer in got:
            if "error" in answer:
                raise CheckFailed(f"rank {rank}: {answer['error']}")
    return results


def describe(lay: dict) -> str:
    return f"(dp={lay['dp']}, tp={lay['tp']}, pp={lay['pp']}{', sharded' if lay['sharded'] else ''})"


def _likely(mistakes: dict, index: int, quantity: str, value: float) -> str:
    """The message of a named mistake whose stored number for this layout and quantity is the student's."""
    for name, message in MISTAKES.items():
        wrong = mistakes.get(name, [{}] * (index + 1))[index].get(quantity)
        if wrong is not None and abs(value - wrong) <= RTOL * abs(wrong):
            return message
    if quantity == "step":
        return "the step is compute + comm: the model assumes no overlap"
    if quantity == "mfu":
        return "MFU is 6·N·T / (step · G · peak FLOP/s): the useful FLOPs over what the devices could do in a step"
    return ""


def verify(results: list, scenarios: list, quantities: tuple, expected: list = EXPECTED) -> None:
    """expected: per scenario, the model's numbers (step_time_expected.py's shape)."""
    for rank, answers in enumerate(results):
        for number, (scenario, answer, stored) in enumerate(zip(scenarios, answers, expected, strict=True)):
            for index, (lay, got) in enumerate(zip(scenario[3], answer["plans"])):
                want = stored["plans"][index]
                for q in quantities:
                    if isinstance(got[q], str):
                        raise CheckFailed(f"rank {rank}: '{q}' of layout {describe(lay)} is {got[q]}, not a number")
                    if abs(got[q] - want[q]) <= RTOL * abs(want[q]):
                        continue
                    likely = _likely(stored["mistakes"], index, q, got[q])
                    raise CheckFailed(
                        f"rank {rank}, scenario {number + 1}, layout {describe(lay)}: your '{q}' is {got[q]:.6g}, "
                        f"the α-β model of the task gives {want[q]:.6g}" + (f": {likely}" if likely else "")
                    )


def verify_choices(results: list, scenarios: list, expected: list = EXPECTED) -> None:
    for rank, answers in enumerate(results):
        for number, (scenario, answer, stored) in enumerate(zip(scenarios, answers, expected, strict=True)):
            _, cluster, _, lays = scenario
            plans, right, choice = stored["plans"], set(stored["right"]), answer["choice"]
            if choice in right or (choice is None and not right):
                continue
            raise CheckFailed(
                f"rank {rank}, scenario {number + 1}: you chose {choice!r}: "
                + _why(choice, right, plans, lays, cluster)
                + _own_numbers(choice, answer["plans"], cluster["memory"])
            )


def _own_numbers(choice, plans: list, memory: float) -> str:
    """A wrong choice that is the right one for the student's own numbers: the fault is in those numbers."""
    if any(isinstance(v, str) for p in plans for v in p.values()):
        return ""
    fits = [i for i, p in enumerate(plans) if p["memory"] <= memory]
    if choice != (min(fits, key=lambda i: plans[i]["step"]) if fits else None):
        return ""
    return " (your choice is the right one for your own numbers: those differ from the model's, see the other checks)"


def _why(choice, right: set, plans: list, lays: list, cluster: dict) -> str:
    best = min(right) if right else None
    if not isinstance(choice, int) and choice is not None:
        return f"'choice' is {choice}: return the index of a layout in the list given, or None"
    if choice is not None and not 0 <= choice < len(lays):
        return f"{choice} is not an index of the {len(lays)} layouts given"
    if best is None:
        return f"no layout fits in {cluster['memory']:.4g} bytes per device: return None"
    if choice is None:
        return f"layout {best} {describe(lays[best])} fits: None is for when none does"
    if plans[choice]["memory"] > cluster["memory"]:
        return (
            f"layout {choice} {describe(lays[choice])} needs {plans[choice]['memory']:.4g} bytes per device, more "
            f"than the {cluster['memory']:.4g} it has: the memory is ignored; the fastest that fits is {best}"
        )
    return (
        f"layout {best} {describe(lays[best])} fits too and takes {plans[best]['step']:.4g} s a step, against "
        f"{plans[choice]['step']:.4g} s for {describe(lays[choice])}: choose the fastest of those that fit"
    )


@EXERCISE.check("plan_layout", points=3)
def layout_times_follow_the_alpha_beta_model(g):
    """Per layout, the compute, communication and step times and the MFU of the task's α-β model (3 clusters)."""
    verify(run_layouts(g), SCENARIOS, TIMES)


@EXERCISE.check("plan_layout", points=1)
def layout_memory_follows_the_plan(g):
    """Per layout, the bytes per device: 16 per parameter held (sharded or not), plus the activations in flight."""
    verify(run_layouts(g), SCENARIOS, ("memory",))


@EXERCISE.check("plan_layout", points=2)
def layout_choice_is_the_fastest_that_fits(g):
    """The choice is a fastest layout that fits in memory (any of them on a tie), None when none fits."""
    verify_choices(run_layouts(g), SCENARIOS)
