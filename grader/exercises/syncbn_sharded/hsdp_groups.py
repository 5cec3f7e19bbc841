"""HSDP's process groups against a machine description: which group each recorded collective ran on, per rank.

A correct HSDP step all-gathers and reduce-scatters only among the ranks of one node (the shard dimension), and
all-reduces only among ranks of different nodes, one of each (the replicate dimension). Any order of the ranks
within a node is correct: it only decides which shard a rank holds. A wrong group is named by the mistake that
makes it: all ranks (a 1-D mesh), init_device_mesh's rank-order pairs (the nodes ignored), or one rank per node
(the dimensions swapped).
"""

from __future__ import annotations

from collections import Counter

from grader.checks import CheckFailed

SHARDED_KINDS = ("all_gather", "reduce_scatter")
TWO_D = (
    'Build the mesh from the nodes themselves: a 2-D DeviceMesh whose rows are the nodes (dim 0 "replicate" across '
    'nodes, dim 1 "shard" within one), and pass it to every fully_shard call'
)


def per_group(calls, kinds) -> Counter:
    """How many calls of these kinds ran on each group (a frozenset of global ranks; None: group unknown)."""
    return Counter(None if ranks is None else frozenset(ranks) for kind, ranks in calls if kind in kinds)


def crosses_nodes(group: frozenset, nodes) -> bool:
    """One rank of every node: a replicate group."""
    return len(group) == len(nodes) and all(len(group & set(node)) == 1 for node in nodes)


def rank_order_groups(nodes) -> set[frozenset]:
    """The shard groups of init_device_mesh(..., (len(nodes), node_size)): consecutive ranks."""
    size = len(nodes[0])
    return {frozenset(range(i * size, (i + 1) * size)) for i in range(len(nodes))}


def _listed(counts: Counter) -> str:
    return ", ".join(f"{sorted(g) if g is not None else 'an unknown group'} ({n}x)" for g, n in counts.items())


def _wrong_shard_group(rank: int, group, counts: Counter, nodes) -> str:
    said = f"rank {rank}: all-gathers and reduce-scatters ran on {_listed(counts)}; nodes are {list(map(list, nodes))}"
    world = sum(len(node) for node in nodes)
    if group is not None and len(group) == world:
        return (
            f"{said}. That is plain FSDP on a 1-D mesh of all {world} ranks: every all-gather crosses the slow "
            f"link between nodes, and nothing is replicated. {TWO_D}"
        )
    if group in rank_order_groups(nodes) - {frozenset(node) for node in nodes}:
        swapped = " (or its dimensions are swapped: here both give these groups)" if crosses_nodes(group, nodes) else ""
        return (
            f"{said}. Ranks {sorted(group)} do not share a node: the mesh was built in rank order "
            f"(init_device_mesh numbers ranks 0, 1, 2, ... row by row) and ignores the nodes you were given{swapped}. "
            + TWO_D
        )
    if group is not None and crosses_nodes(group, nodes):
        return (
            f"{said}. Each of those groups holds one rank of every node: the mesh's dimensions are swapped, so the "
            "parameters are sharded across nodes (every all-gather over the slow link) and replicated within a "
            "node. The shard dimension must be the one whose groups are the nodes"
        )
    return f"{said}: shard only within a node. {TWO_D}"


def verify_sharded(results) -> None:
    for rank, got in enumerate(results):
        plain_ones = [k for k, sharded in got["sharded"].items() if not sharded]
        if plain_ones:
            raise CheckFailed(
                f"rank {rank}: {len(plain_ones)} parameters (e.g. {plain_ones[0]}) are plain tensors, not "
                "DTensors: fully_shard each block, then the root, with the 2-D mesh"
            )


def verify_groups(results, nodes) -> None:
    verify_sharded(results)
    node_sets = {frozenset(node) for node in nodes}
    for rank, got in enumerate(results):
        sharded, reduced = per_group(got["calls"], SHARDED_KINDS), per_group(got["calls"], ("all_reduce",))
        if not sharded:
            raise CheckFailed(f"rank {rank}: one step all-gathered nothing: the parameters were never sharded")
        wrong = [group for group in sharded if group not in node_sets]
        if wrong:
            raise CheckFailed(_wrong_shard_group(rank, wrong[0], sharded, nodes))
        if not reduced:
            raise CheckFailed(
                f"rank {rank}: all-gathers and reduce-scatters ran within its node ({_listed(sharded)}), but no "
                "all-reduce ran across nodes: nothing is replicated, so each node averaged only its own ranks' "
                'gradients and the nodes drift apart. Shard on the 2-D mesh itself, not on its "shard" '
                "sub-mesh: fully_shard then all-reduces over the replicate dimension"
            )
        across = [group for group in reduced if group is None or not crosses_nodes(group, nodes)]
        if across:
            raise CheckFailed(
                f"rank {rank}: all-reduces ran on {_listed(reduced)}: the replicate dimension's groups hold one "
                f"rank of each node. {TWO_D}"
            )
