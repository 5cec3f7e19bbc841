"""03_syncbn_sharded: save_sharded_checkpoint.

Every check runs the student's task in real ranks (world size 2 unless the
check asks for another; the hidden ones use 3) and compares what the ranks
computed together with one process working on the whole batch (reference.py).
Functions prefixed `_in_rank_` run inside every rank and return plain CPU
tensors; the verdicts are reached in the parent.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

from grader.checks import CheckFailed
from grader.grading import describe_failure
from grader.exercises import fences
from grader.exercises import happens_before as hb
from grader.i18n import N_
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded.scaled_closeness import assert_close_scaled, cpu
from grader.exercises.syncbn_sharded import EXERCISE

UNFENCED = N_(
    "rank {rank} waited for rank 0's checkpoint only in {collectives}: {rule}. End "
    "with dist.barrier() on every rank, after the save"
)

CHECKPOINT_TIMEOUT_S = 10.0  # a correct save takes about a second; a deadlock should not cost 30


# --- save_sharded_checkpoint ------------------------------------------------------------

CHECKPOINT_STEPS = 3
HOLD_BOUND_S = 5.0  # safety bound of rank 0's held write; a correct or wrong answer ends the wait sooner


def _in_rank_checkpoint(ctx, student, resume: bool, held_write: bool):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    adam, kwargs, _ = ref.OPTIMIZERS["adam"]
    model = ref.mlp().to(ctx.device)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=adam, **kwargs)
    x, y = (t.to(ctx.device) for t in ref.regression_batch())
    for _ in range(CHECKPOINT_STEPS):
        _step(model, opt, x, y)
    path = os.path.join(ctx.workdir, "checkpoint.pt")
    writes, real_save, written_after = [], torch.save, []  # written_after: rank 0's collectives at its write
    others = range(1, ctx.world_size)

    def recording_save(obj, f, *args, **kwargs):
        # Files only: consolidate_state_dict itself torch.saves into in-memory buffers.
        target = os.fspath(f) if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
        if isinstance(target, str):
            writes.append(target)
            written_after.append(watch.entered)
            if ctx.rank == 0 and held_write:
                # A slow disk made deterministic: write only once every other rank is blocked in a
                # collective rank 0 has not joined, or has returned (and looked for the file).
                hb.wait_until(lambda: hb.blocked_or_returned(ctx, others, watch.entered), HOLD_BOUND_S)
        return real_save(obj, f, *args, **kwargs)

    save = student.task("save_sharded_checkpoint")
    watch = hb.Collectives(ctx)
    torch.save = recording_save
    try:
        with watch.marking(save):
            save(model, opt, path)
    finally:
        torch.save = real_save
    try:
        torch.load(path, map_location="cpu")
        complete_at_return = True
    except Exception:
        complete_at_return = False
    hb.mark(ctx, "returned")
    dist.barrier()  # ours: now the file is finished whatever the student did (or we hang with rank 0)
    problems = _checkpoint_problems(path, model)
    params = _resumed_params(ctx, path, x, y) if resume and not problems else None
    return {
        "writes": writes,
        "complete_at_return": complete_at_return,
        "problems": problems,
        "params": params,
        "backend": ctx.backend,
        "written_after": written_after[:1],
        "entries": watch.entries,
    }


def _step(model: nn.Module, opt, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def _resumed_params(ctx, path: str, x: torch.Tensor, y: torch.Tensor) -> list:
    """The parameters after one more step of a fresh model and ZeRO optimizer loaded from the checkpoint."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    adam, kwargs, _ = ref.OPTIMIZERS["adam"]
    fresh = ref.mlp(seed=123).to(ctx.device)  # different weights: the checkpoint must overwrite them
    fresh_opt = ZeroRedundancyOptimizer(fresh.parameters(), optimizer_class=adam, **kwargs)
    checkpoint = torch.load(path, map_location=ctx.device)
    fresh.load_state_dict(checkpoint["model"])
    fresh_opt.load_state_dict(checkpoint["optimizer"])
    _step(fresh, fresh_opt, x, y)
    return [cpu(p) for p in fresh.parameters()]


