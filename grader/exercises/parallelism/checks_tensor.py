"""01_parallelism: ColumnParallelLinear, a tensor-parallel layer built by hand."""

from __future__ import annotations

import torch

from grader.checks import CheckFailed
from grader.exercises.parallelism import reference as ref
from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.host_copy import host as _host


# ===================================================== ColumnParallelLinear
def _column_in_rank(ctx, student, seed, in_features, out_features, shape):
    cls = student.task("ColumnParallelLinear")
    layer = cls(in_features, out_features).to(ctx.device)
    start, stop = ref.output_rows(out_features, ctx.world_size, ctx.rank)  # on the CPU: two ints
    rows = stop - start
    weight, bias = getattr(layer, "weight", None), getattr(layer, "bias", None)
    if not isinstance(weight, torch.nn.Parameter) or not isinstance(bias, torch.nn.Parameter):
        raise CheckFailed(
            "ColumnParallelLinear must have nn.Parameter attributes `weight` and `bias` "
            "(this rank's shard of the full layer's weight and bias)"
        )
    if tuple(weight.shape) != (rows, in_features) or tuple(bias.shape) != (rows,):
        raise CheckFailed(
            f"ColumnParallelLinear({in_features}, {out_features}) on rank {ctx.rank} of {ctx.world_size} has "
            f"weight {tuple(weight.shape)} and bias {tuple(bias.shape)}; expected ({rows}, {in_features}) and "
            f"({rows},): rank r holds the output rows torch.tensor_split(torch.arange(out_features), "
            f"world_size)[r] (here {start}..{stop - 1})"
        )
    held = sum(p.numel() for p in layer.parameters())
    if held != rows * (in_features + 1):
        raise CheckFailed(
            f"the layer holds {held} parameter elements on rank {ctx.rank}, but its shard is "
            f"{rows * (in_features + 1)}: keep only this rank's rows, not the full weight"
        )
    full_w, full_b = ref.linear_weights(seed, in_features, out_features)  # on the CPU: copy_ moves them
    with torch.no_grad():
        weight.copy_(full_w[start:stop])
        bias.copy_(full_b[start:stop])
    x, probe = (t.to(ctx.device) for t in ref.linear_inputs(seed, shape, out_features))
    x.requires_grad_(True)
    y = layer(x)
    if not isinstance(y, torch.Tensor):
        raise CheckFailed(f"forward returned {type(y).__name__}, not a tensor")
    if tuple(y.shape) != tuple(probe.shape):
        raise CheckFailed(
            f"forward of an input of shape {tuple(shape)} returned shape {tuple(y.shape)} on rank "
            f"{ctx.rank}; expected the full output {tuple(probe.shape)}: gather every rank's "
            "output columns and concatenate them along the last dimension, in rank order"
        )
    if not y.requires_grad:
        return {
            "y": _host(y),
            "weight_grad": None,
            "bias_grad": None,
            "x_grad": None,
            "no_graph": True,
            "backend": ctx.backend,
        }
    (y * probe).sum().backward()
    grad = lambda t: None if t.grad is None else _host(t.grad)  # noqa: E731
    return {
        "y": _host(y),
        "weight_grad": grad(weight),
        "bias_grad": grad(bias),
        "x_grad": grad(x),
        "no_graph": False,
        "rows": (start, stop),
        "backend": ctx.backend,
    }


def _run_column(g, world_size, in_features, out_features, shape, seed=21):
    per_rank = g.run(_column_in_rank, seed, in_features, out_features, shape, world_size=world_size)
    return per_rank, ref.linear_reference(seed, in_features, out_features, shape)


def _check_column_forward(g, per_rank, expected):
    for rank, got in enumerate(per_rank):
        g.assert_close(
            got["y"],
            expected["y"],
            f"rank {rank}: ColumnParallelLinear output",
            "each rank computes x @ weight_shard.T + bias_shard, and the full output is the shards' "
            "outputs concatenated along the last dimension in rank order",
        )


def _check_column_shard_grads(g, per_rank, expected, world_size):
    for rank, got in enumerate(per_rank):
        if got["no_graph"] or got["weight_grad"] is None:
            raise CheckFailed(
                f"no gradient reached the weight shard on rank {rank}: the gather in forward must "
                "be autograd-aware (dist.all_gather is not: wrap it in a torch.autograd.Function "
                "whose backward returns this rank's slice of the output gradient)"
            )
        start, stop = got["rows"]
        for name in ("weight_grad", "bias_grad"):
            want = expected[name][start:stop]
            if world_size > 1 and g.close(got[name], want * world_size):
                raise CheckFailed(
                    f"on rank {rank} the {name.split('_')[0]} shard's gradient is {world_size} times too large: "
                    "the backward of torch.distributed.nn.functional.all_gather sums the output gradient over "
                    "ranks, which multiplies it by world_size when every rank computes the same loss. Write your "
                    "own autograd.Function whose backward keeps only this rank's slice of the gradient"
                )
            g.assert_close(
                got[name],
                want,
                f"rank {rank}: {name.replace('_grad', '')}.grad of the shard",
                "each shard's gradient must be the matching rows of the full layer's gradient",
            )


def _check_column_input_grad(g, per_rank, expected):
    for rank, got in enumerate(per_rank):
        if got["x_grad"] is None:
            raise CheckFailed(f"the input got no gradient on rank {rank}")
        g.assert_close(
            got["x_grad"],
            expected["x_grad"],
            f"rank {rank}: the input's gradient",
            "each rank's input gradient covers only its own output columns; sum it over ranks in "
            "backward (an identity autograd.Function on the input whose backward all-reduces)",
        )


@EXERCISE.check("ColumnParallelLinear", points=2)
def column_parallel_forward(g):
    """The grader's world size (2), 4 -> 6 features: every rank holds 3 output rows and returns the full output."""
    per_rank, expected = _run_column(g, g.world_size, 4, 6, (5, 4))
    _check_column_forward(g, per_rank, expected)


@EXERCISE.check("ColumnParallelLinear", points=3, depends_on=("column_parallel_forward",))
def column_parallel_shard_gradients(g):
    """The grader's world size (2): each shard's weight and bias gradients equal its rows of the full layer's gradients."""
    per_rank, expected = _run_column(g, g.world_size, 4, 6, (5, 4))
    _check_column_forward(g, per_rank, expected)
    _check_column_shard_grads(g, per_rank, expected, g.world_size)


@EXERCISE.check(
    "ColumnParallelLinear", points=2, depends_on=("column_parallel_forward", "column_parallel_shard_gradients")
)
def column_parallel_input_gradient(g):
    """The grader's world size (2): the input gradient is the full layer's, on every rank."""
    per_rank, expected = _run_column(g, g.world_size, 4, 6, (5, 4))
    _check_column_input_grad(g, per_rank, expected)
