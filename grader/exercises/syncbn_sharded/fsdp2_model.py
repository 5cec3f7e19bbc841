"""03_syncbn_sharded, FSDP2 in practice: the small transformer-like model the tasks shard, and its initialization.

`TinyTransformer` is a stack of residual MLP blocks (LayerNorm, Linear, GELU, Linear, like a transformer's
feed-forward half) and a head. Some sizes are odd (the head has 3 outputs), so shards are uneven.

`TiedTransformer` is the model build_fsdp2_model shards: token embedding, blocks of their own widths, a final
LayerNorm and an output layer whose weight *is* the embedding's (tied, as in GPT-2 and Llama's small models).

`init_weights(model, seed)` gives the same numbers to a plain model and to one sharded by FSDP2: each element is a
formula of its position in the full parameter, not a draw from a random generator. (Every rank's CPU generator
would give each shard the first numbers of the stream, so a seeded `nn.init` on shards differs from the same
seeded `nn.init` in one process: measured on torch 2.13 CPU.)
"""

from __future__ import annotations

import math

import torch
from torch import nn

DIM, HIDDEN, OUT, DEPTH = 8, 16, 3, 3


class Block(nn.Module):
    """x + fc2(gelu(fc1(norm(x)))): one unit of FSDP2 wrapping."""

    def __init__(self, dim: int = DIM, hidden: int = HIDDEN):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


class TinyTransformer(nn.Module):
    """`blocks` (an nn.ModuleList of Block), then `head` (Linear(DIM, OUT)); `init_weights()` fills them."""

    def __init__(self, depth: int = DEPTH, seed: int = 0, dim: int = DIM, hidden: int = HIDDEN, out: int = OUT):
        super().__init__()
        self.seed = seed
        self.blocks = nn.ModuleList(Block(dim, hidden) for _ in range(depth))
        self.head = nn.Linear(dim, out)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def init_weights(self) -> None:
        """Fill every parameter in place (plain or sharded: the same numbers); what to call after to_empty."""
        init_weights(self, self.seed)


class TiedTransformer(nn.Module):
    """tokens -> `embed` (vocab, dim) -> `blocks` (Block of hidden width widths[i]) -> `norm` -> `head`, whose
    weight is `embed.weight` (one Parameter, two uses); `init_weights()` fills them."""

    def __init__(self, widths, vocab: int, seed: int = 0, dim: int = 12):
        super().__init__()
        self.seed = seed
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, width) for width in widths)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def init_weights(self) -> None:
        init_weights(self, self.seed)


def _local_rows(p: torch.Tensor) -> tuple[torch.Tensor, int, tuple]:
    """(this rank's tensor, its first row in the full parameter, the full shape) for a plain tensor or for a
    DTensor sharded on dim 0 over a 1-D mesh (FSDP2's layout: torch.chunk's split, the last chunks may be short)."""
    from torch.distributed.tensor import DTensor

    if not isinstance(p, DTensor):
        return p, 0, tuple(p.shape)
    rows, world = p.shape[0], p.device_mesh.size()
    chunk = -(-rows // world)
    return p.to_local(), min(p.device_mesh.get_local_rank() * chunk, rows), tuple(p.shape)


@torch.no_grad()
def init_weights(model: nn.Module, seed: int = 0) -> nn.Module:
    """Initialize every parameter in place, the same numbers whether `model` is plain or sharded (see above).
    Weights ~ 1/sqrt(fan_in) in size, biases small, LayerNorm weights near 1. Returns `model`; counts its calls in
    `model.init_weights_calls` (a check names a build that never called it)."""
    model.init_weights_calls = getattr(model, "init_weights_calls", 0) + 1
    for index, (name, p) in enumerate(model.named_parameters()):
        local, first, full = _local_rows(p)
        cols = math.prod(full[1:])
        position = torch.arange(local.numel(), dtype=torch.float64, device=local.device) + first * cols
        wave = torch.sin(position * 0.7 + index * 1.3 + seed * 0.37)
        if name.endswith("norm.weight"):
            values = 1.0 + 0.1 * wave
        elif len(full) >= 2:
            values = wave / math.sqrt(cols)
        else:
            values = 0.1 * wave
        local.copy_(values.view(local.shape).to(local.dtype))
    return model
