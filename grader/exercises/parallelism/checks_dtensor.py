"""01_parallelism: a SwiGLU MLP block tensor-parallelized with DeviceMesh and DTensor (column-then-row).

The lesson parallelizes a plain MLP (fc1, act, fc2); the task is a block it did not show:
down(silu(gate(x)) * up(x)), two column-parallel layers reading the same input. A plan that treats them as
two independent column-parallel layers all-reduces the input's gradient twice in backward; the design
asked for sums their partial gradients first, so one all-reduce remains.

One run per check: every rank builds the same block, hands it to the student's function with a 1-D mesh
over all ranks, then runs forward and backward on the same input. The rank sends back what it measured:
the output, the input's and every parameter's full gradient, each parameter's placements, and the
collectives the forward and the backward made (seen at the dispatcher). The parent compares with one
process and with what column-then-row communicates: one all-reduce in the forward (down's partial sums)
and one in the backward (the input's gradient), nothing else.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.host_copy import host as _host

# parameter -> (placement it must have, what that means); Shard(0) of a Linear weight = its output rows
LAYOUT = {
    "gate.weight": ("Shard(dim=0)", "gate column-parallel: each rank holds some of its output features (rows)"),
    "gate.bias": ("Shard(dim=0)", "gate's bias follows its output rows"),
    "up.weight": (
        "Shard(dim=0)",
        "up column-parallel, split like gate: a rank multiplies its own gate and up features elementwise",
    ),
    "up.bias": ("Shard(dim=0)", "up's bias follows its output rows"),
    "down.weight": (
        "Shard(dim=1)",
        "down row-parallel: each rank holds the input features its gate and up shards produced",
    ),
    "down.bias": ("Replicate()", "down's bias is added once, after the partial sums are reduced"),
}


# 24 hidden features split evenly over 1, 2, 3, 4, 6 or 8 ranks (--world-size): torch 2.13's RowwiseParallel
# rebuilds its input from the local shard assuming even shards, so an uneven split fails inside down (measured);
# the task text says the hidden size is a multiple of the world size
HIDDEN = 24


class SwiGLU(nn.Module):
    """The gated MLP of LLaMA-style transformers: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, h: int, bias: bool):
        super().__init__()
        self.gate, self.up, self.down = (
            nn.Linear(d, h, bias=bias),
            nn.Linear(d, h, bias=bias),
            nn.Linear(h, d, bias=bias),
        )

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def mlp_block(seed: int, d: int, h: int, bias: bool) -> nn.Module:
    torch.manual_seed(seed)
    return SwiGLU(d, h, bias)


def block_inputs(seed: int, shape):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)  # input, the loss's weights


def one_process(seed, d, h, bias, shape) -> dict:
    """The unsplit block's output and gradients of sum(output * probe)."""
    block = mlp_block(seed, d, h, bias)
    x, probe = block_inputs(seed, shape)
    x.requires_grad_(True)
    y = block(x)
    (y * probe).sum().backward()
    return {"y": y.detach(), "x_grad": x.grad, "grads": {name: p.grad for name, p in block.named_parameters()}}


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


def _block_in_rank(ctx, student, seed, d, h, bias, shape):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    block = mlp_block(seed, d, h, bias).to(ctx.device)
    x, probe = (t.to(ctx.device) for t in block_inputs(seed, shape))
    x.requires_grad_(True)
    model = student.task("parallelize_mlp")(block, mesh)
    if not isinstance(model, nn.Module):
        raise CheckFailed(f"parallelize_mlp returned {type(model).__name__}, not the nn.Module it parallelized")
    if model is not block:
        raise CheckFailed(
            f"parallelize_mlp returned a new {type(model).__name__}, not the mlp it was given: the "
            "contract is to parallelize mlp in place (parallelize_module changes the module you pass "
            "and returns it) and return that same module, so that code holding mlp (its optimizer, "
            "its owner) uses the parallel block"
        )
    params = dict(model.named_parameters())
    layout = {name: _layout(p) for name, p in params.items()}
    with record_collectives() as forward:
        y = _forward_of_plan(model, x, layout, ctx.world_size)
    if isinstance(y, DTensor):
        raise CheckFailed(
            f"the block's forward returned a DTensor ({y.placements}); the contract asks for a plain "
            "tensor: RowwiseParallel's default output (use_local_output=True) is one"
        )
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(shape):
        raise CheckFailed(
            f"the block's forward of an input of shape {tuple(shape)} returned "
            f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__}; expected the "
            f"full output {tuple(shape)} on every rank"
        )
    y_sent = _host(y)
    backward = []
    if y.requires_grad:
        with record_collectives() as backward:
            (y * probe).sum().backward()
    return {
        "y": y_sent,
        "x_grad": None if x.grad is None else _host(x.grad),
        "layout": layout,
        "grads": {name: _full(p.grad) for name, p in params.items()},
        "forward": [(c.kind, c.nbytes) for c in forward],
        "backward": [(c.kind, c.nbytes) for c in backward],
    }


def _forward_of_plan(model, x, layout: dict, world_size: int):
    """model(x); an error it raises, when the plan placed a parameter wrongly, said as that placement first."""
    try:
        return model(x)
    except Exception as error:
        placed = _layout_mistake(layout, world_size)
        if placed is None:
            raise
        first = (str(error).strip().splitlines() or [""])[0]
        raise CheckFailed(f"{placed}. With this plan the forward failed: {type(error).__name__}: {first}") from None


def run_block(g, world_size, d, h, bias, shape, seed=31):
    per_rank = g.run(_block_in_rank, seed, d, h, bias, shape, world_size=world_size)
    return per_rank, one_process(seed, d, h, bias, shape)


