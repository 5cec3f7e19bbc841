"""03_syncbn_sharded: activation checkpointing (not checks_sharded_checkpoint.py, which saves training state).

The ranks hand the grader's block model (blocks of different widths) and an activation-memory budget to the
student's function, wrap what it returns in DDP, and run one forward and backward on their own micro-batches. What
each rank measures:

| rule of the task text                                              | verified by                              |
|--------------------------------------------------------------------|------------------------------------------|
| the gradients are those of the model without checkpointing          | gradients on the grader's own parameter  |
| (and DDP still averages them)                                       | objects == one process on the whole batch|
| a checkpointed block's forward runs again in backward, once         | a counter in each block's forward        |
| (checkpointing per block, not none, not nested)                     | (not a timer): 1 in forward, 0 or 1 in   |
|                                                                     | backward, with autograd on               |
| what autograd keeps after forward fits the budget                   | live hidden-sized bytes after forward    |
|                                                                     | (live_bytes.py) and the blocks' own weak |
|                                                                     | refs: at most budget_bytes               |
| as few blocks recomputed as the budget allows                       | the counters: recomputed blocks == the   |
|                                                                     | fewest (largest first; any tie-break);   |
|                                                                     | every block recomputed and all alive at  |
|                                                                     | once in backward: named as one unit      |
| wrap the blocks, do not copy them                                   | the blocks handed over are in the result |
| use_reentrant=False (reentrant: the data needs no gradient, so no   | gradients: no block's parameters got one |
| block's output requires grad, and no block gets a gradient)         |                                          |

Outer saved_tensors_hooks cannot measure this: checkpoint's own hooks hide the region from them. Student code can
switch the dispatch mode off (dispatch_mode.py), so each block also asks, at every forward, whether the grader's
modes still see operators, and keeps weak references to its hidden activations: after forward, those still alive
(what autograd saved) count as a second measurement.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from grader.checks import CheckFailed
from grader.exercises.dispatch_mode import SWITCHED_OFF, modes_on
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checkpoint_budget import (
    ROWS,
    SHAPES,
    block_bytes,
    fewest_recomputed,
    over_budget,
)
from grader.exercises.syncbn_sharded.live_bytes import LiveBytes, StorageWeakRef, live_nbytes

TASK = "checkpoint_activations"


class MLPBlock(nn.Module):
    """x + fc2(gelu(fc1(x))): GELU saves fc1's output and fc2 saves GELU's, two hidden-sized activations."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, hidden), nn.Linear(hidden, width)
        self.forwards = 0  # how many times this block's forward ran (the recompute count)
        self.runs: list[tuple[bool, bool]] = []  # (autograd on, the grader's modes on) at each forward
        self.hidden: list = []  # weak references to the hidden activations of its forwards with autograd on

    def forward(self, x):
        self.forwards += 1
        self.runs.append((torch.is_grad_enabled(), modes_on()))
        h = self.fc1(x)
        a = nn.functional.gelu(h)
        if torch.is_grad_enabled():
            self.hidden += [StorageWeakRef(h.untyped_storage()), StorageWeakRef(a.untyped_storage())]
        return x + self.fc2(a)


class BlockModel(nn.Module):
    """model.blocks: an nn.ModuleList of MLPBlocks, each mapping (rows, width) to the same shape; then a head."""

    def __init__(self, width: int, hiddens: tuple):
        super().__init__()
        self.blocks = nn.ModuleList(MLPBlock(width, hidden) for hidden in hiddens)
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def block_model(seed: int, world: int) -> BlockModel:
    ref.seed_cpu(seed)
    return BlockModel(*SHAPES[world][:2])


def batch(rank: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 100 + rank)
    return torch.randn(ROWS, width, generator=g), torch.randn(ROWS, 1, generator=g)


@lru_cache(maxsize=None)  # the grader's own computation from constants
def _reference_grads(seed: int, world: int) -> tuple:
    """One process, no checkpointing, the whole batch: what DDP's averaged gradients must equal."""
    model = block_model(seed, world)
    xs, ys = zip(*(batch(r, SHAPES[world][0], seed) for r in range(world)))
    nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
    return tuple(p.grad.clone() for p in model.parameters())


