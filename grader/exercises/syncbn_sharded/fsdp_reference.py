"""MiniFSDP's reference: the models, micro-batches and optimizers its training runs use, and the plain model
trained on the full batch that every run must reproduce (grader-side; checks_fsdp.py and hidden_fsdp.py)."""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from grader.exercises.syncbn_sharded import reference as ref

FSDP_STEPS = 3


def fsdp_net(seed: int, odd: bool = False) -> nn.Module:
    """Several Linear layers; `odd`: sizes no world size divides and a bias-free layer (padding matters)."""
    ref.seed_cpu(seed)
    if odd:
        return nn.Sequential(nn.Linear(7, 11), nn.Tanh(), nn.Linear(11, 5, bias=False), nn.Tanh(), nn.Linear(5, 3))
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


def micro_batch(rank: int, features: int, outputs: int, seed: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + rank)
    return torch.randn(6, features, generator=g), torch.randn(6, outputs, generator=g)


def in_out_features(model):
    first, last = model[0], model[-1]
    return first.in_features, last.out_features


def make_optimizer(params, name: str):
    """SGD shows a missing average (AdamW would hide a gradient's scale); AdamW has state to count."""
    return torch.optim.SGD(params, lr=0.1) if name == "sgd" else torch.optim.AdamW(params, lr=1e-2)


def unsharded_training(seed: int, odd: bool, world_size: int, opt_name: str = "sgd") -> dict:
    """The plain model on the full batch: what every MiniFSDP run must reproduce (a copy: callers may keep it)."""
    return {k: v.clone() for k, v in _unsharded_training(seed, odd, world_size, opt_name).items()}


@lru_cache(maxsize=None)  # the grader's own computation from constants: the same for every check and submission
def _unsharded_training(seed: int, odd: bool, world_size: int, opt_name: str) -> dict:
    model = fsdp_net(seed, odd)
    opt = make_optimizer(model.parameters(), opt_name)
    batches = [micro_batch(r, *in_out_features(model)) for r in range(world_size)]
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    ref.train_steps(model, opt, x, y, FSDP_STEPS)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def numels(seed: int, odd: bool) -> list[int]:
    return [p.numel() for p in fsdp_net(seed, odd).parameters()]
