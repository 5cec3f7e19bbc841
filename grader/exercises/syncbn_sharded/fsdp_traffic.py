"""03_syncbn_sharded, MiniFSDP: verdicts on what the ranks communicated (parent side).

The ranks report each step's collectives as the dispatcher saw them (kind, dtype, elements put in;
grader/exercises/collectives.py), so no spelling hides one. Counting by kind alone would let a token
reduce-scatter beside a hidden all-reduce pass; counting elements does not: every step the all-gathers
must bring every parameter element and the reduce-scatters must take every gradient element.
"""

from __future__ import annotations

from grader.checks import CheckFailed

GATHER = ("all_gather",)
# torch.distributed.nn.functional.all_gather's backward emulates its reduce-scatter on gloo with scatters
# (an all-to-all and a local sum): the same data, the same result, so it counts as a reduce-scatter.
SCATTER = ("reduce_scatter", "all_to_all", "scatter")
HARMLESS = ("barrier",)


def verify_equal_shards(results, numels: list[int]) -> None:
    """Every rank's chunks have the same sizes (what the ranks reported before any all-gather ran)."""
    world = len(results)
    every = results[0]["shard_sizes"]
    for rank, sizes in enumerate(every):
        if sizes == every[0]:
            continue
        example = next((n for n in numels if n % world), numels[0])
        padded = -(-example // world) * world
        raise CheckFailed(
            f"rank {rank}'s shards hold {sizes} elements, rank 0's {every[0]}: every rank's chunk of a parameter "
            f"must have the same size, or the all-gathers cannot line up. Pad each flattened parameter with zeros "
            f"to a multiple of the world size (ceil(numel / world_size) * world_size elements: {example} -> "
            f"{padded} on {world} ranks), not by the remainder numel % world_size ({example} -> "
            f"{example + example % world}); chunk number `rank` then has ceil(numel / world_size) elements"
        )


def _elements(calls, kinds) -> int:
    return sum(numel for kind, _, numel in calls if kind in kinds)


def verify_traffic(results, numels: list[int]) -> None:
    """Each step: no all-reduce, nothing but all-gathers and reduce-scatters, and enough of both."""
    world, total = len(results), sum(numels)
    for rank, got in enumerate(results):
        for step, calls in enumerate(got["calls"]):
            where = f"rank {rank}, from step {step + 1} on" if step else f"rank {rank}, step 1"
            kinds = [kind for kind, _, _ in calls]
            if "all_reduce" in kinds:
                raise CheckFailed(
                    f"{where}: an all-reduce was called ({kinds.count('all_reduce')} times, whatever "
                    "its spelling): FSDP reduce-scatters the gradients (each rank receives only its "
                    "shard's sum; gloo has dist.reduce_scatter_single), it does not all-reduce them"
                )
            others = sorted(set(kinds) - set(GATHER + SCATTER + HARMLESS))
            if others:
                raise CheckFailed(
                    f"{where}: {', '.join(others)} called during the step: in FSDP parameters travel "
                    "by all-gathers and gradients by reduce-scatters, nothing else moves"
                )
            gathered = _elements(calls, GATHER) * world
            if not gathered:
                raise CheckFailed(
                    f"{where}: no all-gather during forward and backward: the full parameters must "
                    "be all-gathered from the shards before each layer runs"
                )
            if gathered < total:
                raise CheckFailed(
                    f"{where}: the all-gathers brought {gathered} elements, the model has {total}: "
                    "all-gather every parameter from the shards before its layer runs"
                )
            scattered = _elements(calls, SCATTER)
            if not scattered:
                raise CheckFailed(
                    f"{where}: no reduce-scatter during the step: the gradients must be "
                    "reduce-scattered into the shards (dist.reduce_scatter_single)"
                )
            if scattered < total:
                raise CheckFailed(
                    f"{where}: the reduce-scatters took {scattered} gradient elements, the model has "
                    f"{total}: reduce-scatter every parameter's full gradient into the shards "
                    "(a reduce-scatter of part of them while the rest travels another way is not FSDP)"
                )


def verify_gathers_in(results, dtype: str) -> None:
    """With compute_dtype, the all-gathers of each step carry that dtype (half the traffic for bf16)."""
    for rank, got in enumerate(results):
        for step, calls in enumerate(got["calls"]):
            wrong = sorted({d for kind, d, _ in calls if kind in GATHER and d != dtype})
            if wrong:
                raise CheckFailed(
                    f"rank {rank}, step {step + 1}: the all-gathers carried {', '.join(wrong)}, "
                    f"compute_dtype is {dtype}: cast the shards to compute_dtype before the "
                    "all-gather, not after it"
                )
