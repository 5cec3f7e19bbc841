"""The interleaved 1F1B schedule's plan: which stages a rank holds and in which order it runs them (parent side).

With v stages per rank the model is cut into v * p stages dealt round-robin: rank r holds stages r, r + p, ...
(Megatron's interleaving, torch's ScheduleInterleaved1F1B), so a microbatch goes round the ranks v times and each
rank starts working after 1/v of the time it would with one stage.

The order is torch 2.13's (torch/distributed/pipelining/schedules.py,
ScheduleInterleaved1F1B._calculate_single_rank_operations, "depth first"): microbatches go in rounds of
m / max(1, m // p); a rank runs (v - 1) rounds' worth of forwards plus two per hop it is away from the last rank,
then alternates one forward and one backward, then drains the backwards.
The forwards visit its stages in rank order, round by round; the backwards in reverse. tests/exercises/
test_01_schedule.py compares this with torch's own plan, so a torch that changes it shows there.
"""

from __future__ import annotations

from collections import defaultdict

STAGES_PER_RANK = 2


def stages_of(rank: int, world_size: int, per_rank: int = STAGES_PER_RANK) -> list[int]:
    return [rank + k * world_size for k in range(per_rank)]


def compute_order(rank: int, world_size: int, m: int, per_rank: int = STAGES_PER_RANK) -> list[tuple[str, int, int]]:
    """(F or B, stage, microbatch) in the order rank runs them."""
    rounds = max(1, m // world_size)
    per_round = m // rounds
    warmup = min((per_rank - 1) * per_round + 2 * (world_size - 1 - rank), m * per_rank)
    total = m * per_rank

    def forward_stage(op: int) -> int:
        return (op // per_round) % per_rank * world_size + rank

    def backward_stage(op: int) -> int:
        return (per_rank - 1 - ((op - warmup) // per_round) % per_rank) * world_size + rank

    done: dict[tuple[str, int], int] = defaultdict(int)
    order = []

    def run(kind: str, stage: int) -> None:
        order.append((kind, stage, done[kind, stage]))
        done[kind, stage] += 1

    for op in range(total + warmup):
        if op < total:
            run("F", forward_stage(op))
        if op >= warmup:
            run("B", backward_stage(op))
    return order


def expected_sends(rank: int, world_size: int, m: int, per_rank: int = STAGES_PER_RANK) -> list[tuple]:
    """(peer, F or B, stage, microbatch) of each tensor rank sends: an activation after every forward but the last
    stage's, an input gradient after every backward but the first stage's."""
    n_stages = per_rank * world_size
    sends = []
    for kind, stage, microbatch in compute_order(rank, world_size, m, per_rank):
        if kind == "F" and stage < n_stages - 1:
            sends.append(((stage + 1) % world_size, kind, stage, microbatch))
        elif kind == "B" and stage > 0:
            sends.append(((stage - 1) % world_size, kind, stage, microbatch))
    return sends


def describe(kind: str, stage: int, microbatch: int) -> str:
    if kind == "F":
        return f"microbatch {microbatch}'s activation from stage {stage} to stage {stage + 1}"
    return f"microbatch {microbatch}'s input gradient from stage {stage} back to stage {stage - 1}"
