"""Single-process references, data and models for the 03_syncbn_sharded checks.

Everything here runs in one process: the checks compare what the ranks
computed together with what one process computes over the whole batch.
"""

from __future__ import annotations

import torch
from torch import nn

try:  # dcp.save/dcp.load import their fsspec backend lazily, about 0.1 s in every rank of every checkpoint
    import torch.distributed.checkpoint._fsspec_filesystem  # noqa: F401  run; the forkserver imports it once
except ImportError:  # a torch or fsspec without it: only slower
    pass

CHANNELS = 3

# Uneven on purpose: averaging the ranks' means is only right for equal shards.
SHARD_SIZES = {1: [5], 2: [3, 5], 3: [4, 1, 6], 4: [2, 5, 1, 3]}


def shard_sizes(world_size: int) -> list[int]:
    return SHARD_SIZES.get(world_size) or [1 + (3 * r) % 5 for r in range(world_size)]


def shard(full: torch.Tensor, sizes: list[int], rank: int) -> torch.Tensor:
    start = sum(sizes[:rank])
    return full[start : start + sizes[rank]]


def channel_batch(n: int, tail: tuple, seed: int) -> torch.Tensor:
    """(n, CHANNELS, *tail) float32 with a different mean and spread per channel."""
    g = torch.Generator().manual_seed(seed)
    shape = (1, CHANNELS) + (1,) * len(tail)
    offset = torch.tensor([2.0, -1.0, 0.5]).reshape(shape)
    scale = torch.tensor([1.5, 0.5, 3.0]).reshape(shape)
    return torch.randn((n, CHANNELS) + tuple(tail), generator=g) * scale + offset


def reduce_dims(x: torch.Tensor) -> list[int]:
    return [d for d in range(x.dim()) if d != 1]


