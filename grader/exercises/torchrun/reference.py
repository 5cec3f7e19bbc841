"""Single-process references and the grader's own versions of the tasks (04_torchrun).

The checks of one task use these for the other tasks, so a missing or broken
`torchrun_command` fails only its own checks: the training script is always
launched with `grader_command`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

import torch
from torch.utils.data import DataLoader, DistributedSampler

from grader.exercises.torchrun import problem
from grader.exercises.torchrun.launch import RUN_MODULE

# DistEnv field -> the variable torchrun sets for it
ENV_VARS = {
    "rank": "RANK",
    "local_rank": "LOCAL_RANK",
    "world_size": "WORLD_SIZE",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "master_addr": "MASTER_ADDR",
    "master_port": "MASTER_PORT",
    "restart_count": "TORCHELASTIC_RESTART_COUNT",
}
REQUIRED = [v for f, v in ENV_VARS.items() if f != "restart_count"]  # restart count defaults to 0
TEXT_FIELDS = {"master_addr"}


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str
    master_port: int
    restart_count: int


def read_dist_env(environ: Mapping[str, str]) -> DistEnv:
    """What the student's read_dist_env must return for `environ`."""
    values = {}
    for field, var in ENV_VARS.items():
        if var not in environ:
            if field == "restart_count":
                values[field] = 0
                continue
            raise RuntimeError(f"{var} is not set: launch this script with torchrun")
        values[field] = environ[var] if field in TEXT_FIELDS else int(environ[var])
    return DistEnv(**values)


def grader_command(script: str, nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
                   rdzv_endpoint: str | None = None, max_restarts: int = 0) -> list[str]:
    """The torchrun command the grader uses to launch a student's script."""
    cmd = RUN_MODULE + [f"--nproc-per-node={nproc_per_node}", f"--nnodes={nnodes}", f"--max-restarts={max_restarts}"]
    if rdzv_endpoint is None:
        cmd.append("--standalone")
    else:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", "--rdzv-id=grader",
                f"--node-rank={node_rank}"]
    return cmd + [script]


def reference_training(epochs: int) -> dict[str, torch.Tensor]:
    """The final model of the training script, trained in one process.

    With a per-rank batch of GLOBAL_BATCH // world_size, DistributedSampler's
    strided split makes global step k see positions [k*G, (k+1)*G) of the
    epoch's permutation, whatever the world size: one process with batch G on
    the same permutation takes the same steps (DDP averages the gradients).
    """
    model = problem.make_model()
    optimizer = problem.make_optimizer(model)
    dataset = problem.make_dataset()
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=problem.SEED)
    loader = DataLoader(dataset, batch_size=problem.GLOBAL_BATCH, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            problem.loss_fn(model(x), y).backward()
            optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


_cache: dict[int, dict[str, torch.Tensor]] = {}


def reference_state(epochs: int) -> dict[str, torch.Tensor]:
    if epochs not in _cache:
        saved = os.environ.pop(problem.PAUSE_ENV, None)  # never pause the reference
        try:
            _cache[epochs] = reference_training(epochs)
        finally:
            if saved is not None:
                os.environ[problem.PAUSE_ENV] = saved
    return _cache[epochs]
