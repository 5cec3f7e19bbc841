"""03_syncbn_sharded, save_and_reshard and load_resharded: the training a checkpoint must resume exactly.

A model sharded with FSDP2, Adam, and a linear warm-up of the learning rate (LinearLR, stepped after every
optimizer step), on the rank side; the same training in one process on a plain nn.Module, on the parent side.
The warm-up is still ramping when the checkpoint is taken and when training resumes, so a scheduler that was not
restored changes the next steps: LinearLR's update depends on its own step count (last_epoch), not only on the
optimizer's current learning rate.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from grader.exercises.syncbn_sharded import reference as ref

LR = 0.01
# Adam's foreach form, in the ranks and in the reference alike (the same arithmetic per element): over DTensors a
# fresh rank propagates the sharding of each distinct operation once, about 40 in the per-tensor form's first step,
# one per operation for all parameters in the foreach form (measured at load 7: that step 0.85 s -> 0.45 s; a
# 3-rank load's CPU 0.38 -> 0.31 s per rank).
ADAM = {"lr": LR, "foreach": True}
WARMUP = {"start_factor": 0.1, "total_iters": 8}  # longer than any check's training: the LR moves at every step
FRESH_SEED = 123  # the loading model starts from other weights: the checkpoint must overwrite them


def schedule(opt: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    return torch.optim.lr_scheduler.LinearLR(opt, **WARMUP)


# --- rank side --------------------------------------------------------------------------------------


def fsdp_mlp(ctx, seed: int, per_layer: bool = True) -> nn.Module:
    """ref.mlp sharded with FSDP2 over a 1-D mesh of every rank: each Linear then the root, or the root alone."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    model = ref.mlp(seed).to(ctx.device)
    for layer in model if per_layer else ():
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def train(model: nn.Module, opt, scheduler, steps: int, device) -> None:
    x, y = (t.to(device) for t in ref.regression_batch())  # the whole batch on every rank
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        scheduler.step()


def full_copy(t):
    from torch.distributed.tensor import DTensor  # FSDP2's parameters and Adam state (imported: the guard watches it)

    t = t.full_tensor() if isinstance(t, DTensor) else t  # a collective for DTensors: every rank calls it
    return t.detach().cpu().clone()


def snapshot(model: nn.Module, opt, scheduler) -> dict:
    """What must come back: full weights, Adam's state, the learning rate and the scheduler's count."""
    out = {"params": [full_copy(p) for p in model.parameters()], "exp_avg": [], "exp_avg_sq": [], "step": []}
    for p in model.parameters():
        state = opt.state.get(p, {})
        for key in ("exp_avg", "exp_avg_sq", "step"):
            out[key].append(full_copy(state[key]) if key in state else None)
    out["lr"] = float(opt.param_groups[0]["lr"])
    out["last_epoch"] = int(scheduler.last_epoch)
    return out


def as_step(value) -> int | str:
    """What a load returned, as an int when it is one (an int, or a one-element integer tensor), else its repr."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        return int(value.item())
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return repr(value)[:80]


# --- parent side ------------------------------------------------------------------------------------


def plain_training(steps: int, seed: int = 0) -> dict:
    """One process, a plain nn.Module, Adam and the warm-up on the whole batch: what resharding must not change."""
    return {key: [t.clone() for t in v] if isinstance(v, list) else v for key, v in _plain(steps, seed).items()}


@lru_cache(maxsize=None)  # the grader's own computation from constants: the same for every check and submission
def _plain(steps: int, seed: int) -> dict:
    model = ref.mlp(seed)
    opt = torch.optim.Adam(model.parameters(), **ADAM)
    scheduler = schedule(opt)
    x, y = ref.regression_batch()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        scheduler.step()
    out = {"params": [p.detach().clone() for p in model.parameters()]}
    for key in ("exp_avg", "exp_avg_sq", "step"):
        out[key] = [opt.state[p][key].clone() for p in model.parameters()] if steps else []
    out["lr"], out["last_epoch"] = float(opt.param_groups[0]["lr"]), int(scheduler.last_epoch)
    return out


@lru_cache(maxsize=1)
def _names() -> tuple[str, ...]:
    return tuple(name for name, _ in ref.mlp().named_parameters())


def parameter_names() -> list[str]:
    return list(_names())