NOT_PARALLEL = (
    "no parameter of the returned module is a sharded DTensor: the block is not parallelized (every rank "
    "holds and computes all of it). Split it with parallelize_module and a plan for gate, up and down"
)


def check_values(g, per_rank, expected):
    for rank, got in enumerate(per_rank):
        if not any("Shard" in placement for placement, _ in got["layout"].values()):
            raise CheckFailed(f"rank {rank}: {NOT_PARALLEL}")  # right numbers from an unsplit block earn nothing
        g.assert_close(
            got["y"],
            expected["y"],
            f"rank {rank}: the block's output",
            "every rank must end with down(silu(gate(x)) * up(x)) of the unsplit block: gate and up "
            "split alike by output features, down by input features, and down's partial outputs summed "
            "over ranks",
        )
        if got["x_grad"] is None:
            raise CheckFailed(f"the input got no gradient on rank {rank}: the output must keep its autograd graph")
        g.assert_close(
            got["x_grad"],
            expected["x_grad"],
            f"rank {rank}: the input's gradient",
            "each rank's gate and up shards cover only its hidden features: the input gradients they "
            "give are partial, summed over ranks in backward",
        )
        for name, want in expected["grads"].items():
            have = got["grads"].get(name)
            if have is None:
                raise CheckFailed(
                    f"rank {rank}: {name} has no gradient (or no parameter of that name): keep "
                    "the block's gate, up and down and parallelize them in place"
                )
            g.assert_close(
                have,
                want,
                f"rank {rank}: {name}.grad (gathered over ranks)",
                "every parameter's gradient, put together from its shards, must equal the unsplit block's",
            )


def _named(calls) -> str:
    return ", ".join(f"{kind} ({nbytes} B)" for kind, nbytes in calls) or "no collective"


TWO_INPUT_REDUCES = (
    "gate and up each sum their own partial input gradient over ranks, one all_reduce each. Both "
    "read the same x: make x a replicated DTensor once, for the whole block, before gate and up "
    "see it; autograd then adds their two partial gradients on each rank and one all_reduce "
    "sums the result"
)


def _why(phase: str, calls) -> str | None:
    """Why the collectives of one phase are not column-then-row's one all_reduce; None when they are."""
    found = [kind for kind, _ in calls]
    if found == ["all_reduce"]:
        return None
    if not found:
        return (
            "the block is not tensor-parallel (every rank computes all of it); column-then-row makes one "
            "all_reduce in the forward (down's partial outputs) and one in the backward (the input's gradient)"
        )
    extra = [k for k in found if k != "all_reduce"]
    if extra:
        return (
            f"the extra {', '.join(sorted(set(extra)))} gathers an activation or its gradient that "
            "column-then-row never needs: with gate and up column-parallel and down row-parallel, each rank "
            "feeds its own hidden features straight into its down shard"
        )
    if phase == "backward" and len(found) == 2:
        return TWO_INPUT_REDUCES
    return "column-then-row needs exactly one all_reduce here"


def _collective_mistake(phase: str, calls) -> str | None:
    why = _why(phase, calls)
    if why is None:
        return None
    if not calls:
        return f"the {phase} made no collective: {why}"
    return f"the {phase} made {_named(calls)}; {why}"


def _layout_mistake(layout: dict, world_size: int) -> str | None:
    """What the plan placed wrongly, in the contract's words; None when every placement is right."""
    for name, (placement, meaning) in LAYOUT.items():
        have, local = layout.get(name, ("missing", ()))
        if have == "missing":
            if name.endswith(".bias"):
                continue  # the block of this check has no biases
            raise CheckFailed(
                f"the returned module has no parameter {name}: parallelize the block's gate, up "
                "and down in place and return it"
            )
        if have != placement and world_size > 1:
            held = f"placed {have}" if have else "a plain tensor (every rank holds all of it)"
            return f"{name} is {held}, shape {local} on this rank; expected {placement}: {meaning}"
    return None


def check_communication(g, per_rank, world_size):
    for rank, got in enumerate(per_rank):
        phases = ("forward", "backward") if world_size > 1 else ()  # one rank has nothing to exchange
        whys = [why for why in (_why(phase, got[phase]) for phase in phases) if why]
        placed = _layout_mistake(got["layout"], world_size)
        if whys and placed:  # the placement first: it is what the extra collectives come from
            forward, backward = got["forward"], got["backward"]
            raise CheckFailed(
                f"rank {rank}: {placed}. With this plan the forward made {_named(forward)} and the backward "
                f"made {_named(backward)} ({len(forward)} and {len(backward)} collective(s)), where "
                f"column-then-row makes one all_reduce in each: {whys[0]}"
            )
        mistake = next((m for m in (_collective_mistake(phase, got[phase]) for phase in phases) if m), placed)
        if mistake:
            raise CheckFailed(f"rank {rank}: {mistake}")


@EXERCISE.check("parallelize_mlp", points=3)
def dtensor_block_matches_one_process(g):
    """The grader's world size (2), SwiGLU 8 -> 24 -> 8 without biases: output, input gradient and every
    parameter's gradient."""
    per_rank, expected = run_block(g, g.world_size, 8, HIDDEN, False, (4, 8))
    check_values(g, per_rank, expected)


@EXERCISE.check("parallelize_mlp", points=3, depends_on=("dtensor_block_matches_one_process",))
def dtensor_block_is_column_then_row(g):
    """The grader's world size (2): the shards' placements, and one all_reduce in the forward and one in the backward."""
    per_rank, _ = run_block(g, g.world_size, 8, HIDDEN, False, (4, 8))
    check_communication(g, per_rank, g.world_size)