def _checkpoint_problems(path: str, model: nn.Module) -> list[str]:
    if not os.path.exists(path):
        return ["no file was written at `path`"]
    try:
        checkpoint = torch.load(path, map_location="cpu")
    except Exception as exc:
        return [f"torch.load(path) failed: {type(exc).__name__}: {exc}"]
    if not isinstance(checkpoint, dict) or not {"model", "optimizer"} <= set(checkpoint):
        keys = sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        return [f"the checkpoint holds {keys}; expected a dict with keys 'model' and 'optimizer'"]
    problems = []
    if not isinstance(checkpoint["model"], dict) or set(checkpoint["model"]) != set(model.state_dict()):
        problems.append("checkpoint['model'] is not the model's state_dict()")
    optim = checkpoint["optimizer"]
    n_params = len(list(model.parameters()))
    if not isinstance(optim, dict) or "state" not in optim or "param_groups" not in optim:
        problems.append("checkpoint['optimizer'] is not an optimizer state_dict() (keys 'state', 'param_groups')")
    elif len(optim["state"]) != n_params:
        problems.append(
            f"checkpoint['optimizer'] holds state for {len(optim['state'])} of {n_params} parameters: "
            "it is one rank's shard; save the state consolidated from every rank"
        )
    return problems


def _run_checkpoint(g, resume: bool, world_size: int | None = None, held_write: bool = False) -> list:
    result = g.run_raw(
        _in_rank_checkpoint, resume, held_write, world_size=world_size, timeout=min(g.timeout, CHECKPOINT_TIMEOUT_S)
    )
    if result.ok:
        return [r.value for r in result.ranks]
    stacks = " ".join(r.stack for r in result.ranks if r.status == "hung")
    if "consolidate_state_dict" in stacks:
        raise CheckFailed(
            "the save deadlocked inside consolidate_state_dict: it is a collective, so every rank "
            "must call it (consolidation on one rank only waits forever for the others' shards). "
            "Call optimizer.consolidate_state_dict(to=0) on every rank, then torch.save on rank 0 "
            "only, then dist.barrier() on every rank.\n" + result.failure()
        )
    errors = " ".join(str(r.error) for r in result.ranks if r.error)
    hint = ""
    if "has not been consolidated" in errors:
        hint = (
            "optimizer.state_dict() of a ZeroRedundancyOptimizer needs the consolidated state: call "
            "optimizer.consolidate_state_dict(to=0) on every rank first, then state_dict() and torch.save "
            "on rank 0 only"
        )
    raise CheckFailed(describe_failure(result, hint))


def _verify_checkpoint_written(results) -> None:
    for rank, got in enumerate(results):
        if rank > 0 and got["writes"]:
            raise CheckFailed(
                f"rank {rank} also called torch.save: only rank 0 writes the checkpoint (ranks "
                "writing the same file at once can leave it corrupt)"
            )
    if not results[0]["writes"]:
        raise CheckFailed(
            "rank 0 did not call torch.save: write {'model': ..., 'optimizer': ...} with torch.save on rank 0"
        )
    for rank, got in enumerate(results):
        if got["problems"]:
            raise CheckFailed("the checkpoint is incomplete: " + "; ".join(got["problems"]))
    written_after = results[0]["written_after"]  # the wait must be a fence (fences.py), on gloo as on nccl
    peers = [(rank, got["entries"]) for rank, got in enumerate(results) if rank]
    fences.require_fenced(peers, written_after[0], UNFENCED)
    for rank, got in enumerate(results):
        if not got["complete_at_return"]:
            raise CheckFailed(
                f"rank {rank} returned before the checkpoint file was complete (rank 0 was still "
                "writing it): end with dist.barrier() on every rank, so that no rank goes on to "
                "read, resume or exit before the file exists"
            )


def _verify_resume(g, results) -> None:
    expected = ref.unsharded_training("adam", CHECKPOINT_STEPS + 1)
    for rank, got in enumerate(results):
        if got["params"] is None:
            raise CheckFailed("the checkpoint could not be resumed: " + "; ".join(got["problems"]))
        for i, (p, exp) in enumerate(zip(got["params"], expected)):
            assert_close_scaled(
                g,
                p,
                exp,
                f"rank {rank}: parameter {i} after resuming and taking one more step",
                "the checkpoint must hold the model and the whole optimizer state (Adam's moments and "
                "step counts) as they were when saved",
            )


@EXERCISE.check("save_sharded_checkpoint", points=1.5)
def checkpoint_complete_and_written_once(g):
    """Rank 0 alone writes model and full optimizer state; no rank returns before the file is complete;
    the call never deadlocks (run with a short timeout)."""
    _verify_checkpoint_written(_run_checkpoint(g, resume=False, held_write=True))


@EXERCISE.check("save_sharded_checkpoint", points=1.5, depends_on=("checkpoint_complete_and_written_once",))
def resume_matches_uninterrupted_run(g):
    """Fresh model and ZeroRedundancyOptimizer load the checkpoint; the next step equals an uninterrupted run."""
    _verify_resume(g, _run_checkpoint(g, resume=True))
