"""03_syncbn_sharded, MiniFSDP: are the full parameters really freed after each layer's forward?

FSDP's point is that a rank never holds more than about one layer's full parameters. Setting an empty
tensor in the module's attribute frees nothing: `F.linear` saved the gathered weight for backward, so
every layer's full weight stays alive until backward reaches it. That is only visible in memory, so a
rank measures it, never with a duration (live_bytes.py): the peak bytes, over forward and over backward,
of the tensors alive at once that are larger than one shard: full parameters and full gradients. The
batch here is 2 rows, so activations are far smaller than a shard, and the shards and their gradients
are not larger than one.
"""
from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded.live_bytes import LiveBytes

LAYERS, WIDTH, ROWS = 8, 32, 2


def deep_net(seed: int) -> nn.Module:
    """LAYERS square Linear layers: all of their full weights together are LAYERS times one layer's."""
    ref.seed_cpu(seed)
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def layer_bytes(world: int) -> int:
    """One layer's full fp32 weight, padded to a multiple of the world size."""
    return -(-WIDTH * WIDTH // world) * world * 4


def shard_bytes(world: int) -> int:
    return -(-WIDTH * WIDTH // world) * 4


def measure_step(ctx, fsdp) -> dict:
    """One forward and backward of `fsdp` (wrapping deep_net) on a 2-row batch whose input needs a gradient, so
    that every layer's weight is needed again in backward: the peaks and each phase's collectives."""
    g = torch.Generator().manual_seed(11 + ctx.rank)
    x = torch.randn(ROWS, WIDTH, generator=g).requires_grad_()
    tracker = LiveBytes(above=shard_bytes(ctx.world_size))
    with record_collectives() as forward_calls, tracker:
        loss = fsdp(x).float().square().mean()
        tracker.sample()
    tracker.phase = "backward"
    with record_collectives() as backward_calls, tracker:
        loss.backward()
    return {"peak": dict(tracker.peak),
            "forward_calls": [(c.kind, c.dtype, c.numel) for c in forward_calls],
            "backward_calls": [(c.kind, c.dtype, c.numel) for c in backward_calls]}


def verify_freed(results, world: int) -> None:
    """Peak full-parameter bytes: forward at most ~1 layer (2 allowed: the next gathered before the last freed),
    backward at most ~3 (a re-gathered weight, its full gradient and one copy of it)."""
    one = layer_bytes(world)
    for rank, got in enumerate(results):
        peak = got["peak"]
        if peak["forward"] > 2 * one:
            raise CheckFailed(
                f"rank {rank}: at the end of forward {peak['forward']} bytes of full parameters were still alive, "
                f"{peak['forward'] / one:.1f} layers' worth of a {LAYERS}-layer model (one layer's full weight is "
                f"{one} bytes): the full parameters are not freed after each layer's forward. Putting an empty "
                "tensor in their place is not enough: the layer's operation (F.linear) saved the gathered weight for "
                "backward, so autograd keeps it alive. Save only the shard (an autograd Function, or "
                "torch.autograd.graph.saved_tensors_hooks that pack a gathered parameter as a token) and all-gather "
                "it again in backward")
        if peak["backward"] > 3 * one:
            raise CheckFailed(
                f"rank {rank}: during backward {peak['backward']} bytes of full parameters and gradients were alive "
                f"at once, {peak['backward'] / one:.1f} layers' worth (one layer's full weight is {one} bytes): "
                "gather each layer's full parameters just before its backward, reduce-scatter its full gradient, "
                "and drop both before the next layer")
    verify_regathered(results)


def verify_regathered(results) -> None:
    """Backward all-gathers every layer's weight again (the forward's copies were freed)."""
    weights = LAYERS * WIDTH * WIDTH
    for rank, got in enumerate(results):
        world = len(results)
        forward = sum(n for kind, _, n in got["forward_calls"] if kind == "all_gather") * world
        backward = sum(n for kind, _, n in got["backward_calls"] if kind == "all_gather") * world
        if forward < weights:
            raise CheckFailed(f"rank {rank}: forward all-gathered {forward} elements, the layers' weights have "
                              f"{weights}: all-gather each layer's full parameters before its forward")
        if backward < weights:
            raise CheckFailed(f"rank {rank}: backward all-gathered {backward} elements, the layers' weights have "
                              f"{weights}: after forward freed them, each layer's full parameters must be "
                              "all-gathered again before its gradients are computed (two all-gathers per layer and "
                              "step: forward and backward)")
