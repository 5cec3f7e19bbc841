"""01_parallelism: an MLP block tensor-parallelized with DeviceMesh and DTensor (Megatron's column-then-row).

One run per check: every rank builds the same MLP (fc1, act, fc2), hands it to the student's function
with a 1-D mesh over all ranks, then runs forward and backward on the same input. The rank sends back
what it measured: the output, the input's and every parameter's full gradient, each parameter's
placements, and the collectives the forward and the backward made (seen at the dispatcher). The parent
compares with one process and with what column-then-row communicates: one all-reduce in the forward
(fc2's partial sums) and one in the backward (the input's gradient), nothing else.
"""
from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.parallelism.exercise import EXERCISE
from grader.exercises.parallelism.host import host as _host

# parameter -> (placement it must have, what that means); Shard(0) of a Linear weight = its output rows
LAYOUT = {
    "fc1.weight": ("Shard(dim=0)", "fc1 column-parallel: each rank holds some of its output features (rows)"),
    "fc1.bias": ("Shard(dim=0)", "fc1's bias follows its output rows"),
    "fc2.weight": ("Shard(dim=1)", "fc2 row-parallel: each rank holds the input features fc1's shard produced"),
    "fc2.bias": ("Replicate()", "fc2's bias is added once, after the partial sums are reduced"),
}


# 24 hidden features split evenly over 1, 2, 3, 4, 6 or 8 ranks (--world-size): torch 2.13's RowwiseParallel
# rebuilds its input from the local shard assuming even shards, so an uneven split fails inside fc2 (measured)
HIDDEN = 24


def mlp_block(seed: int, d: int, h: int, act: str) -> nn.Module:
    torch.manual_seed(seed)
    block = nn.Sequential()
    block.add_module("fc1", nn.Linear(d, h))
    block.add_module("act", nn.GELU() if act == "gelu" else nn.ReLU())
    block.add_module("fc2", nn.Linear(h, d))
    return block


def block_inputs(seed: int, shape):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)  # input, the loss's weights


def one_process(seed, d, h, act, shape) -> dict:
    """The unsplit block's output and gradients of sum(output * probe)."""
    block = mlp_block(seed, d, h, act)
    x, probe = block_inputs(seed, shape)
    x.requires_grad_(True)
    y = block(x)
    (y * probe).sum().backward()
    return {"y": y.detach(), "x_grad": x.grad,
            "grads": {name: p.grad for name, p in block.named_parameters()}}


def _layout(p) -> tuple[str, tuple]:
    from torch.distributed.tensor import DTensor
    if isinstance(p, DTensor):
        return ", ".join(repr(pl) for pl in p.placements), tuple(p.to_local().shape)
    return "", tuple(p.shape)  # a plain tensor: every rank holds all of it


def _full(t):
    from torch.distributed.tensor import DTensor
    if t is None:
        return None
    return _host(t.full_tensor() if isinstance(t, DTensor) else t)


def _block_in_rank(ctx, student, seed, d, h, act, shape):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    block = mlp_block(seed, d, h, act).to(ctx.device)
    x, probe = (t.to(ctx.device) for t in block_inputs(seed, shape))
    x.requires_grad_(True)
    model = student.task("parallelize_mlp")(block, mesh)
    if not isinstance(model, nn.Module):
        raise CheckFailed(f"parallelize_mlp returned {type(model).__name__}, not the nn.Module it parallelized")
    if model is not block:
        raise CheckFailed(f"parallelize_mlp returned a new {type(model).__name__}, not the mlp it was given: the "
                          "contract is to parallelize mlp in place (parallelize_module changes the module you pass "
                          "and returns it) and return that same module, so that code holding mlp (its optimizer, "
                          "its owner) uses the parallel block")
    params = dict(model.named_parameters())
    layout = {name: _layout(p) for name, p in params.items()}
    with record_collectives() as forward:
        y = model(x)
    if isinstance(y, DTensor):
        raise CheckFailed(f"the block's forward returned a DTensor ({y.placements}); the contract asks for a plain "
                          "tensor: RowwiseParallel's default output (use_local_output=True) is one")
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(shape):
        raise CheckFailed(f"the block's forward of an input of shape {tuple(shape)} returned "
                          f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__}; expected the "
                          f"full output {tuple(shape)} on every rank")
    y_sent = _host(y)
    backward = []
    if y.requires_grad:
        with record_collectives() as backward:
            (y * probe).sum().backward()
    return {"y": y_sent, "x_grad": None if x.grad is None else _host(x.grad), "layout": layout,
            "grads": {name: _full(p.grad) for name, p in params.items()},
            "forward": [(c.kind, c.nbytes) for c in forward], "backward": [(c.kind, c.nbytes) for c in backward]}


