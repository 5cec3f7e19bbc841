"""Single-process references and models for the "DDP in practice" checks of 02_ddp_basics
(train_with_accumulation, train_uneven, BucketedDDP)."""
from __future__ import annotations

import torch
from torch import nn

from grader.exercises.ddp_basics import reference as ref

LR = 0.1


def micro_batches(rank: int, n: int, size: int = 4, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rank `rank`'s n micro-batches (x, y), each of `size` samples."""
    g = torch.Generator().manual_seed(1000 * seed + 10 + rank)
    return [(torch.randn(size, 4, generator=g), torch.randn(size, 1, generator=g)) for _ in range(n)]


def accumulation_reference(world_size: int, n: int, k: int, divide: bool = True, step_every: bool = False):
    """One single-process SGD step per global batch (every rank's k micro-batches). Variants:
    divide=False: the micro-batch losses summed, not averaged (k times the gradient);
    step_every=True: one step per micro-batch of all ranks. Returns (parameters, mean loss)."""
    model = ref.tiny_net(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data = [micro_batches(r, n) for r in range(world_size)]
    losses = []
    group = 1 if step_every else k
    for start in range(0, n, group):
        opt.zero_grad()
        total = 0.0
        for i in range(start, start + group):
            for r in range(world_size):
                loss = nn.MSELoss()(model(data[r][i][0]), data[r][i][1])
                losses.append(loss.item())
                total = total + loss
        (total / (world_size * (group if divide else 1))).backward()
        opt.step()
    return ref.flat_params(model), sum(losses) / len(losses)


def join_reference(lengths: list[int], divide_by_world_size: bool = True):
    """What DDP with Join computes (seen in a real 2-rank gloo run): while every rank has data the gradient is
    the ranks' average; once a rank has run out it contributes zeros to the all-reduce, which still divides by
    the whole world size. Every rank ends with the parameters of the rank that trained longest."""
    model = ref.tiny_net(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data = [micro_batches(r, n, seed=1) for r, n in enumerate(lengths)]
    for s in range(max(lengths)):
        active = [d[s] for d in data if s < len(d)]
        opt.zero_grad()
        loss = sum(nn.MSELoss()(model(x), y) for x, y in active)
        (loss / (len(lengths) if divide_by_world_size else len(active))).backward()
        opt.step()
    return ref.flat_params(model)


class UnusedNet(nn.Module):
    """A layer that forward never uses: its gradient never becomes ready."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 8)
        self.unused = nn.Linear(8, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.first(x)))


def wide_net() -> nn.Module:
    """Four layers of 16x16: 8 gradients of 1 KiB or 64 bytes, for bucket caps of a few KiB."""
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(16, 16), nn.Tanh())], nn.Linear(16, 1))


MODELS = {"wide": wide_net, "frozen": ref.FrozenNet, "tied": ref.TiedNet, "unused": UnusedNet}
IN_FEATURES = {"wide": 16, "frozen": 4, "tied": 4, "unused": 4}


def bucket_counts(model: nn.Module, cap_mb: float) -> set[int]:
    """How many buckets a cap gives, with the gradients in reverse parameter order. Two greedy rules are
    accepted: a new bucket when the next gradient would take the current one past the cap (the task's rule),
    or a bucket closed once it reaches the cap (torch's DDP)."""
    cap = cap_mb * 1024 * 1024
    sizes = [p.numel() * p.element_size() for p in reversed(list(model.parameters())) if p.requires_grad]
    before, after = 0, 0
    current = 0
    for nbytes in sizes:  # the task's rule
        if current and current + nbytes > cap:
            before, current = before + 1, 0
        current += nbytes
    before += bool(current)
    current = 0
    for nbytes in sizes:  # torch's rule
        current += nbytes
        if current >= cap:
            after, current = after + 1, 0
    after += bool(current)
    return {before, after}
