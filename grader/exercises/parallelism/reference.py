"""Single-process references and the small models and data the checks use.

Everything here is deterministic from a seed, so the parent (which computes
the expected values) and every rank (which runs the student's code) build
the very same tensors without sending them around.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------- sharding
def contiguous_shards(n_samples: int, world_size: int) -> list[list[int]]:
    """The split the other checks use (so they never depend on the student's
    shard_indices): contiguous blocks, the first n % world_size one larger."""
    return [block.tolist() for block in torch.tensor_split(torch.arange(n_samples), world_size)]


# ------------------------------------------------------- data parallelism
def mlp(seed: int, frozen_first: bool = False) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    if frozen_first:
        # A frozen layer (grad stays None) and an unused parameter: real
        # models have both, and average_gradients must skip them.
        model[0].requires_grad_(False)
        model.register_parameter("unused", nn.Parameter(torch.zeros(2)))
    return model


def regression_batch(seed: int, n: int, in_features: int = 6, out_features: int = 3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, in_features, generator=g), torch.randn(n, out_features, generator=g)


def full_batch_gradients(model_seed: int, data_seed: int, n: int, frozen_first: bool = False) -> dict:
    """Gradients of the mean loss over the whole batch, in one process."""
    model = mlp(model_seed, frozen_first)
    x, y = regression_batch(data_seed, n)
    F.mse_loss(model(x), y).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


# --------------------------------------------------------- ring all-reduce
def rank_tensor(seed: int, rank: int, length: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randn(length, generator=g)


def ring_expected(seed: int, world_size: int, length: int) -> torch.Tensor:
    return sum(rank_tensor(seed, r, length) for r in range(world_size))


def ring_chunk_bound(length: int, world_size: int) -> int:
    """The largest chunk of a ring: ceil(length / world_size)."""
    return -(-length // world_size)


# ------------------------------------------------------- tensor parallelism
def linear_weights(seed: int, in_features: int, out_features: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out_features, in_features, generator=g), torch.randn(out_features, generator=g)


def output_rows(out_features: int, world_size: int, rank: int) -> tuple[int, int]:
    """[start, stop) of the output features rank holds (the task's contract)."""
    sizes = [len(b) for b in torch.tensor_split(torch.arange(out_features), world_size)]
    start = sum(sizes[:rank])
    return start, start + sizes[rank]


def linear_inputs(seed: int, shape: tuple, out_features: int):
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(*shape, generator=g)
    # A fixed, non-uniform output gradient: loss = (y * probe).sum().
    probe = torch.randn(*shape[:-1], out_features, generator=g)
    return x, probe


def linear_reference(seed: int, in_features: int, out_features: int, shape: tuple) -> dict:
    weight, bias = linear_weights(seed, in_features, out_features)
    weight.requires_grad_(True)
    bias.requires_grad_(True)
    x, probe = linear_inputs(seed, shape, out_features)
    x.requires_grad_(True)
    y = F.linear(x, weight, bias)
    (y * probe).sum().backward()
    return {"y": y.detach(), "weight_grad": weight.grad, "bias_grad": bias.grad, "x_grad": x.grad}


# ----------------------------------------------------- pipeline parallelism
HIDDEN = 5


def pipeline_stages(seed: int, in_features: int = 4, out_features: int = 3) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(seed)
    first = nn.Sequential(nn.Linear(in_features, HIDDEN), nn.Tanh())
    second = nn.Sequential(nn.Linear(HIDDEN, 6), nn.Tanh(), nn.Linear(6, out_features))
    return first, second


def pipeline_batch(seed: int, n: int, in_features: int = 4, out_features: int = 3):
    return regression_batch(seed, n, in_features, out_features)


def pipeline_reference(model_seed: int, data_seed: int, n: int) -> dict:
    """The loss and both stages' gradients of one unsplit model, whole batch."""
    first, second = pipeline_stages(model_seed)
    x, y = pipeline_batch(data_seed, n)
    loss = F.mse_loss(second(first(x)), y)
    loss.backward()
    return {"loss": loss.item(),
            "grads": [[p.grad.clone() for p in stage.parameters()] for stage in (first, second)]}


def microbatch_sizes(n: int, n_microbatches: int) -> list[int]:
    return [len(b) for b in torch.tensor_split(torch.arange(n), n_microbatches)]
