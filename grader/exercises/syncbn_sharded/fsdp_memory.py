"""03_syncbn_sharded, MiniFSDP: are the full parameters really freed after each layer's forward?

FSDP's point is that a rank never holds more than about one layer's full parameters. Setting an empty
tensor in the module's attribute frees nothing: `F.linear` saved the gathered weight for backward, so
every layer's full weight stays alive until backward reaches it. That is only visible in memory, so a
rank measures it, never with a duration (live_bytes.py): the peak bytes, over forward and over backward,
of the tensors alive at once that are larger than half a layer's full weight: full parameters and full
gradients. The batch here is 2 rows, so activations are far smaller. The wrapper's own parameters (its
shards, however laid out and viewed) and their gradients never count: a rank keeps them anyway.

Student code can switch the measuring mode off (dispatch_mode.py), so a second measurement, outside it, must
agree: a forward hook of ours on each layer (registered before the student's wrapper sees the model) keeps a
weak reference to the full weight and bias the layer ran with, and after forward the bytes of those still alive
count too. The same hook, and a hook on each layer's output gradient in backward, ask whether the grader's
modes still see operators (`modes_on`): a layer run with them off fails the check.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.dispatch_mode import SWITCHED_OFF, modes_on
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded.live_bytes import LiveBytes, StorageWeakRef, live_nbytes, storage_key

LAYERS, WIDTH, ROWS = 8, 32, 2


def deep_net(seed: int) -> nn.Module:
    """LAYERS square Linear layers: all of their full weights together are LAYERS times one layer's."""
    ref.seed_cpu(seed)
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


class LayerWatch:
    """Hooks of ours on deep_net's layers, outside any dispatch mode: the full parameters each layer ran with
    (weak references), how many forwards ran, and how many layers ran while the grader's modes were off."""

    def __init__(self, net: nn.Module):
        self.refs: dict[int, StorageWeakRef] = {}
        self.forwards = self.off = 0
        for layer in net:
            if isinstance(layer, nn.Linear):
                layer.register_forward_hook(self.after_forward)

    def after_forward(self, layer, args, out):
        self.forwards += 1
        self.off += not modes_on()
        full = {"weight": WIDTH * WIDTH, "bias": WIDTH}
        for name, numel in full.items():
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor) and t.numel() == numel and t.device.type != "meta":
                weak = StorageWeakRef(t.untyped_storage())
                self.refs[weak.cdata] = weak
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(self.in_backward)

    def in_backward(self, grad):
        self.off += not modes_on()

    def alive(self, persistent) -> int:
        """The bytes of the full parameters the layers ran with that are still alive (the wrapper's own
        parameters left out)."""
        kept = {storage_key(t) for t in persistent() if isinstance(t, torch.Tensor)}
        return sum(live_nbytes(w) for key, w in self.refs.items() if key not in kept)


