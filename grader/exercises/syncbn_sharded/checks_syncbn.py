"""03_syncbn_sharded: convert_to_sync_bn, global_batch_stats.

Every check runs the student's task in real ranks (world size 2 unless the
check asks for another; the hidden ones use 3) and compares what the ranks
computed together with one process working on the whole batch (reference.py).
Functions prefixed `_in_rank_` run inside every rank and return plain CPU
tensors; the verdicts are reached in the parent.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed, CheckSkipped
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded.scaled_closeness import assert_close_scaled, close, cpu
from grader.exercises.syncbn_sharded import EXERCISE

# --- convert_to_sync_bn -----------------------------------------------------------------


def _in_rank_convert(ctx, student, root_is_batchnorm: bool):
    model = ref.randomize_batchnorms(nn.BatchNorm1d(4)) if root_is_batchnorm else ref.bn_net()
    model = model.to(ctx.device)
    before = ref.describe_modules(model)
    state_before = {k: cpu(v) for k, v in model.state_dict().items()}
    converted = student.task("convert_to_sync_bn")(model)
    if not isinstance(converted, nn.Module):
        raise CheckFailed(
            f"convert_to_sync_bn returned {type(converted).__name__}, not the converted model: "
            "return the module that nn.SyncBatchNorm.convert_sync_batchnorm returns"
        )
    return {
        "before": before,
        "after": ref.describe_modules(converted),
        "state_before": state_before,
        "state_after": {k: cpu(v) for k, v in converted.state_dict().items()},
    }


def _verify_structure(result: dict) -> None:
    before, after = result["before"], result["after"]
    for name, (cls, eps, momentum, affine) in before.items():
        where = f"`{name}`" if name else "the model itself"
        if name not in after:
            raise CheckFailed(
                f"{where} ({cls}) is missing from the converted model: replace BatchNorm layers, "
                "keep every other module where it was"
            )
        new_cls, new_eps, new_momentum, new_affine = after[name]
        if not ref.is_plain_batchnorm(cls):
            if new_cls != cls:
                raise CheckFailed(f"{where} was a {cls} and became a {new_cls}: only BatchNorm layers change")
            continue
        if new_cls != "SyncBatchNorm":
            # a submodule's BatchNorm left while others were converted: the walk was not recursive
            nested = "." in name and any(c == "SyncBatchNorm" for c, *_ in after.values())
            raise CheckFailed(
                f"{where} is still a {new_cls}"
                + (
                    ": it sits inside a submodule; the conversion must be recursive "
                    "(nn.SyncBatchNorm.convert_sync_batchnorm walks the whole tree)"
                    if nested
                    else ": every BatchNorm must become an nn.SyncBatchNorm"
                )
                + (
                    "; when the model itself is a BatchNorm, the converted model is a new object: "
                    "return what convert_sync_batchnorm returns"
                    if not name
                    else ""
                )
            )
        if (new_eps, new_momentum, new_affine) != (eps, momentum, affine):
            raise CheckFailed(
                f"{where}: eps, momentum, affine changed from {(eps, momentum, affine)} to "
                f"{(new_eps, new_momentum, new_affine)}: keep the layer's hyperparameters"
            )


def _verify_state_kept(result: dict) -> None:
    if not any(cls == "SyncBatchNorm" for cls, *_ in result["after"].values()):
        raise CheckFailed(
            "the returned model has no nn.SyncBatchNorm at all: nothing was converted, so there is no "
            "state to keep; every BatchNorm must become an nn.SyncBatchNorm "
            "(nn.SyncBatchNorm.convert_sync_batchnorm)"
        )
    before, after = result["state_before"], result["state_after"]
    missing = sorted(set(before) - set(after))
    if missing:
        raise CheckFailed(
            f"the converted model's state_dict lacks {', '.join(missing)}: keep the weights, biases, "
            "running statistics and num_batches_tracked of every BatchNorm"
        )
    for key, value in before.items():
        if not torch.equal(value, after[key]):
            kind = "running statistic" if "running" in key or "num_batches" in key else "parameter"
            raise CheckFailed(
                f"`{key}` changed during the conversion: the new SyncBatchNorm must start from the "
                f"old layer's {kind} (copy weight, bias, running_mean, running_var, num_batches_tracked)"
            )


@EXERCISE.check("convert_to_sync_bn", points=1)
def every_batchnorm_becomes_syncbn(g):
    """Every BatchNorm, at any depth, becomes an nn.SyncBatchNorm; nothing else changes."""
    _verify_structure(g.run(_in_rank_convert, False)[0])


@EXERCISE.check("convert_to_sync_bn", points=0.5, depends_on=("every_batchnorm_becomes_syncbn",))
def weights_and_running_stats_kept(g):
    """The converted model's state_dict equals the original's."""
    _verify_state_kept(g.run(_in_rank_convert, False)[0])


def _in_rank_sync_bn_nccl(ctx, student, tail: tuple):
    problem = ref.bn_problem(ctx.world_size, tail, steps=1)
    model = student.task("convert_to_sync_bn")(nn.Sequential(ref.batchnorm_for(tail, problem))).to(ctx.device)
    x = ref.shard(problem["batches"][0], problem["sizes"], ctx.rank).to(ctx.device).requires_grad_(True)
    y = model(x)
    (y * ref.shard(problem["upstream"][0], problem["sizes"], ctx.rank).to(ctx.device)).sum().backward()
    return cpu(y), cpu(x.grad), ctx.backend


@EXERCISE.check("convert_to_sync_bn", points=0.5)
def sync_bn_trains_under_nccl_with_2_gpus(g):
    """With a GPU per rank (nccl): the converted model runs real nn.SyncBatchNorm and matches one
    BatchNorm over the whole batch. nn.SyncBatchNorm refuses CPU tensors, so with fewer GPUs the check
    is skipped (credited only when the task's other checks pass) and the conversion is checked by
    structure only."""
    plan = g.plan(2)
    if plan.backend != "nccl":
        raise CheckSkipped(
            f"nn.SyncBatchNorm runs only on GPUs (it refuses CPU tensors) and this check needs one "
            f"per rank; this machine has {plan.gpus} GPU(s) for 2 ranks, so convert_to_sync_bn was "
            "checked by structure only"
        )
    tail = (2, 2)
    results = g.run(_in_rank_sync_bn_nccl, tail, world_size=2)
    problem = ref.bn_problem(2, tail, steps=1)
    expected = ref.reference_bn_run(problem, tail)
    for rank, (y, x_grad, _) in enumerate(results):
        assert_close_scaled(
            g, y, ref.shard(expected["outputs"][0], problem["sizes"], rank), f"rank {rank}: SyncBatchNorm output"
        )
        assert_close_scaled(
            g,
            x_grad,
            ref.shard(expected["input_grads"][0], problem["sizes"], rank),
            f"rank {rank}: SyncBatchNorm input gradient",
        )


# --- global_batch_stats -----------------------------------------------------------------

STATS_TAILS = [(), (2, 3)]  # (N, C) and (N, C, H, W)


def _stats_input(world_size: int, tail: tuple, seed: int) -> torch.Tensor:
    return ref.channel_batch(sum(ref.shard_sizes(world_size)), tail, seed)


def _in_rank_stats(ctx, student, tails):
    fn = student.task("global_batch_stats")
    out = []
    for seed, tail in enumerate(tails):
        full = _stats_input(ctx.world_size, tail, seed)
        x = ref.shard(full, ref.shard_sizes(ctx.world_size), ctx.rank).to(ctx.device)
        result = fn(x)
        if not (isinstance(result, (tuple, list)) and len(result) == 2 and all(torch.is_tensor(t) for t in result)):
            raise CheckFailed(
                f"global_batch_stats returned {type(result).__name__}; expected a tuple (mean, var) of two tensors"
            )
        out.append((cpu(result[0]), cpu(result[1])))
    return out, ctx.backend


def _verify_stats(g, results, world_size: int, tails) -> None:
    sizes = ref.shard_sizes(world_size)
    for rank, (per_tail, _) in enumerate(results):
        for seed, (tail, (mean, var)) in enumerate(zip(tails, per_tail)):
            full = _stats_input(world_size, tail, seed)
            shape = f"input of shape {tuple(ref.shard(full, sizes, rank).shape)} on rank {rank} (sizes {sizes})"
            for name, got in (("mean", mean), ("var", var)):
                if tuple(got.shape) != (ref.CHANNELS,):
                    raise CheckFailed(
                        f"{name} for an {shape} has shape {tuple(got.shape)}, expected "
                        f"({ref.CHANNELS},): one value per channel (dimension 1), every other "
                        "dimension reduced"
                    )
            exp_mean, exp_var = ref.batch_stats(full)
            if close(g, mean, exp_mean) and close(g, var, exp_var):
                continue
            for (wrong_mean, wrong_var), message in ref.wrong_stats(full, sizes, rank).values():
                if close(g, mean, wrong_mean) and close(g, var, wrong_var):
                    raise CheckFailed(f"for an {shape}: {message}")
            assert_close_scaled(g, mean, exp_mean, f"the mean for an {shape}")
            assert_close_scaled(g, var, exp_var, f"the variance for an {shape}")


@EXERCISE.check("global_batch_stats", points=3)
def stats_of_the_concatenated_batch(g):
    """Uneven shards (3 and 5 samples), 2-d and 4-d inputs: the statistics of all samples together."""
    _verify_stats(g, g.run(_in_rank_stats, STATS_TAILS), g.world_size, STATS_TAILS)
