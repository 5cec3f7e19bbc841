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


def on_device(batches: list, device) -> list:
    """The batches (x, y), moved to the rank's device (what a rank's loader holds)."""
    return [(x.to(device), y.to(device)) for x, y in batches]


def accumulation_reference(world_size: int, n: int, k: int, divide: bool = True, zero_grad: str = "per step"):
    """One single-process SGD step per global batch (every rank's k micro-batches), as DDP with no_sync
    computes it: each micro-batch's gradient is the ranks' average, and the micro-batches' gradients add up
    in .grad. Variants (the typical mistakes): divide=False, the micro-batch losses summed, not averaged (k
    times the gradient); zero_grad="per micro-batch", the gradients cleared before every micro-batch (only the
    last one counts); zero_grad="never", never cleared (earlier steps' gradients stay). Returns (parameters,
    mean loss)."""
    model = ref.tiny_net(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data = [micro_batches(r, n) for r in range(world_size)]
    losses = []
    for i in range(n):
        if zero_grad == "per micro-batch" or (zero_grad == "per step" and i % k == 0):
            opt.zero_grad()
        total = 0.0
        for r in range(world_size):
            loss = nn.MSELoss()(model(data[r][i][0]), data[r][i][1])
            losses.append(loss.item())
            total = total + loss
        (total / (world_size * (k if divide else 1))).backward()
        if (i + 1) % k == 0:
            opt.step()
    return ref.flat_params(model), sum(losses) / len(losses)


def join_reference(lengths: list[int], divide_by_world_size: bool = True, zero_grad: bool = True):
    """What DDP with Join computes (seen in a real 2-rank gloo run): while every rank has data the gradient is
    the ranks' average; once a rank has run out it contributes zeros to the all-reduce, which still divides by
    the whole world size. Every rank ends with the parameters of the rank that trained longest.
    zero_grad=False (the mistake): each training rank all-reduces its .grad with the last step's average
    still in it, the finished ranks zeros."""
    model = ref.tiny_net(seed=0)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=LR)
    data = [micro_batches(r, n, seed=1) for r, n in enumerate(lengths)]
    previous = [torch.zeros_like(p) for p in params]  # the .grad every training rank holds
    for s in range(max(lengths)):
        active = [d[s] for d in data if s < len(d)]
        total = [torch.zeros_like(p) for p in params]
        for x, y in active:
            grads = torch.autograd.grad(nn.MSELoss()(model(x), y), params)
            total = [t + g + (0 if zero_grad else prev) for t, g, prev in zip(total, grads, previous)]
        divisor = len(lengths) if divide_by_world_size else len(active)
        previous = [t / divisor for t in total]
        for p, g in zip(params, previous):
            p.grad = g.clone()
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


class SharedWeightNet(nn.Module):
    """One Parameter owned by two modules (`decode.weight is encode.weight`): module.parameters() yields it
    once, module.modules() twice. A buffer that forward uses, so that an unbroadcast buffer changes the result."""

    def __init__(self):
        super().__init__()
        self.encode = nn.Linear(4, 4, bias=False)
        self.mid = nn.Linear(4, 4)
        self.decode = nn.Linear(4, 4, bias=False)
        self.decode.weight = self.encode.weight
        self.head = nn.Linear(4, 1)
        self.register_buffer("shift", torch.randn(4))

    def forward(self, x):
        return self.head(torch.tanh(self.decode(torch.tanh(self.mid(torch.tanh(self.encode(x + self.shift)))))))


def wide_net() -> nn.Module:
    """Four layers of 16x16: 8 gradients of 1 KiB or 64 bytes, for bucket caps of a few KiB."""
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(16, 16), nn.Tanh())], nn.Linear(16, 1))


MODELS = {
    "wide": wide_net,
    "frozen": ref.FrozenNet,
    "tied": ref.TiedNet,
    "unused": UnusedNet,
    "shared": SharedWeightNet,
}
IN_FEATURES = {"wide": 16, "frozen": 4, "tied": 4, "unused": 4, "shared": 4}


def initial_state(model: nn.Module, params: bool = True, buffers: bool = True) -> torch.Tensor:
    """Parameters and buffers, flat: what a broadcast at construction makes equal on every rank."""
    tensors = [*(model.parameters() if params else ()), *(model.buffers() if buffers else ())]
    return torch.cat([t.detach().reshape(-1).float().cpu() for t in tensors] or [torch.zeros(0)])


def gradient_bytes(model: nn.Module) -> int:
    """The bytes of one step's gradients, each Parameter once (a shared one too)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def shared_parameters(model: nn.Module) -> list[tuple[list[str], int]]:
    """Each Parameter reachable under several names: (its names, its bytes)."""
    names: dict[int, list[str]] = {}
    sizes: dict[int, int] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
        sizes[id(p)] = p.numel() * p.element_size()
    return [(n, sizes[key]) for key, n in names.items() if len(n) > 1]


def bucket_sizes(model: nn.Module, cap_mb: float) -> list[list[int]]:
    """The bytes of each bucket a cap gives, with the gradients in reverse parameter order, sorted. Two greedy
    rules are accepted: a new bucket when the next gradient would take the current one past the cap (the task's
    rule), or a bucket closed once it reaches the cap (torch's DDP)."""
    cap = cap_mb * 1024 * 1024
    sizes = [p.numel() * p.element_size() for p in reversed(list(model.parameters())) if p.requires_grad]
    task, current = [], 0
    for nbytes in sizes:  # the task's rule
        if current and current + nbytes > cap:
            task, current = task + [current], 0
        current += nbytes
    task += [current] if current else []
    torchs, current = [], 0
    for nbytes in sizes:  # torch's rule
        current += nbytes
        if current >= cap:
            torchs, current = torchs + [current], 0
    torchs += [current] if current else []
    return [sorted(task), sorted(torchs)]


def bucket_counts(model: nn.Module, cap_mb: float) -> set[int]:
    """How many buckets a cap gives (either rule of bucket_sizes)."""
    return {len(buckets) for buckets in bucket_sizes(model, cap_mb)}