def layer_bytes(world: int) -> int:
    """One layer's full fp32 parameters (weight and bias), padded to a multiple of the world size: the same whether a
    wrapper shards each parameter or the layer's parameters flattened together (up to one padding element)."""
    return (-(-WIDTH * WIDTH // world) + -(-WIDTH // world)) * world * 4


def weight_bytes() -> int:
    """One layer's full fp32 weight: what the live-bytes mode counts is larger than half of it."""
    return WIDTH * WIDTH * 4


def kept_by_the_wrapper(fsdp: nn.Module, world: int):
    """What a rank keeps between steps and may view during one: the wrapper's parameters and their gradients,
    as long as they are shards (about 1/world of the model); full-sized ones count like any gathered copy."""
    params = list(fsdp.parameters())
    sharded = sum(p.numel() for p in params) <= LAYERS * (WIDTH * WIDTH + WIDTH) // world + 4 * LAYERS * world
    return lambda: [t for p in params for t in (p, p.grad) if t is not None] if sharded else []


def measure_step(ctx, fsdp, watch: LayerWatch) -> dict:
    """One forward and backward of `fsdp` (wrapping deep_net) on a 2-row batch whose input needs a gradient, so
    that every layer's weight is needed again in backward: the peaks, each phase's collectives, and the second
    measurement (watch: hooks on deep_net's layers)."""
    g = torch.Generator().manual_seed(11 + ctx.rank)
    x = torch.randn(ROWS, WIDTH, generator=g).to(ctx.device).requires_grad_()
    persistent = kept_by_the_wrapper(fsdp, ctx.world_size)
    tracker = LiveBytes(above=weight_bytes() // 2, persistent=persistent)
    with record_collectives() as forward_calls, tracker:
        loss = fsdp(x).float().square().mean()
        tracker.sample()
    held = watch.alive(persistent)  # outside the mode: what the layers ran with and autograd still keeps
    forwards = watch.forwards
    tracker.phase = "backward"
    with record_collectives() as backward_calls, tracker:
        loss.backward()
    return {
        "peak": dict(tracker.peak) | {"held": held},
        "forwards": forwards,
        "off": watch.off,
        "forward_calls": [(c.kind, c.dtype, c.numel) for c in forward_calls],
        "backward_calls": [(c.kind, c.dtype, c.numel) for c in backward_calls],
    }


def backward_layers() -> int:
    return LAYERS // 2 + 1


def verify_freed(results, world: int) -> None:
    """Peak full-parameter bytes: forward at most ~1 layer (2 allowed: the next gathered before the last freed),
    backward at most half the model's layers plus one: a re-gathered weight and its full gradient, which a flat
    buffer per layer makes up to ~4 layers' worth (each parameter's slice of the flat gradient is a full-sized
    zero-padded buffer while autograd sums them); freeing nothing in backward holds every layer's."""
    one = layer_bytes(world)
    for rank, got in enumerate(results):
        if got["off"]:
            raise CheckFailed(f"rank {rank}: {got['off']} layer forward(s) or backward(s) ran while " + SWITCHED_OFF)
        if got["forwards"] != LAYERS:
            raise CheckFailed(
                f"rank {rank}: the model's {LAYERS} Linear layers ran {got['forwards']} forward(s) "
                "(the grader's hooks on them count): fsdp(x) must run the module, each layer once, "
                "and leave the module's hooks in place"
            )
        peak = got["peak"]
        peak["forward"] = max(peak["forward"], peak["held"])  # the two measurements: the larger one counts
        if peak["forward"] > 2 * one:
            raise CheckFailed(
                f"rank {rank}: during forward {peak['forward']} bytes of full parameters were alive at once, "
                f"{peak['forward'] / one:.1f} layers' worth of a {LAYERS}-layer model (one layer's full parameters are "
                f"{one} bytes): the full parameters are not freed after each layer's forward. Putting an empty "
                "tensor in their place is not enough: the layer's operation (F.linear) saved the gathered weight for "
                "backward, so autograd keeps it alive. Save only the shard (an autograd Function, or "
                "torch.autograd.graph.saved_tensors_hooks that pack a gathered parameter as a token) and all-gather "
                "it again in backward"
            )
        if peak["backward"] > backward_layers() * one:
            raise CheckFailed(
                f"rank {rank}: during backward {peak['backward']} bytes of full parameters and gradients were alive "
                f"at once, {peak['backward'] / one:.1f} layers' worth (at most {backward_layers()}; one layer's full "
                f"parameters are {one} bytes): "
                "gather each layer's full parameters just before its backward, reduce-scatter its full gradient, "
                "and drop both before the next layer"
            )
    verify_regathered(results)


def verify_regathered(results) -> None:
    """Backward all-gathers every layer's weight again (the forward's copies were freed)."""
    weights = LAYERS * WIDTH * WIDTH
    for rank, got in enumerate(results):
        world = len(results)
        forward = sum(n for kind, _, n in got["forward_calls"] if kind == "all_gather") * world
        backward = sum(n for kind, _, n in got["backward_calls"] if kind == "all_gather") * world
        if forward < weights:
            raise CheckFailed(
                f"rank {rank}: forward all-gathered {forward} elements, the layers' weights have "
                f"{weights}: all-gather each layer's full parameters before its forward"
            )
        if backward < weights:
            raise CheckFailed(
                f"rank {rank}: backward all-gathered {backward} elements, the layers' weights have "
                f"{weights}: after forward freed them, each layer's full parameters must be "
                "all-gathered again before its gradients are computed (two all-gathers per layer and "
                "step: forward and backward)"
            )


def _in_rank_memory(ctx, student, seed: int):
    """One step of the student's MiniFSDP on deep_net: peak full-parameter bytes and each phase's collectives."""
    cls = student.task("MiniFSDP")
    net = deep_net(seed).to(ctx.device)
    watch = LayerWatch(net)  # before the student's wrapper sees the model: our hooks run first
    with record_collectives():
        fsdp = cls(net)
    return measure_step(ctx, fsdp, watch)


def run_memory(g, seed: int) -> list:
    """Every rank's measurements of one MiniFSDP step on deep_net(seed) (a check's run of _in_rank_memory)."""
    results = g.run(_in_rank_memory, seed)
    keys = {"peak", "forwards", "off", "forward_calls", "backward_calls"}
    if any(not isinstance(got, dict) or set(got) != keys for got in results):
        raise CheckFailed(
            "the ranks did not send back their measurements: the grader's code in the ranks was changed or cut short"
        )
    return results
