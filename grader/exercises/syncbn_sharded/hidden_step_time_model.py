"""The α-β model of a training step that the layout task's text states, and the usual ways to get it wrong
(instructor only: it is the answer of plan_layout, so it never ships in the student build).

A layout is a dict (dp, tp, pp, sharded): dp data-parallel copies (sharding their state as FSDP does when
`sharded`), each split by tp (tensor parallel) and pp (pipeline stages). Every number follows the conventions the
task text states, so that a right answer is unique up to float rounding:

- compute: 6·N·T FLOPs per step, spread evenly over the G devices, times (m + pp − 1)/m: the pipeline bubble;
- collectives over k ranks of B bytes (fp32: 4 bytes a value): ring all-reduce 2(k−1)/k·B·β + 2(k−1)·α;
  all-gather and reduce-scatter (k−1)/k·B·β + (k−1)·α (B: the gathered size); one send α + B·β;
- ranks are numbered tp fastest, then pp, then dp (node = rank // gpus_per_node); a dimension pays the
  inter-node α and β when one of its groups spans two nodes;
- no overlap: step = compute + communication; MFU = 6·N·T / (step · G · peak FLOP/s);
- memory (task 14's formulas): 16 bytes of state per parameter a rank holds (divided by dp when sharded), plus the
  activations of min(pp, m) micro-batches of its layers, divided by tp.

A mistake (step_time_mistakes.MISTAKES) is the same model with one convention broken: a student's number that
matches one is told which. The public checks compare with numbers of this model stored as plain data
(step_time_expected.py, rewritten by `python -m grader.exercises.syncbn_sharded.hidden_step_time_model`);
tests/exercises/test_03_step_time.py keeps them equal; the hidden check calls expected() itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grader.exercises.syncbn_sharded.step_time_mistakes import MISTAKES

FP32 = 4
STATE_BYTES = 16  # fp32 parameter, gradient and Adam's two moments: task 14's DDP count per parameter
TP_ALL_REDUCES_PER_LAYER = 4  # Megatron: 2 in forward (attention, MLP), 2 in backward


def _link(layout: dict, dim: str, cluster: dict, mistake: str) -> dict:
    inter = spans_nodes(layout, dim, cluster["gpus_per_node"])
    if mistake == "tp_link_swapped" and dim == "tp":
        inter = not inter
    link = cluster["inter"] if inter else cluster["intra"]
    return dict(link, alpha=0.0) if mistake == "no_latency" else link


def spans_nodes(layout: dict, dim: str, gpus_per_node: int) -> bool:
    """Whether a group of `dim` (ranks that differ only in that coordinate) spans two nodes."""
    tp, pp, dp = layout["tp"], layout["pp"], layout["dp"]
    stride, size = {"tp": (1, tp), "pp": (tp, pp), "dp": (tp * pp, dp)}[dim]
    firsts = (r for r in range(tp * pp * dp) if r // stride % size == 0)  # each group's first rank
    return any(len({(r + i * stride) // gpus_per_node for i in range(size)}) > 1 for r in firsts)


def all_reduce(k: int, nbytes: float, link: dict, mistake: str = "") -> float:
    share = {"all_reduce_as_gather": (k - 1) / k, "all_reduce_no_factor": 1.0}.get(mistake, 2 * (k - 1) / k)
    return share * nbytes * link["beta"] + 2 * (k - 1) * link["alpha"] if k > 1 else 0.0


def gather(k: int, nbytes: float, link: dict) -> float:
    """An all-gather or a reduce-scatter; nbytes: the full (gathered) size."""
    return (k - 1) / k * nbytes * link["beta"] + (k - 1) * link["alpha"] if k > 1 else 0.0


def communication(model: dict, cluster: dict, batch: dict, layout: dict, mistake: str = "") -> float:
    dp, tp, pp, m = layout["dp"], layout["tp"], layout["pp"], batch["micro_batches"]
    unit = 1 if mistake == "elements_not_bytes" else FP32
    weights = unit * model["params"] / (tp * pp)  # the parameters (and gradients) one copy keeps on this rank
    link = _link(layout, "dp", cluster, mistake)
    if layout["sharded"] and mistake != "fsdp_as_all_reduce":
        data = 3 * gather(dp, weights, link)  # gather for forward, again for backward; reduce-scatter the gradients
    else:
        data = all_reduce(dp, weights, link, mistake)
    acts = unit * batch["tokens"] / (dp * m) * model["hidden"]  # one micro-batch's activations at a layer's output
    rounds = 1 if mistake == "tp_once_per_step" else m
    per_layer = TP_ALL_REDUCES_PER_LAYER * all_reduce(tp, acts, _link(layout, "tp", cluster, mistake), mistake)
    tensor = rounds * model["layers"] / pp * per_layer
    link = _link(layout, "pp", cluster, mistake)
    pipe = 2 * m * (link["alpha"] + acts * link["beta"]) if pp > 1 else 0.0  # activation forward, gradient back
    return data + tensor + pipe


def compute(model: dict, cluster: dict, batch: dict, layout: dict, mistake: str = "") -> float:
    m, pp = batch["micro_batches"], layout["pp"]
    ideal = 6 * model["params"] * batch["tokens"] / (devices(cluster) * cluster["flops"])
    bubble = {"no_bubble": 1.0, "bubble_not_scaled": 1 + (pp - 1) / (m + pp - 1)}.get(mistake, (m + pp - 1) / m)
    return ideal * bubble


def memory(model: dict, batch: dict, layout: dict, mistake: str = "") -> float:
    dp, tp, pp, m = layout["dp"], layout["tp"], layout["pp"], batch["micro_batches"]
    held = model["params"] / (1 if mistake == "state_not_split" else tp * pp)
    state = STATE_BYTES * held / (dp if layout["sharded"] else 1)
    in_flight = m if mistake == "activations_all_micro_batches" else min(pp, m)
    split = 1 if mistake == "activations_not_split_by_tp" else tp
    acts = model["activation_bytes"] * batch["tokens"] / (dp * m) * model["layers"] / pp * in_flight / split
    return state + acts


def devices(cluster: dict) -> int:
    return cluster["gpus_per_node"] * cluster["nodes"]


def costs(model: dict, cluster: dict, batch: dict, layout: dict, mistake: str = "") -> dict[str, float]:
    """compute, comm, step (seconds), mfu (a fraction) and memory (bytes per device) of one layout."""
    busy = compute(model, cluster, batch, layout, mistake)
    comm = communication(model, cluster, batch, layout, mistake)
    flops = 6 * model["params"] * batch["tokens"]
    return {
        "compute": busy,
        "comm": comm,
        "step": busy + comm,
        "mfu": flops / ((busy + comm) * devices(cluster) * cluster["flops"]),
        "memory": memory(model, batch, layout, mistake),
    }


def fastest_that_fits(plans: list[dict], memory_per_device: float, rtol: float) -> set[int]:
    """The indices of every layout that fits and is the fastest of those that fit (ties within rtol): each is
    a right choice. Empty when none fits."""
    fits = [i for i, p in enumerate(plans) if p["memory"] <= memory_per_device]
    if not fits:
        return set()
    best = min(plans[i]["step"] for i in fits)
    return {i for i in fits if plans[i]["step"] <= best * (1 + rtol)}


def _differs(value: float, want: float, rtol: float) -> bool:
    return abs(value - want) > rtol * abs(want)


def expected(scenarios: list, rtol: float) -> list[dict]:
    """Per scenario, what the checks compare with, as plain data: each layout's quantities ("plans"), the right
    choices ("right", sorted), and per named mistake each layout's quantities that it changes ("mistakes")."""
    out = []
    for model, cluster, batch, lays in scenarios:
        plans = [costs(model, cluster, batch, lay) for lay in lays]
        mistakes = {}
        for name in MISTAKES:
            wrong = [costs(model, cluster, batch, lay, name) for lay in lays]
            changed = [{q: v for q, v in w.items() if _differs(v, p[q], rtol)} for w, p in zip(wrong, plans)]
            if any(changed):
                mistakes[name] = changed
        right = sorted(fastest_that_fits(plans, cluster["memory"], rtol))
        out.append({"plans": plans, "right": right, "mistakes": mistakes})
    return out


