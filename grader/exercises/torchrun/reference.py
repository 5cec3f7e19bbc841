"""Single-process references and the grader's own launcher (04_torchrun).

The checks of one task use these for the other tasks, so a missing or broken
`torchrun_command` fails only its own checks: the training script is always
launched with `standalone_command` (two nodes: hidden_reference.node_command).
"""

from __future__ import annotations

import os
import torch
from torch.utils.data import DataLoader, DistributedSampler

from grader.exercises.torchrun import problem
from grader.exercises.torchrun.torchrun_process import RUN_MODULE, worker_command

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


def standalone_command(script: str, nproc_per_node: int, max_restarts: int = 0) -> list[str]:
    """The one-node torchrun command the grader launches a student's script with."""
    return (
        RUN_MODULE
        + [f"--nproc-per-node={nproc_per_node}", "--nnodes=1", f"--max-restarts={max_restarts}", "--standalone"]
        + worker_command(script)
    )


def reference_training(
    epochs: int,
    seed: int,
    sampler_seed: int | None = None,
    schedule: tuple[tuple[int, int], ...] | None = None,
    fresh_optimizer_at: int | None = None,
) -> dict[str, torch.Tensor]:
    """The final model of the training script, trained in one process, for the run's `seed`
    (problem.SEED in the workers); `sampler_seed` replaces it in the sampler only (a diagnosis).
    `schedule` lists the (epoch, batch) steps to take in order, batches repeated or left out as a
    faulty resume would (a diagnosis); by default every batch of `epochs` epochs once.

    With a per-rank batch of GLOBAL_BATCH // world_size, DistributedSampler's
    strided split makes global step k see positions [k*G, (k+1)*G) of the
    epoch's permutation, whatever the world size: one process with batch G on
    the same permutation takes the same steps (DDP averages the gradients). `fresh_optimizer_at`: the step
    (its index in the schedule) before which the optimizer starts afresh, as a resume that lost its state does.
    """
    model = problem.make_model(seed)
    optimizer = problem.make_optimizer(model)
    dataset = problem.make_dataset(seed)
    sampler = DistributedSampler(
        dataset, num_replicas=1, rank=0, shuffle=True, seed=seed if sampler_seed is None else sampler_seed
    )
    loader = DataLoader(dataset, batch_size=problem.GLOBAL_BATCH, sampler=sampler)
    batches: dict[int, list] = {}
    for step, (epoch, batch) in enumerate(uninterrupted(epochs) if schedule is None else schedule):
        if step == fresh_optimizer_at:
            optimizer = problem.make_optimizer(model)  # no momentum left
        if epoch not in batches:
            sampler.set_epoch(epoch)
            batches[epoch] = list(loader)
        x, y = batches[epoch][batch]
        optimizer.zero_grad()
        problem.loss_fn(model(x), y).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def uninterrupted(epochs: int) -> tuple[tuple[int, int], ...]:
    """The (epoch, batch) steps of an uninterrupted run."""
    return tuple((epoch, batch) for epoch in range(epochs) for batch in range(problem.STEPS_PER_EPOCH))


def initial_state(seed: int) -> dict[str, torch.Tensor]:
    """The untrained model of a run (what a script that never trains would save)."""
    return reference_training(0, seed)


_cache: dict[tuple, dict[str, torch.Tensor]] = {}


def reference_state(
    epochs: int,
    seed: int,
    sampler_seed: int | None = None,
    schedule: tuple[tuple[int, int], ...] | None = None,
    fresh_optimizer_at: int | None = None,
) -> dict[str, torch.Tensor]:
    key = (epochs, seed, sampler_seed, schedule, fresh_optimizer_at)
    if key not in _cache:
        if len(_cache) > 64:  # a new seed per run: keep a long-lived grading worker small
            _cache.clear()
        saved = {k: os.environ.pop(k) for k in (problem.PAUSE_ENV, problem.PAUSE_STEP_ENV) if k in os.environ}
        try:  # never pause the reference
            _cache[key] = reference_training(epochs, seed, sampler_seed, schedule, fresh_optimizer_at)
        finally:
            os.environ.update(saved)
    return _cache[key]
