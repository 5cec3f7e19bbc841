"""The mixture-of-experts setting of the expert-parallel task, and one process's answer (parent side).

Every expert is a small MLP (d -> hidden -> d); expert e lives on rank e // per_rank. Each rank holds its own
tokens, a router's top-k choice for them (the experts' global ids, distinct per token) and the gates (the
router's weights for those experts). The routing is drawn from `weights` over the experts: a weight of 0 keeps
an expert, and possibly a whole rank, without tokens; unequal weights skew the load.

One process runs every rank's tokens through every expert it chose and returns the outputs, the gradients of
sum over ranks of sum(y_r * probe_r) with respect to each rank's tokens and gates, and the experts' gradients.
"""

from __future__ import annotations

import torch
from torch import nn


def make_experts(seed: int, n_experts: int, d: int, hidden: int) -> nn.ModuleList:
    torch.manual_seed(seed)
    return nn.ModuleList(nn.Sequential(nn.Linear(d, hidden), nn.Tanh(), nn.Linear(hidden, d)) for _ in range(n_experts))


def local_experts(setting: dict, rank: int) -> nn.ModuleList:
    """Rank's experts (the same weights as one process's experts rank * per_rank, ...)."""
    per_rank = setting["per_rank"]
    every = make_experts(setting["seed"], per_rank * setting["world_size"], setting["d"], setting["hidden"])
    return nn.ModuleList(every[rank * per_rank : (rank + 1) * per_rank])


def rank_inputs(seed: int, rank: int, n: int, d: int, k: int, weights: list[float], device="cpu") -> dict:
    """Rank's tokens, the router's choice (ids, gates) and the loss's weights (probe), on `device` (drawn on the
    CPU: the same numbers on every machine)."""
    g = torch.Generator().manual_seed(seed * 100 + rank + 1)
    x = torch.randn(n, d, generator=g)
    ids = torch.multinomial(torch.tensor(weights, dtype=torch.float32).expand(n, -1), k, replacement=False, generator=g)
    gates = 0.2 + 0.8 * torch.rand(n, k, generator=g)  # the router's probabilities of its choices: not 1 for top-1
    drawn = {"x": x, "ids": ids, "gates": gates, "probe": torch.randn(n, d, generator=g)}
    return {key: t.to(device) for key, t in drawn.items()}


def owner(expert: int, per_rank: int) -> int:
    return expert // per_rank


def one_process(setting: dict) -> dict:
    """Per rank: the outputs (gated and ungated), the gradients of the tokens and gates; per expert: its
    parameters' gradients (None for an expert no token chose)."""
    n_experts = setting["per_rank"] * setting["world_size"]
    experts = make_experts(setting["seed"], n_experts, setting["d"], setting["hidden"])
    inputs = [
        rank_inputs(setting["seed"], rank, n, setting["d"], setting["k"], setting["weights"])
        for rank, n in enumerate(setting["tokens"])
    ]
    ys, ungated, loss = [], [], 0.0
    for inp in inputs:
        x, gates = inp["x"].requires_grad_(), inp["gates"].requires_grad_()
        each = torch.stack([torch.stack([experts[int(e)](row) for e in chosen]) for row, chosen in zip(x, inp["ids"])])
        y = (gates.unsqueeze(-1) * each).sum(1)  # each: (n, k, d)
        loss = loss + (y * inp["probe"]).sum()
        ys.append(y.detach())
        ungated.append(each.sum(1).detach())
    loss.backward()
    return {
        "inputs": [{key: t.detach() for key, t in inp.items()} for inp in inputs],
        "y": ys,
        "ungated": ungated,
        "x_grad": [inp["x"].grad for inp in inputs],
        "gates_grad": [inp["gates"].grad for inp in inputs],
        "experts": {e: {name: p.grad for name, p in ex.named_parameters()} for e, ex in enumerate(experts)},
    }