def _in_rank_checkpointing(ctx, student, seed: int):
    model = block_model(seed, ctx.world_size).to(ctx.device)
    params = list(model.parameters())  # the grader's parameter objects: their gradients, whatever the wrapping
    blocks = list(model.blocks)
    wrapped = student.task(TASK)(model, ROWS, SHAPES[ctx.world_size][2])
    if not isinstance(wrapped, nn.Module):
        return {"returned": type(wrapped).__name__}
    ddp = DDP(wrapped, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    x, y = (t.to(ctx.device) for t in batch(ctx.rank, SHAPES[ctx.world_size][0], seed))
    kept = {id(m) for m in wrapped.modules()}
    copied = [i for i, block in enumerate(blocks) if id(block) not in kept]
    for block in blocks:
        block.forwards, block.runs, block.hidden = 0, [], []
    largest_input = ROWS * SHAPES[ctx.world_size][0] * 4
    tracker = LiveBytes(above=max(largest_input, max(p.numel() * 4 for p in params)))
    with tracker:
        loss = nn.functional.mse_loss(ddp(x), y)
        tracker.sample()
        after_forward = tracker.live()
    forwards = [b.forwards for b in blocks]
    held = sum(live_nbytes(w) for b in blocks for w in b.hidden)  # outside the mode: what autograd still keeps
    tracker.phase = "backward"
    with tracker:
        loss.backward()
    again = [b.runs[f:] for b, f in zip(blocks, forwards)]
    return {
        "returned": "module",
        "peak": dict(tracker.peak),
        "kept": max(after_forward, held),
        "forwards": forwards,
        "recomputes": [sum(grad for grad, _ in runs) for runs in again],
        "no_grad_reruns": sum(not grad for runs in again for grad, _ in runs),
        "off": sum(not on for b in blocks for _, on in b.runs),
        "copied": copied,
        "grads": [None if p.grad is None else p.grad.detach().cpu().clone() for p in params],
    }


def run_checkpointing(g, seed: int) -> list:
    results = g.run(_in_rank_checkpointing, seed)
    for rank, got in enumerate(results):
        if not isinstance(got, dict) or got.get("returned") != "module":
            kind = got.get("returned") if isinstance(got, dict) else "?"
            raise CheckFailed(f"rank {rank}: {TASK}(model) returned {kind}: return the model, its blocks wrapped")
        if got.get("off"):
            raise CheckFailed(f"rank {rank}: {got['off']} block forward(s) ran while " + SWITCHED_OFF)
        if got.get("copied"):
            raise CheckFailed(
                f"rank {rank}: the returned model does not hold the blocks it was given (blocks "
                f"{got['copied']} are missing): they were copied. Wrap each block (Checkpointed(block) "
                "keeps the block itself), don't copy it: a copy trains other parameters than the "
                "model's"
            )
    return results


def verify_recomputes(results) -> None:
    for rank, got in enumerate(results):
        once = [i for i, n in enumerate(got["forwards"]) if n != 1]
        if once:
            raise CheckFailed(
                f"rank {rank}: in forward the blocks ran {got['forwards']} times: each block's forward "
                "must run once (call the block, or checkpoint(block, x, ...), once per block)"
            )
        recomputes = got["recomputes"]
        if got["no_grad_reruns"] and any(n != 1 for n in recomputes):
            raise CheckFailed(
                f"rank {rank}: in backward the blocks ran again {got['no_grad_reruns']} time(s) under "
                "no_grad: a result computed without autograd gives no gradient and is thrown away, so "
                "the activations had to be saved anyway. Checkpointing recomputes each block with "
                "autograd on: torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)"
            )
        if not any(recomputes) and got["kept"] > SHAPES[len(results)][2]:
            raise over_budget(rank, got, len(results))
        if not any(recomputes):
            raise CheckFailed(
                f"rank {rank}: no block ran again in backward: no block is checkpointed (a block's "
                "forward run inside torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) "
                "is recomputed in backward)"
            )
        if any(n > 1 for n in recomputes):
            raise CheckFailed(
                f"rank {rank}: in backward the blocks ran again {recomputes} times: checkpointing "
                "recomputes a block once (one extra forward); checkpoint each chosen block, once, "
                "and nothing nested"
            )


def verify_gradients(g, results, seed: int) -> None:
    world = len(results)
    expected = _reference_grads(seed, world)
    blocks = len(SHAPES[world][1])
    per_block = 4  # fc1.weight, fc1.bias, fc2.weight, fc2.bias
    for rank, got in enumerate(results):
        missing = sorted({i // per_block for i, grad in enumerate(got["grads"]) if grad is None and i < blocks * 4})
        if missing == list(range(blocks)):
            raise CheckFailed(
                f"rank {rank}: no block's parameters got a gradient: the blocks' outputs do not require "
                "grad. With use_reentrant=True, checkpoint passes gradients only through inputs that "
                "require grad, and the first block's input (the data) does not; use "
                "checkpoint(block, x, use_reentrant=False), and do not run the blocks under no_grad"
            )
        if missing == [0]:
            raise CheckFailed(
                f"rank {rank}: the first block's parameters got no gradient, the others did. With "
                "use_reentrant=True, checkpoint passes gradients only through inputs that require "
                "grad, and the first block's input (the data) does not: use checkpoint(block, x, "
                "use_reentrant=False)"
            )
        if missing:
            raise CheckFailed(
                f"rank {rank}: the parameters of blocks {missing} got no gradient: the gradient must "
                "flow through each block's input (do not detach it)"
            )
        if any(grad is None for grad in got["grads"]):
            raise CheckFailed(f"rank {rank}: the head's parameters got no gradient: keep model.head as it is")
        for i, (actual, exp) in enumerate(zip(got["grads"], expected)):
            where = f"block {i // per_block}" if i < blocks * per_block else "the head"
            g.assert_close(
                actual,
                exp,
                f"rank {rank}: the gradient of parameter {i} ({where})",
                "checkpointing must not change the gradients: recompute the same forward (the block "
                "itself, its input not detached), and leave the model's parameters in place",
            )


def verify_budget(results) -> None:
    world = len(results)
    sizes, budget, fewest = block_bytes(world), SHAPES[world][2], fewest_recomputed(world)
    for rank, got in enumerate(results):
        chosen = [i for i, n in enumerate(got["recomputes"]) if n]
        if got["kept"] > budget:
            raise over_budget(rank, got, world)
        # every block recomputed: one unit (the whole model) if they were all alive at once in backward
        if len(chosen) == len(sizes) > fewest and got["peak"]["backward"] >= sum(sizes):
            raise CheckFailed(
                f"rank {rank}: {got['peak']['backward']} bytes of hidden-sized activations were alive at once in "
                f"backward, all {len(sizes)} blocks' worth ({sum(sizes)}): checkpoint blocks on their own. "
                "Checkpointing the whole model as one unit saves nothing at the peak: backward recomputes every "
                "block's activations at once"
            )
        if len(chosen) > fewest:
            what = (
                "every block: the budget needs only "
                if len(chosen) == len(sizes)
                else f"blocks {chosen}, {len(chosen)} of them: "
            )
            raise CheckFailed(
                f"rank {rank}: you checkpointed {what}{fewest} to fit {budget} bytes, and each checkpointed block "
                "costs one more forward in backward. Choose the blocks whose activations are the largest first, "
                "and stop as soon as the rest fit"
            )


@EXERCISE.check(TASK, points=2)
def checkpointing_keeps_gradients(g):
    """Under DDP with 2 ranks, the gradients equal those of the model without checkpointing, and each
    checkpointed block's forward ran once more in backward."""
    results = run_checkpointing(g, 1)
    verify_gradients(g, results, 1)
    verify_recomputes(results)


@EXERCISE.check(TASK, points=2)
def checkpointing_frees_activations(g):
    """8 blocks of different widths: after forward, autograd keeps at most the budget's bytes of hidden-sized
    activations, and no more blocks are recomputed than the budget requires."""
    results = run_checkpointing(g, 2)
    verify_recomputes(results)
    verify_budget(results)
