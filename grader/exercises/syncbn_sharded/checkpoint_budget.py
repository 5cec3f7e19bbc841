"""03_syncbn_sharded, checkpoint_activations: the budget's arithmetic, from the task's stated rule.

What each block keeps for backward when it is not checkpointed, the fewest blocks that must be checkpointed for the
rest to fit (whatever blocks of equal size a plan picks: the task's text states no tie-break), and the plans that
undercount the bytes, named by the number of blocks they choose.
"""

from __future__ import annotations

from grader.checks import CheckFailed

ROWS = 64  # per rank: the activations, not the parameters, fill memory
# world size -> (width, each block's hidden width, the budget in bytes of saved activations). Every activation is
# larger than every parameter, so the live-bytes threshold (the largest parameter) counts them all.
SHAPES = {2: (16, (64, 48, 96, 48, 64, 128, 48, 64), 150_000), 3: (12, (48, 24, 96, 48, 72, 24), 80_000)}


def block_bytes(world: int) -> list[int]:
    """The hidden-sized activations each block keeps for backward without checkpointing (fc1's and GELU's)."""
    return [2 * ROWS * hidden * 4 for hidden in SHAPES[world][1]]


def fewest_for(sizes: list[int], budget: int) -> int:
    """How many of blocks of these sizes must be checkpointed for the rest to fit the budget: the largest first."""
    kept, count = sum(sizes), 0
    for size in sorted(sizes, reverse=True):
        if kept <= budget:
            break
        kept, count = kept - size, count + 1
    return count


def fewest_recomputed(world: int) -> int:
    return fewest_for(block_bytes(world), SHAPES[world][2])


# What a plan that miscounts the bytes sees, by how much it undercounts them.
MISCOUNTS = (
    (2, "one activation per block, where each keeps two (fc1's output and GELU's)"),
    (4, "elements, not bytes (an fp32 value takes 4 bytes)"),
)


def likely_miscount(world: int, chosen: int) -> str:
    """The undercounts that would have chosen `chosen` blocks, said; "" when none would."""
    sizes, budget = block_bytes(world), SHAPES[world][2]
    named = [what for factor, what in MISCOUNTS if fewest_for([s // factor for s in sizes], budget) == chosen]
    return (" You seem to count " + ", or ".join(named) + ".") if named else ""


def over_budget(rank: int, got: dict, world: int) -> CheckFailed:
    budget, chosen = SHAPES[world][2], sum(1 for n in got["recomputes"] if n)
    return CheckFailed(
        f"rank {rank}: after forward, autograd kept {got['kept']} bytes of hidden-sized activations for "
        f"backward, over the budget of {budget}: checkpoint more blocks (you checkpointed {chosen}). Each block "
        f"that is not checkpointed keeps fc1's and GELU's outputs, 2 x rows x hidden x 4 bytes."
        + likely_miscount(world, chosen)
    )
