"""01_parallelism: ring_attention, causal attention over a sequence cut into one block per rank (context parallelism).

Every rank gets the q, k, v of its own block and every block's length; the student's ring passes the key/value
blocks to the next rank, world_size - 1 times, and merges each block's partial softmax into a running one. The rank
sends back its output, the collectives the dispatcher saw, a copy of every float tensor it sent (stage_watch.py's
StageWatch, with no layers to watch) and, in the memory check, the largest storage its code allocated and kept
alive (syncbn_sharded/live_bytes.py). The parent, which alone computes one process's causal attention
(causal_blocks.py), checks in this order:

    traffic   only point-to-point messages, to rank + 1 only, carrying this rank's own block then each block received,
              world_size - 1 of them (the values sent, whatever the packing: k and v apart, or cat/stack-ed)
    values    each rank's output against full causal attention; a mismatch is named by the typical mistake it equals
    memory    (4 ranks) no tensor allocated holds more than one block's keys and values: a ring may hold a few blocks
              at once (the one merged, the one arriving, one a send still references), never one tensor of them all
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.dispatch_mode import SWITCHED_OFF
from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism import causal_blocks as ref
from grader.exercises.parallelism.host_copy import host as _host
from grader.exercises.parallelism.stage_watch import StageWatch
from grader.exercises.syncbn_sharded.live_bytes import LiveBytes, live_nbytes, storage_key

RING_TIMEOUT = 15.0  # a few small blocks; a send that meets no receive waits for ever
D, D_V = 32, 4  # keys wider than values: a key block outweighs every score or accumulator tensor of the merge


class LargestStorage(LiveBytes):
    """LiveBytes that also keeps the largest single storage seen alive (the persistent ones left out)."""

    largest = 0

    def sample(self) -> None:
        super().sample()
        kept = {storage_key(t) for t in self.persistent()}
        sizes = [live_nbytes(weak) for key, weak in self.refs.items() if key not in kept]
        self.largest = max([self.largest, *sizes])


def _ring_in_rank(ctx, student, seed, sizes, measure):
    q, k, v = ref.blocks(seed, sizes, D, D_V, device=ctx.device)[ctx.rank]
    key_bytes = min(sizes) * D * 4
    # the caller's own block is not what the ring allocates: views of it (k.T) must not count
    watch, memory = StageWatch(nn.Sequential()), LargestStorage(above=key_bytes // 2, persistent=lambda: (q, k, v))
    with record_collectives() as calls, watch:
        if measure:
            with memory:
                out = student.task("ring_attention")(q, k, v, list(sizes))
                on = memory.on()
        else:
            out = student.task("ring_attention")(q, k, v, list(sizes))
            on = True
        if not (on and watch.on()):
            raise CheckFailed(f"rank {ctx.rank}: " + SWITCHED_OFF)
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(
            f"ring_attention returned {type(out).__name__} on rank {ctx.rank}: return this rank's output, a tensor "
            "of shape (its block's length, v.shape[-1])"
        )
    return {
        "out": _host(out),
        "kinds": [c.kind for c in calls],
        "sent": watch.sent,
        "largest": memory.largest,
    }


def run_ring(g, sizes, measure=False, seed=7):
    per_rank = g.run(_ring_in_rank, seed, list(sizes), measure, world_size=len(sizes), timeout=RING_TIMEOUT)
    return per_rank, ref.blocks(seed, sizes, D, D_V)


def check_traffic(g, per_rank, data) -> None:
    world_size = len(per_rank)
    for rank, got in enumerate(per_rank):
        other = sorted({kind for kind in got["kinds"] if kind not in ("send", "recv", "barrier")})
        if other:
            raise CheckFailed(
                f"rank {rank} called dist.{', dist.'.join(other)}: "
                + (
                    "an all-gather puts every rank's keys and values on every rank at once, which is what context "
                    "parallelism avoids. "
                    if "all_gather" in other
                    else ""
                )
                + "The key/value blocks travel around the ring with point-to-point messages only (isend/irecv, "
                "or batch_isend_irecv), from each rank to the next"
            )
        _check_sent(g, rank, world_size, got["sent"], data)


def _check_sent(g, rank, world_size, sent, data) -> None:
    nxt = (rank + 1) % world_size
    if not sent:
        raise CheckFailed(
            f"rank {rank} sent nothing: its output can only be right if the keys and values of the earlier ranks "
            f"reach it. Each rank sends a key/value block to rank (rank + 1) % world_size, world_size - 1 times"
        )
    peers = sorted({peer for peer, _ in sent} - {nxt})
    if peers:
        raise CheckFailed(
            f"rank {rank} sent to rank(s) {peers}; in the ring rank {rank} sends only to the next rank, {nxt}, and "
            f"receives only from the previous one, {(rank - 1) % world_size}"
        )
    flat = torch.cat([t.flatten() for _, t in sent])
    per_step = [data[j][1].numel() + data[j][2].numel() for j in ref.forwarded(rank, world_size, world_size + 1)]
    steps = next((s for s in range(world_size + 2) if sum(per_step[:s]) == flat.numel()), None)
    if steps != world_size - 1:
        counted = f"{steps} blocks' worth of keys and values" if steps is not None else f"{flat.numel()} numbers"
        raise CheckFailed(
            f"rank {rank} sent {counted} to rank {nxt}, where a ring of {world_size} ranks takes {world_size - 1} "
            f"step(s): after world_size - 1 steps every rank has seen every block, and one more step only brings "
            f"each block back to its owner (off by one in the number of steps?)"
        )
    blocks = ref.forwarded(rank, world_size, steps)
    want = torch.cat([t.flatten() for j in blocks for t in data[j][1:]])
    if not g.close(flat.sort().values, want.sort().values):
        raise CheckFailed(
            f"what rank {rank} sent to rank {nxt} is not the key and value blocks it must pass on: its own block "
            f"first, then each block it received, unchanged (k and v as given, not scaled or masked, not the queries "
            f"or partial outputs; packing k and v into one tensor is fine)"
        )


def check_values(g, per_rank, data) -> None:
    for rank, got in enumerate(per_rank):
        want = ref.causal(data, rank)
        out = got["out"]
        if out.shape != want.shape:
            raise CheckFailed(
                f"rank {rank} returned a tensor of shape {list(out.shape)}; its output is one row per query of its "
                f"block and one column per value feature: {list(want.shape)}"
            )
        if g.close(out, want):
            continue
        mistake = next((name for name, alt in ref.variants(data, rank).items() if g.close(out, alt)), None)
        likely = (
            f"it equals attention with {mistake}"
            if mistake
            else "query i sees key j iff j <= i in the whole sequence, and when a block raises the running maximum "
            "the numerator and denominator gathered so far must be rescaled by exp(old max - new max)"
        )
        g.assert_close(
            out, want, f"rank {rank}'s ring_attention output (blocks of {[len(d[0]) for d in data]})", likely
        )


def check_memory(per_rank, data) -> None:
    block = max(len(k) for _, k, _ in data) * (D + D_V) * 4  # one block's keys and values, packed or not
    whole = sum(len(k) for _, k, _ in data) * D * 4
    for rank, got in enumerate(per_rank):
        if got["largest"] > block:
            everything = " (as much as the keys of the whole sequence)" if got["largest"] >= whole else ""
            raise CheckFailed(
                f"rank {rank}'s code allocated a tensor of {got['largest']} bytes{everything}, where one block's keys "
                f"and values take at most {block}: it collected several blocks into one tensor (a torch.cat or stack "
                "of the blocks received, an all_gather_into_tensor) instead of merging each block as it arrives. "
                "Keep only the block you compute with and the one arriving"
            )


@EXERCISE.check("ring_attention", points=3)
def ring_two_ranks_matches_causal_attention(g):
    """2 ranks, blocks of 6: the messages (one step, the real key/value block) and the output."""
    per_rank, data = run_ring(g, [6, 6])
    check_traffic(g, per_rank, data)
    check_values(g, per_rank, data)


@EXERCISE.check("ring_attention", points=2, world_size=4, depends_on=("ring_two_ranks_matches_causal_attention",))
def ring_four_ranks_never_holds_every_block(g):
    """4 ranks, blocks of 8: messages, output, and the key/value bytes alive at once on each rank."""
    per_rank, data = run_ring(g, [8, 8, 8, 8], measure=True)
    check_traffic(g, per_rank, data)
    check_values(g, per_rank, data)
    check_memory(per_rank, data)
