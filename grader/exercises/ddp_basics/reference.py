"""Single-process references and small models for the 02_ddp_basics checks.

The reference implementations stand in for the tasks a check does not test,
so a missing or broken task fails only its own checks.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler


class IndexDataset(Dataset):
    """Sample i is the tensor i: which rank saw which sample is plain to read."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(i)


class RegressionDataset(Dataset):
    def __init__(self, n: int = 48, features: int = 4, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, features, generator=g)
        self.y = self.x @ torch.randn(features, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def tiny_net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


class FrozenNet(nn.Module):
    """A frozen first layer: DDP skips parameters that need no gradient."""

    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(4, 8)
        self.frozen.requires_grad_(False)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.frozen(x)))


class TiedNet(nn.Module):
    """One weight used twice: its gradient accumulates from both uses."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.shared(torch.tanh(self.shared(x)))))


def seeded(factory, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return factory()


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


def flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).cpu() for p in model.parameters()]
    )


def ddp_fixture(model: nn.Module, device: torch.device) -> DDP:
    """The DDP model the checks of later tasks (train_one_epoch, save_checkpoint) train, so that
    they never depend on the student's wrap_model. A fixture, as in the lesson, not a graded answer:
    wrap_model is judged by what it does, and its checks never call this."""
    return DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)


def rank_order(n: int, rank: int, world_size: int, epoch: int, seed: int = 0) -> list[int]:
    """The indices DistributedSampler gives `rank` in `epoch`."""
    sampler = DistributedSampler(IndexDataset(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def single_process_training(
    dataset: RegressionDataset, world_size: int, batch_size: int, epochs: int, lr: float, seed: int = 0
):
    """Train one model on the same global batches DDP sees: at step s the
    global batch is every rank's s-th local batch; DDP averages the ranks'
    mean-loss gradients, which for equal local batches is the mean over the
    global batch. Returns (final parameters, mean loss of each epoch)."""
    model = tiny_net(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    epoch_losses = []
    for epoch in range(epochs):
        orders = [rank_order(len(dataset), r, world_size, epoch, seed) for r in range(world_size)]
        total, count = 0.0, 0
        for start in range(0, len(orders[0]), batch_size):
            idx = [i for order in orders for i in order[start : start + batch_size]]
            x, y = dataset.x[idx], dataset.y[idx]
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            count += len(idx)
        epoch_losses.append(total / count)
    return flat_params(model), epoch_losses