def render_expected(scenarios: list, rtol: float) -> str:
    """The text of step_time_expected.py: the public scenarios' numbers, data only."""
    head = (
        '"""What plan_layout\'s public checks compare with: for each scenario of checks_step_time.SCENARIOS, each\n'
        "layout's numbers, the right choices, and the numbers of each named mistake (only those it changes).\n\n"
        "Plain data, written by `python -m grader.exercises.syncbn_sharded.hidden_step_time_model` (as is);\n"
        'tests/exercises/test_03_step_time.py checks that the hidden model still gives them."""\n\n'
    )
    lines = ["# kept compact: a layout's numbers a line", "# fmt: off", "EXPECTED = ["]
    for stored in expected(scenarios, rtol):
        lines += ["    {", f'        "right": {stored["right"]},', '        "plans": [']
        lines += [f"            {json.dumps(plan)}," for plan in stored["plans"]]
        lines += ["        ],", '        "mistakes": {']
        for name, changed in stored["mistakes"].items():
            lines += [
                f'            "{name}": [',
                *_packed([json.dumps(c) for c in changed], " " * 16),
                "            ],",
            ]
        lines += ["        },", "    },"]
    return head + "\n".join([*lines, "]", "# fmt: on", ""])


def _packed(items: list[str], indent: str, width: int = 118) -> list[str]:
    """The items, comma-separated, as few to a line as fit in width."""
    lines = [indent]
    for item in items:
        if len(lines[-1]) + len(item) + 2 > width and lines[-1].strip():
            lines.append(indent)
        lines[-1] += f"{item}, "
    return [line.rstrip() for line in lines]


if __name__ == "__main__":
    from grader.exercises.syncbn_sharded.checks_step_time import RTOL, SCENARIOS

    target = Path(__file__).with_name("step_time_expected.py")
    target.write_text(render_expected(SCENARIOS, RTOL))
    print(f"wrote {target}", file=sys.stderr)