def run_block(g, world_size, d, h, act, shape, seed=31):
    per_rank = g.run(_block_in_rank, seed, d, h, act, shape, world_size=world_size)
    return per_rank, one_process(seed, d, h, act, shape)


NOT_PARALLEL = ("no parameter of the returned module is a sharded DTensor: the block is not parallelized (every rank "
                "holds and computes all of it). Split it with parallelize_module and a plan for fc1 and fc2")


def check_values(g, per_rank, expected):
    for rank, got in enumerate(per_rank):
        if not any("Shard" in placement for placement, _ in got["layout"].values()):
            raise CheckFailed(f"rank {rank}: {NOT_PARALLEL}")  # right numbers from an unsplit block earn nothing
        g.assert_close(got["y"], expected["y"], f"rank {rank}: the block's output",
                       "every rank must end with fc2(act(fc1(x))) of the unsplit block: fc1 column-parallel, "
                       "fc2 row-parallel, and the partial outputs summed over ranks")
        if got["x_grad"] is None:
            raise CheckFailed(f"the input got no gradient on rank {rank}: the output must keep its autograd graph")
        g.assert_close(got["x_grad"], expected["x_grad"], f"rank {rank}: the input's gradient",
                       "each rank's fc1 shard covers only its hidden features: their input gradients are summed "
                       "over ranks in backward (ColwiseParallel does it)")
        for name, want in expected["grads"].items():
            have = got["grads"].get(name)
            if have is None:
                raise CheckFailed(f"rank {rank}: {name} has no gradient (or no parameter of that name): keep "
                                  "the block's fc1 and fc2 and parallelize them in place")
            g.assert_close(have, want, f"rank {rank}: {name}.grad (gathered over ranks)",
                           "every parameter's gradient, put together from its shards, must equal the unsplit "
                           "block's")


def _named(calls) -> str:
    return ", ".join(f"{kind} ({nbytes} B)" for kind, nbytes in calls) or "no collective"


def _collective_mistake(phase: str, calls) -> str | None:
    found = [kind for kind, _ in calls]
    if found == ["all_reduce"]:
        return None
    if not found:
        return (f"the {phase} made no collective: the block is not tensor-parallel (every rank computes all of "
                "it); column-then-row makes one all_reduce in the forward (fc2's partial outputs) and one in "
                "the backward (the input's gradient)")
    extra = [k for k in found if k != "all_reduce"]
    why = (f"the extra {', '.join(sorted(set(extra)))} gathers an activation or its gradient that "
           "column-then-row never needs: with fc1 column-parallel (ColwiseParallel) and fc2 row-parallel "
           "(RowwiseParallel), each rank feeds its own hidden features straight into its fc2 shard"
           if extra else "column-then-row needs exactly one all_reduce here")
    return f"the {phase} made {_named(calls)}; {why}"


def check_communication(g, per_rank, world_size):
    for rank, got in enumerate(per_rank):
        for phase in ("forward", "backward") if world_size > 1 else ():  # one rank has nothing to exchange
            mistake = _collective_mistake(phase, got[phase])
            if mistake:
                raise CheckFailed(f"rank {rank}: {mistake}")
        for name, (placement, meaning) in LAYOUT.items():
            have, local = got["layout"].get(name, ("missing", ()))
            if have == "missing":
                raise CheckFailed(f"the returned module has no parameter {name}: parallelize the block's fc1 and "
                                  "fc2 in place and return it")
            if have != placement and world_size > 1:
                held = f"placements ({have})" if have else "a plain tensor (every rank holds all of it)"
                raise CheckFailed(f"rank {rank}: {name} is {held}, shape {local} on this rank; expected {placement}: "
                                  f"{meaning}")


@EXERCISE.check("parallelize_mlp", points=3)
def dtensor_block_matches_one_process(g):
    """The grader's world size (2), 8 -> 24 -> 8 with ReLU: output, input gradient and every parameter's gradient."""
    per_rank, expected = run_block(g, g.world_size, 8, HIDDEN, "relu", (4, 8))
    check_values(g, per_rank, expected)


@EXERCISE.check("parallelize_mlp", points=3)
def dtensor_block_is_column_then_row(g):
    """The grader's world size (2): the shards' placements, and one all_reduce in the forward and one in the backward."""
    per_rank, _ = run_block(g, g.world_size, 8, HIDDEN, "relu", (4, 8))
    check_communication(g, per_rank, g.world_size)
