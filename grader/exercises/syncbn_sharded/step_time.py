"""The α-β model of a training step that the layout task's text states, and the usual ways to get it wrong.

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

A mistake (MISTAKES) is the same model with one convention broken: a student's number that matches one is told
which.
"""

from __future__ import annotations

FP32 = 4
STATE_BYTES = 16  # fp32 parameter, gradient and Adam's two moments: task 14's DDP count per parameter
TP_ALL_REDUCES_PER_LAYER = 4  # Megatron: 2 in forward (attention, MLP), 2 in backward
MISTAKES = {
    "elements_not_bytes": "you seem to count elements, not bytes, in the communication: an fp32 value is 4 bytes",
    "all_reduce_as_gather": "a ring all-reduce moves 2(k−1)/k·B bytes per rank (a reduce-scatter, then an "
    "all-gather), not (k−1)/k·B",
    "all_reduce_no_factor": "a ring all-reduce moves 2(k−1)/k·B bytes per rank, not B: the 2(k−1)/k factor is missing",
    "no_latency": "the α terms are left out: each of a ring's 2(k−1) steps (k−1 for a gather or scatter) and each "
    "send pays the link's latency α",
    "tp_link_swapped": "tensor parallelism is charged on the wrong link: a TP group within one node uses the "
    "intra-node α and β, one that spans nodes the inter-node ones",
    "no_bubble": "the pipeline bubble is forgotten: with pp stages and m micro-batches the compute takes "
    "(m + pp − 1)/m times the ideal",
    "bubble_not_scaled": "the bubble is (pp − 1)/(m + pp − 1) of the pipelined time: the compute is the ideal "
    "times (m + pp − 1)/m",
    "fsdp_as_all_reduce": "a sharded layout gathers the parameters for forward and again for backward, and "
    "reduce-scatters the gradients: 3 collectives of (k−1)/k·B, not one all-reduce",
    "tp_once_per_step": "tensor parallelism all-reduces activations in every micro-batch: 4 per layer "
    "(2 in forward, 2 in backward) for each of the m micro-batches",
    "activations_all_micro_batches": "a rank keeps the activations of min(pp, m) micro-batches (1F1B), not of all m",
    "activations_not_split_by_tp": "tensor parallelism splits the activations too: divide them by tp",
    "state_not_split": "the model state is split over tp · pp (and over dp when sharded): 16 bytes per parameter "
    "this rank holds",
}


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