def batch_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and biased variance of one batch (in float64, returned in x's dtype)."""
    x64 = x.double()
    mean = x64.mean(dim=reduce_dims(x))
    var = x64.var(dim=reduce_dims(x), unbiased=False)
    return mean.to(x.dtype), var.to(x.dtype)


def wrong_stats(full: torch.Tensor, sizes: list[int], rank: int) -> dict:
    """The statistics the usual mistakes produce, each with the message that names it."""
    shards = [shard(full, sizes, r) for r in range(len(sizes))]
    mean, var = batch_stats(full)
    n = full.numel() // full.shape[1]
    local_mean, local_var = batch_stats(shards[rank])
    per_rank = [batch_stats(s) for s in shards if len(s)]
    avg_mean = torch.stack([m for m, _ in per_rank]).mean(0)
    avg_var = torch.stack([v for _, v in per_rank]).mean(0)
    return {
        "local": (
            (local_mean, local_var),
            "these are this rank's own statistics: all-reduce the per-channel sums (and the counts) "
            "over the ranks before dividing",
        ),
        "averaged": (
            (avg_mean, avg_var),
            "the ranks' statistics were averaged; with uneven batch sizes each rank must weigh by "
            "its number of samples: all-reduce sums, sums of squares and counts, then divide",
        ),
        "unbiased": (
            (mean, var * n / (n - 1)),
            "the variance is the unbiased one (divided by N-1); return the biased variance "
            "(divided by N), the one BatchNorm normalizes with",
        ),
    }


# --- BatchNorm ----------------------------------------------------------------


def bn_problem(world_size: int, tail: tuple, steps: int, seed: int = 0) -> dict:
    """Inputs of a BatchNorm run: `steps` training batches, the upstream
    gradients, affine parameters, and one eval batch."""
    sizes = shard_sizes(world_size)
    total = sum(sizes)
    g = torch.Generator().manual_seed(seed + 100)
    return {
        "sizes": sizes,
        "batches": [channel_batch(total, tail, seed + step) for step in range(steps)],
        "upstream": [torch.randn((total, CHANNELS) + tuple(tail), generator=g) for _ in range(steps)],
        "weight": torch.rand(CHANNELS, generator=g) + 0.5,
        "bias": torch.randn(CHANNELS, generator=g),
        "eval_batch": channel_batch(total, tail, seed + 50),
        "momentum": 0.2,  # not the default, so a module that ignores the argument shows
        "eps": 1e-5,
    }


def batchnorm_for(tail: tuple, problem: dict) -> nn.Module:
    cls = {0: nn.BatchNorm1d, 1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[len(tail)]
    bn = cls(CHANNELS, eps=problem["eps"], momentum=problem["momentum"])
    with torch.no_grad():
        bn.weight.copy_(problem["weight"])
        bn.bias.copy_(problem["bias"])
    return bn


def reference_bn_run(problem: dict, tail: tuple) -> dict:
    """One nn.BatchNorm over the whole batch: what the ranks must compute together.
    The loss is sum(output * upstream), i.e. the sum of every rank's local loss."""
    bn = batchnorm_for(tail, problem).double()  # float64: the reference's own rounding stays out of the way
    out = {
        "outputs": [],
        "input_grads": [],
        "weight_grads": [],
        "bias_grads": [],
        "running_mean": [],
        "running_var": [],
    }
    for x, up in zip(problem["batches"], problem["upstream"]):
        x = x.double().requires_grad_(True)
        bn.zero_grad()
        y = bn(x)
        (y * up.double()).sum().backward()
        out["outputs"].append(y.detach().float())
        out["input_grads"].append(x.grad.float())
        out["weight_grads"].append(bn.weight.grad.float())
        out["bias_grads"].append(bn.bias.grad.float())
        out["running_mean"].append(bn.running_mean.float())
        out["running_var"].append(bn.running_var.float())
    bn.eval()
    with torch.no_grad():
        out["eval_output"] = bn(problem["eval_batch"].double()).float()
    return out


def normalize(x, mean, var, weight, bias, eps):
    shape = [1, -1] + [1] * (x.dim() - 2)
    return (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + eps) * weight.reshape(shape) + bias.reshape(
        shape
    )


def local_stats_outputs(problem: dict, rank: int, step: int) -> torch.Tensor:
    """What rank `rank` outputs when it normalizes with its own batch only (plain BatchNorm under DDP)."""
    x = shard(problem["batches"][step], problem["sizes"], rank)
    mean, var = batch_stats(x)
    return normalize(x, mean, var, problem["weight"], problem["bias"], problem["eps"])


def detached_stats_input_grad(problem: dict, rank: int, step: int) -> torch.Tensor:
    """The input gradient of a rank whose all-reduce is invisible to autograd:
    it only sees its own loss and its own share of the statistics."""
    sizes, full, up = problem["sizes"], problem["batches"][step], problem["upstream"][step]
    mine = shard(full, sizes, rank).clone().requires_grad_(True)
    parts = [mine if r == rank else shard(full, sizes, r) for r in range(len(sizes))]
    x = torch.cat(parts)
    dims = reduce_dims(x)
    mean = x.mean(dim=dims)
    var = (x * x).mean(dim=dims) - mean * mean
    y = normalize(x, mean, var, problem["weight"], problem["bias"], problem["eps"])
    (shard(y, sizes, rank) * shard(up, sizes, rank)).sum().backward()
    return mine.grad


def running_var_after_first_step(problem: dict, rank: int) -> dict:
    """running_var after one training step, for the usual mistakes, with their messages."""
    m = problem["momentum"]
    full = problem["batches"][0]
    _, var = batch_stats(full)
    n = full.numel() // full.shape[1]
    local = shard(full, problem["sizes"], rank)
    n_local = local.numel() // local.shape[1]
    candidates = {
        "biased": (
            (1 - m) + m * var,
            "running_var was updated with the biased variance; nn.BatchNorm stores the unbiased one: "
            "var * N / (N - 1), with N the number of values per channel over all ranks",
        ),
        "swapped": (
            m + (1 - m) * var * n / (n - 1),
            "momentum is applied the wrong way round: running = (1 - momentum) * running + momentum * batch_value",
        ),
        "untouched": (
            torch.ones_like(var),
            "running_var never changed: update running_mean and running_var in every training forward",
        ),
    }
    if n_local > 1:
        candidates["local_count"] = (
            (1 - m) + m * var * n_local / (n_local - 1),
            "the unbiased correction used this rank's count; use N over all ranks (all-reduce the count)",
        )
    return candidates


# --- partitions ---------------------------------------------------------------

PARTITION_CASES = [
    # (shapes, world sizes): a model-like mix of big matrices and small biases
    ([(64, 64), (64,), (64, 64), (64,), (10, 64), (10,), (100,), (1000,), (3,), (7,)], [2, 3]),
    ([(32, 8), (32,), (32, 32), (32,), (4, 32), (4,)], [2, 4]),
]


# --- sharded optimizer --------------------------------------------------------


def seed_cpu(seed: int) -> None:
    """torch.manual_seed for the CPU generator only, where the models are built: the same weights, without
    torch.manual_seed's lazy seeding of every accelerator (about 12 ms a call in a fresh rank, a stack each)."""
    torch.random.default_generator.manual_seed(seed)


def mlp(seed: int = 0) -> nn.Module:
    seed_cpu(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def regression_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(24, 8, generator=g)
    return x, torch.sin(x[:, :4]) + 0.1 * torch.randn(24, 4, generator=g)


OPTIMIZERS = {
    "adam": (torch.optim.Adam, {"lr": 1e-2}, 2),  # (class, arguments, state tensors per parameter)
    "sgd_momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, 1),
}


def unsharded_training(opt_name: str, steps: int) -> list[torch.Tensor]:
    """The parameters after `steps` steps of one ordinary optimizer on one process."""
    cls, kwargs, _ = OPTIMIZERS[opt_name]
    model = mlp()
    opt = cls(model.parameters(), **kwargs)
    train_steps(model, opt, *regression_batch(), steps)
    return [p.detach().clone() for p in model.parameters()]


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    """`steps` ordinary steps on one batch: MSE loss, backward, optimizer step."""
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def state_elements(optimizer: torch.optim.Optimizer) -> int:
    """Elements of per-parameter state (moments, momentum buffers); scalar step counters are not counted."""
    return sum(
        v.numel() for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v) and v.dim() > 0
    )


# --- BatchNorm conversion -----------------------------------------------------


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4, eps=1e-3, momentum=0.05)  # non-default hyperparameters must survive
        self.inner = nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4), nn.ReLU())

    def forward(self, x):
        return self.inner(torch.relu(self.bn(self.conv(x))))


