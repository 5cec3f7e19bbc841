"""Hidden checks of checks_core.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.checks_core import _check_shards, _check_average, _check_ring_sum, _check_ring_traffic  # noqa: F401


SHARD_EDGE_CASES = [(2, 3), (0, 2), (1001, 4), (5, 1)]


@EXERCISE.check("shard_indices", points=0.5, hidden=True, depends_on=("shards_are_disjoint_covering_balanced",))
def shards_edge_cases(g):
    """Fewer samples than ranks, no samples, a large batch, one rank."""
    _check_shards(g, SHARD_EDGE_CASES)


@EXERCISE.check(
    "average_gradients", points=1, hidden=True, world_size=3, depends_on=("averaged_gradients_match_full_batch",)
)
def averaged_gradients_three_ranks_frozen_layer(g):
    """3 ranks and a model with a frozen layer and an unused parameter."""
    _check_average(g, 3, 9, frozen_first=True)


@EXERCISE.check(
    "ring_all_reduce",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("ring_sums_in_place", "ring_passes_chunks_to_neighbours"),
)
def ring_three_ranks(g):
    """3 ranks: lengths 9, 10 and 2 (shorter than the world: empty chunks)."""
    for length in (9, 10, 2):
        per_rank = _check_ring_sum(g, 3, length)
        _check_ring_traffic(per_rank, 3, length)


@EXERCISE.check(
    "ring_all_reduce",
    points=1,
    hidden=True,
    world_size=4,
    depends_on=("ring_sums_in_place", "ring_passes_chunks_to_neighbours"),
)
def ring_four_ranks(g):
    """4 ranks, length 1001."""
    per_rank = _check_ring_sum(g, 4, 1001)
    _check_ring_traffic(per_rank, 4, 1001)
