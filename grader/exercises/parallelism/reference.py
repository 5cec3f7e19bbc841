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
def equal_shard(n_samples: int, world_size: int, rank: int) -> slice:
    """Rank's block of a batch that splits evenly (the other checks' split, so they never
    depend on the student's shard_indices; uneven batches are shard_indices' own question)."""
    if n_samples % world_size:
        raise ValueError(f"{n_samples} samples do not split evenly over {world_size} ranks")
    size = n_samples // world_size
    return slice(rank * size, (rank + 1) * size)


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
class Transpose(nn.Module):
    """Swaps two dimensions: a stage whose output is not contiguous in memory,
    as after attention's head reshuffles (dist.send refuses such tensors)."""

    def __init__(self, dim0: int, dim1: int):
        super().__init__()
        self.dim0, self.dim1 = dim0, dim1

    def forward(self, x):
        return x.transpose(self.dim0, self.dim1)


# kind -> what the messages say about it
PIPELINE_CASES = {
    "mlp": "2-D activation (n, 5), nn.MSELoss()",
    "mlp_sum": "2-D activation (n, 5), nn.MSELoss(reduction='sum')",
    "sequence": "non-contiguous 3-D activation (n, 3, 5), nn.CrossEntropyLoss() with integer class targets",
}


def pipeline_case(kind: str, n: int, seed: int = 31):
    """(first stage, second stage, inputs, targets, loss_fn): one model cut in
    two after its first stage, and a batch of n samples."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    if kind in ("mlp", "mlp_sum"):
        first = nn.Sequential(nn.Linear(4, 5), nn.Tanh())
        second = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
        inputs, targets = torch.randn(n, 4, generator=g), torch.randn(n, 3, generator=g)
        loss_fn = nn.MSELoss(reduction="sum" if kind == "mlp_sum" else "mean")
    elif kind == "sequence":
        # Sequences (n, 5, 4) -> activations (n, 3, 5), transposed -> logits of 4 classes. Rank 1's
        # stage starts with a Flatten, so nothing in it tells the activation's shape: only a header can.
        first = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), Transpose(1, 2))
        second = nn.Sequential(nn.Flatten(1), nn.Linear(15, 4))
        inputs = torch.randn(n, 5, 4, generator=g)
        targets = torch.randint(0, 4, (n,), generator=g)
        loss_fn = nn.CrossEntropyLoss()
    else:
        raise ValueError(f"unknown pipeline case {kind!r}")
    return first, second, inputs, targets, loss_fn


def pipeline_description(kind: str, n: int) -> str:
    return f"{n} samples, " + PIPELINE_CASES[kind].replace("(n,", f"({n},")


def pipeline_reference(kind: str, n: int) -> dict:
    """The loss and both stages' gradients of the unsplit model, in one process."""
    first, second, inputs, targets, loss_fn = pipeline_case(kind, n)
    loss = loss_fn(second(first(inputs)), targets)
    loss.backward()
    return {"loss": loss.item(), "grads": [[p.grad.clone() for p in stage.parameters()] for stage in (first, second)]}