class BnNet(nn.Module):
    """BatchNorm at several depths, including two levels down, and one after a Linear."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3))
        self.block = _Block()
        self.head = nn.Linear(4, 5)
        self.head_bn = nn.BatchNorm1d(5)

    def forward(self, x):
        x = self.block(torch.relu(self.stem(x)))
        return self.head_bn(self.head(x.mean(dim=(2, 3))))


def randomize_batchnorms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm distinctive weights and running statistics, as after training."""
    g = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                if module.affine:
                    module.weight.copy_(torch.rand(module.num_features, generator=g) + 0.5)
                    module.bias.copy_(torch.randn(module.num_features, generator=g))
                module.running_mean.copy_(torch.randn(module.num_features, generator=g))
                module.running_var.copy_(torch.rand(module.num_features, generator=g) + 0.5)
                module.num_batches_tracked.fill_(7)
    return model


def bn_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return randomize_batchnorms(BnNet(), seed)


def describe_modules(model: nn.Module) -> dict[str, tuple]:
    """name -> (class name, eps, momentum, affine) for every submodule (BatchNorm fields None elsewhere)."""
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            out[name] = (type(module).__name__, module.eps, module.momentum, module.affine)
        else:
            out[name] = (type(module).__name__, None, None, None)
    return out


def is_plain_batchnorm(class_name: str) -> bool:
    return class_name in (
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "LazyBatchNorm1d",
        "LazyBatchNorm2d",
        "LazyBatchNorm3d",
    )
