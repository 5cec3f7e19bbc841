"""Checks of exercise 03_syncbn_sharded (lesson: lessons/03_syncbn_and_sharded_state.ipynb).

Every check runs the student's task in real ranks (world size 2 unless the
grader asks for another; the hidden ones use 3) and compares what the ranks
computed together with one process working on the whole batch
(reference.py). Functions prefixed `_in_rank_` run inside every rank and
return plain CPU tensors; the verdicts are reached in the parent.
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch import nn

from grader.checks import CheckFailed, CheckSkipped, Exercise, describe_failure
from grader.exercises.syncbn_sharded import reference as ref
from grader.tolerances import assert_close, tolerance

EXERCISE = Exercise(
    "03_syncbn_sharded",
    tasks=["convert_to_sync_bn", "global_batch_stats", "DistributedBatchNorm", "partition_parameters",
           "ShardedOptimizer", "save_sharded_checkpoint"],
)
check = EXERCISE.check

CHECKPOINT_TIMEOUT_S = 10.0  # a correct save takes about a second; a deadlock should not cost 30


def _close(actual, expected, backend: str) -> bool:
    """float32 closeness, with the absolute part scaled to the tensor's magnitude: BatchNorm's input
    gradient is a difference of O(1) terms, so its small elements carry O(1)-sized rounding."""
    actual, expected = torch.as_tensor(actual).double(), torch.as_tensor(expected).double()
    if actual.shape != expected.shape:
        return False
    rtol, atol = tolerance(torch.float32, backend)
    scale = expected.abs().max().item() if expected.numel() else 0.0
    return bool(((actual - expected).abs() <= atol + rtol * (expected.abs() + scale)).all())


def _assert_close(actual, expected, what: str, likely: str = "", backend: str = "gloo") -> None:
    if not _close(actual, expected, backend):
        assert_close(actual, expected, what, likely, backend)  # raises, showing the largest difference


def _cpu(t):
    return None if t is None else t.detach().cpu().clone()


# --- convert_to_sync_bn -----------------------------------------------------------------

def _in_rank_convert(ctx, student, root_is_batchnorm: bool):
    model = ref.randomize_batchnorms(nn.BatchNorm1d(4)) if root_is_batchnorm else ref.bn_net()
    before = ref.describe_modules(model)
    state_before = {k: _cpu(v) for k, v in model.state_dict().items()}
    converted = student.task("convert_to_sync_bn")(model)
    if not isinstance(converted, nn.Module):
        raise CheckFailed(f"convert_to_sync_bn returned {type(converted).__name__}, not the converted model: "
                          "return the module that nn.SyncBatchNorm.convert_sync_batchnorm returns")
    return {"before": before, "after": ref.describe_modules(converted), "state_before": state_before,
            "state_after": {k: _cpu(v) for k, v in converted.state_dict().items()}}


def _verify_structure(result: dict) -> None:
    before, after = result["before"], result["after"]
    for name, (cls, eps, momentum, affine) in before.items():
        where = f"`{name}`" if name else "the model itself"
        if name not in after:
            raise CheckFailed(f"{where} ({cls}) is missing from the converted model: replace BatchNorm layers, "
                              "keep every other module where it was")
        new_cls, new_eps, new_momentum, new_affine = after[name]
        if not ref.is_plain_batchnorm(cls):
            if new_cls != cls:
                raise CheckFailed(f"{where} was a {cls} and became a {new_cls}: only BatchNorm layers change")
            continue
        if new_cls != "SyncBatchNorm":
            nested = "." in name
            raise CheckFailed(f"{where} is still a {new_cls}"
                              + (": it sits inside a submodule; the conversion must be recursive "
                                 "(nn.SyncBatchNorm.convert_sync_batchnorm walks the whole tree)" if nested else
                                 ": every BatchNorm must become an nn.SyncBatchNorm")
                              + ("; when the model itself is a BatchNorm, the converted model is a new object: "
                                 "return what convert_sync_batchnorm returns" if not name else ""))
        if (new_eps, new_momentum, new_affine) != (eps, momentum, affine):
            raise CheckFailed(f"{where}: eps, momentum, affine changed from {(eps, momentum, affine)} to "
                              f"{(new_eps, new_momentum, new_affine)}: keep the layer's hyperparameters")


def _verify_state_kept(result: dict) -> None:
    if not any(cls == "SyncBatchNorm" for cls, *_ in result["after"].values()):
        raise CheckFailed("the returned model has no nn.SyncBatchNorm at all: nothing was converted, so there is no "
                          "state to keep; every BatchNorm must become an nn.SyncBatchNorm "
                          "(nn.SyncBatchNorm.convert_sync_batchnorm)")
    before, after = result["state_before"], result["state_after"]
    missing = sorted(set(before) - set(after))
    if missing:
        raise CheckFailed(f"the converted model's state_dict lacks {', '.join(missing)}: keep the weights, biases, "
                          "running statistics and num_batches_tracked of every BatchNorm")
    for key, value in before.items():
        if not torch.equal(value, after[key]):
            kind = "running statistic" if "running" in key or "num_batches" in key else "parameter"
            raise CheckFailed(f"`{key}` changed during the conversion: the new SyncBatchNorm must start from the "
                              f"old layer's {kind} (copy weight, bias, running_mean, running_var, num_batches_tracked)")


@check("convert_to_sync_bn", points=1)
def every_batchnorm_becomes_syncbn(g):
    """Every BatchNorm, at any depth, becomes an nn.SyncBatchNorm; nothing else changes."""
    _verify_structure(g.run(_in_rank_convert, False)[0])


@check("convert_to_sync_bn", points=0.5)
def weights_and_running_stats_kept(g):
    """The converted model's state_dict equals the original's."""
    _verify_state_kept(g.run(_in_rank_convert, False)[0])


@check("convert_to_sync_bn", points=0.5, hidden=True)
def model_that_is_a_batchnorm(g):
    """A model that is itself a BatchNorm layer comes back as an nn.SyncBatchNorm."""
    result = g.run(_in_rank_convert, True)[0]
    _verify_structure(result)
    _verify_state_kept(result)


def _in_rank_sync_bn_nccl(ctx, student, tail: tuple):
    problem = ref.bn_problem(ctx.world_size, tail, steps=1)
    model = student.task("convert_to_sync_bn")(nn.Sequential(ref.batchnorm_for(tail, problem))).to(ctx.device)
    x = ref.shard(problem["batches"][0], problem["sizes"], ctx.rank).to(ctx.device).requires_grad_(True)
    y = model(x)
    (y * ref.shard(problem["upstream"][0], problem["sizes"], ctx.rank).to(ctx.device)).sum().backward()
    return _cpu(y), _cpu(x.grad), ctx.backend


@check("convert_to_sync_bn", points=0.5)
def sync_bn_trains_under_nccl_with_2_gpus(g):
    """With a GPU per rank (nccl): the converted model runs real nn.SyncBatchNorm and matches one
    BatchNorm over the whole batch. nn.SyncBatchNorm refuses CPU tensors, so with fewer GPUs the check
    is skipped (credited only when the task's other checks pass) and the conversion is checked by
    structure only."""
    plan = g.plan(2)
    if plan.backend != "nccl":
        raise CheckSkipped(f"nn.SyncBatchNorm runs only on GPUs (it refuses CPU tensors) and this check needs one "
                           f"per rank; this machine has {plan.gpus} GPU(s) for 2 ranks, so convert_to_sync_bn was "
                           "checked by structure only")
    tail = (2, 2)
    results = g.run(_in_rank_sync_bn_nccl, tail, world_size=2)
    problem = ref.bn_problem(2, tail, steps=1)
    expected = ref.reference_bn_run(problem, tail)
    for rank, (y, x_grad, backend) in enumerate(results):
        _assert_close(y, ref.shard(expected["outputs"][0], problem["sizes"], rank),
                      f"rank {rank}: SyncBatchNorm output", backend=backend)
        _assert_close(x_grad, ref.shard(expected["input_grads"][0], problem["sizes"], rank),
                      f"rank {rank}: SyncBatchNorm input gradient", backend=backend)


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
            raise CheckFailed(f"global_batch_stats returned {type(result).__name__}; expected a tuple "
                              "(mean, var) of two tensors")
        out.append((_cpu(result[0]), _cpu(result[1])))
    return out, ctx.backend


def _verify_stats(results, world_size: int, tails) -> None:
    sizes = ref.shard_sizes(world_size)
    for rank, (per_tail, backend) in enumerate(results):
        for seed, (tail, (mean, var)) in enumerate(zip(tails, per_tail)):
            full = _stats_input(world_size, tail, seed)
            shape = f"input of shape {tuple(ref.shard(full, sizes, rank).shape)} on rank {rank} (sizes {sizes})"
            for name, got in (("mean", mean), ("var", var)):
                if tuple(got.shape) != (ref.CHANNELS,):
                    raise CheckFailed(f"{name} for an {shape} has shape {tuple(got.shape)}, expected "
                                      f"({ref.CHANNELS},): one value per channel (dimension 1), every other "
                                      "dimension reduced")
            exp_mean, exp_var = ref.batch_stats(full)
            if _close(mean, exp_mean, backend) and _close(var, exp_var, backend):
                continue
            for (wrong_mean, wrong_var), message in ref.wrong_stats(full, sizes, rank).values():
                if _close(mean, wrong_mean, backend) and _close(var, wrong_var, backend):
                    raise CheckFailed(f"for an {shape}: {message}")
            _assert_close(mean, exp_mean, f"the mean for an {shape}", backend=backend)
            _assert_close(var, exp_var, f"the variance for an {shape}", backend=backend)


@check("global_batch_stats", points=3)
def stats_of_the_concatenated_batch(g):
    """Uneven shards (3 and 5 samples), 2-d and 4-d inputs: the statistics of all samples together."""
    _verify_stats(g.run(_in_rank_stats, STATS_TAILS), g.world_size, STATS_TAILS)


@check("global_batch_stats", points=1, hidden=True, world_size=3)
def stats_with_three_ranks(g):
    """Three ranks holding 4, 1 and 6 samples of a 3-d input."""
    tails = [(5,)]
    _verify_stats(g.run(_in_rank_stats, tails), 3, tails)


# --- DistributedBatchNorm ---------------------------------------------------------------

BN_STEPS = 3
BN_TAIL = (2, 2)


def _in_rank_distributed_bn(ctx, student, tail: tuple, steps: int):
    problem = ref.bn_problem(ctx.world_size, tail, steps)
    sizes = problem["sizes"]
    bn = student.task("DistributedBatchNorm")(ref.CHANNELS, eps=problem["eps"], momentum=problem["momentum"])
    if isinstance(bn, nn.SyncBatchNorm):
        raise CheckFailed("DistributedBatchNorm is an nn.SyncBatchNorm: the task is to build it by hand, from "
                          "global_batch_stats and an autograd-aware all-reduce")
    for name in ("weight", "bias"):
        if not isinstance(getattr(bn, name, None), nn.Parameter):
            raise CheckFailed(f"DistributedBatchNorm has no nn.Parameter `{name}` of shape ({ref.CHANNELS},), "
                              "as nn.BatchNorm has")
    buffers = dict(bn.named_buffers())
    for name in ("running_mean", "running_var"):
        if name not in buffers:
            raise CheckFailed(f"DistributedBatchNorm has no buffer `{name}`: register it with "
                              "self.register_buffer, as nn.BatchNorm does")
    with torch.no_grad():
        bn.weight.copy_(problem["weight"])
        bn.bias.copy_(problem["bias"])
    bn = bn.to(ctx.device).train()
    out = {key: [] for key in ("outputs", "input_grads", "weight_grads", "bias_grads", "running_mean",
                               "running_var")}
    for step in range(steps):
        x = ref.shard(problem["batches"][step], sizes, ctx.rank).to(ctx.device).requires_grad_(True)
        upstream = ref.shard(problem["upstream"][step], sizes, ctx.rank).to(ctx.device)
        bn.zero_grad(set_to_none=True)
        y = bn(x)
        if not torch.is_tensor(y) or y.shape != x.shape:
            raise CheckFailed(f"the forward returned {getattr(y, 'shape', type(y).__name__)} for an input of "
                              f"shape {tuple(x.shape)}: return a tensor of the input's shape")
        if y.requires_grad:
            (y * upstream).sum().backward()  # this rank's share of the loss; the total is the sum over ranks
        out["outputs"].append(_cpu(y))
        out["input_grads"].append(_cpu(x.grad))
        out["weight_grads"].append(_cpu(bn.weight.grad))
        out["bias_grads"].append(_cpu(bn.bias.grad))
        out["running_mean"].append(_cpu(bn.running_mean))
        out["running_var"].append(_cpu(bn.running_var))
    bn.eval()
    with torch.no_grad():
        out["eval_output"] = _cpu(bn(ref.shard(problem["eval_batch"], sizes, ctx.rank).to(ctx.device)))
    out["backend"] = ctx.backend
    return out


def _bn_case(g, tail: tuple, world_size: int):
    results = g.run(_in_rank_distributed_bn, tail, BN_STEPS, world_size=world_size)
    problem = ref.bn_problem(world_size, tail, BN_STEPS)
    return results, problem, ref.reference_bn_run(problem, tail)


def _verify_bn_outputs(results, problem, expected) -> None:
    sizes = problem["sizes"]
    for rank, got in enumerate(results):
        for step in range(BN_STEPS):
            y, exp = got["outputs"][step], ref.shard(expected["outputs"][step], sizes, rank)
            if _close(y, exp, got["backend"]):
                continue
            if _close(y, ref.local_stats_outputs(problem, rank, step), got["backend"]):
                raise CheckFailed(f"rank {rank} (holding {sizes[rank]} of {sum(sizes)} samples) normalized with its "
                                  "own batch's statistics: use the mean and variance over every rank's samples "
                                  "(global_batch_stats) in the training forward")
            _assert_close(y, exp, f"rank {rank}: training output at step {step + 1}",
                         "normalize with the global mean and the biased global variance, then weight * x + bias",
                         backend=got["backend"])


def _verify_bn_backward(results, problem, expected) -> None:
    sizes = problem["sizes"]
    try:
        _verify_bn_outputs(results, problem, expected)
    except CheckFailed as exc:
        raise CheckFailed("the training outputs are already wrong, so the gradients cannot be right: "
                          f"{exc}") from None
    world_size = len(results)
    for rank, got in enumerate(results):
        for step in range(BN_STEPS):
            grad, exp = got["input_grads"][step], ref.shard(expected["input_grads"][step], sizes, rank)
            if grad is None:
                raise CheckFailed(f"rank {rank}: no gradient reached the input: the output must stay connected to "
                                  "the autograd graph (no torch.no_grad, .detach() or .data in the forward)")
            if _close(grad, exp, got["backend"]):
                continue
            if world_size > 1 and _close(grad, ref.detached_stats_input_grad(problem, rank, step), got["backend"]):
                raise CheckFailed(f"rank {rank}: the input gradient ignores the other ranks: the all-reduce of the "
                                  "statistics is invisible to autograd. Sum over ranks with an autograd Function "
                                  "whose backward all-reduces the incoming gradient too")
            _assert_close(grad, exp, f"rank {rank}: input gradient at step {step + 1}", backend=got["backend"])
    for name in ("weight", "bias"):
        for step in range(BN_STEPS):
            grads = [got[f"{name}_grads"][step] for got in results]
            if any(grad is None for grad in grads):
                raise CheckFailed(f"`{name}` got no gradient: use self.{name} in the training forward")
            exp = expected[f"{name}_grads"][step]
            backend = results[0]["backend"]
            total = torch.stack(grads).sum(0)
            if world_size > 1 and not _close(total, exp, backend) and all(_close(gr, exp, backend) for gr in grads):
                raise CheckFailed(f"every rank already holds the whole {name} gradient: the module must leave each "
                                  "rank its own samples' contribution (DDP then averages the ranks' gradients, so a "
                                  "whole gradient on every rank comes out world_size times too large)")
            _assert_close(total, exp, f"the {name} gradient summed over ranks at step {step + 1}",
                         f"each rank's {name}.grad is its own samples' share; together they are the whole "
                         "batch's gradient", backend=backend)


def _verify_bn_running_stats(results, problem, expected) -> None:
    sizes = problem["sizes"]
    for rank, got in enumerate(results):
        backend = got["backend"]
        for step in range(BN_STEPS):
            _assert_close(got["running_mean"][step], expected["running_mean"][step],
                         f"rank {rank}: running_mean after training step {step + 1}",
                         "running_mean = (1 - momentum) * running_mean + momentum * global mean (not detached "
                         "from a local mean)", backend=backend)
            var, exp = got["running_var"][step], expected["running_var"][step]
            if step == 0 and not _close(var, exp, backend):
                for wrong, message in ref.running_var_after_first_step(problem, rank).values():
                    if _close(var, wrong, backend):
                        raise CheckFailed(f"rank {rank}: {message}")
            _assert_close(var, exp, f"rank {rank}: running_var after training step {step + 1}",
                         "running_var = (1 - momentum) * running_var + momentum * unbiased global variance",
                         backend=backend)
        exp = ref.shard(expected["eval_output"], sizes, rank)
        if not _close(got["eval_output"], exp, backend):
            x = ref.shard(problem["eval_batch"], sizes, rank)
            mean, var = ref.batch_stats(problem["eval_batch"])
            local_mean, local_var = ref.batch_stats(x)
            for m, v in ((mean, var), (local_mean, local_var)):
                if _close(got["eval_output"], ref.normalize(x, m, v, problem["weight"], problem["bias"],
                                                            problem["eps"]), backend):
                    raise CheckFailed(f"rank {rank}: in eval mode the output used batch statistics: after "
                                      "model.eval() normalize with running_mean and running_var (self.training "
                                      "tells the two modes apart)")
            _assert_close(got["eval_output"], exp, f"rank {rank}: eval-mode output",
                         "in eval mode normalize with running_mean and running_var", backend=backend)


@check("DistributedBatchNorm", points=3)
def training_output_matches_one_batchnorm(g):
    """Outputs of 3 training steps on uneven 4-d shards equal one nn.BatchNorm2d over the whole batch."""
    _verify_bn_outputs(*_bn_case(g, BN_TAIL, g.world_size))


@check("DistributedBatchNorm", points=3)
def gradients_match_one_batchnorm(g):
    """Input gradients on every rank, and the weight and bias gradients summed over ranks."""
    _verify_bn_backward(*_bn_case(g, BN_TAIL, g.world_size))


@check("DistributedBatchNorm", points=2)
def running_stats_and_eval_match(g):
    """running_mean and the unbiased running_var after each step; the eval forward uses them."""
    _verify_bn_running_stats(*_bn_case(g, BN_TAIL, g.world_size))


@check("DistributedBatchNorm", points=1, hidden=True, world_size=3)
def distributed_bn_with_three_ranks(g):
    """Three ranks holding 4, 1 and 6 samples of a 2-d input: outputs, gradients, running statistics."""
    case = _bn_case(g, (), 3)
    _verify_bn_backward(*case)
    _verify_bn_running_stats(*case)


# --- partition_parameters ---------------------------------------------------------------

def _in_rank_partition(ctx, student, cases):
    fn = student.task("partition_parameters")
    out = []
    for shapes, world_sizes in cases:
        params = [torch.empty(shape) for shape in shapes]
        for world_size in world_sizes:
            owned = fn(params, world_size)
            try:
                owned = [[int(i) for i in indices] for indices in owned]
            except TypeError:
                raise CheckFailed(f"partition_parameters returned {owned!r}; expected a list with one list of "
                                  "parameter indices per rank") from None
            out.append(owned)
    return out


def _partition_cases(g, cases):
    results = g.run(_in_rank_partition, cases)
    if any(r != results[0] for r in results[1:]):
        raise CheckFailed("the ranks computed different partitions from the same parameters: every rank must get "
                          "the same answer (no randomness; break ties by index or rank)")
    flat = [(shapes, ws) for shapes, world_sizes in cases for ws in world_sizes]
    return [(shapes, ws, owned) for (shapes, ws), owned in zip(flat, results[0])]


def _verify_covering(shapes, world_size, owned) -> None:
    case = f"for {len(shapes)} parameters over world_size={world_size}"
    if len(owned) != world_size:
        raise CheckFailed(f"{case} the result has {len(owned)} lists; expected one per rank ({world_size}), "
                          "empty for a rank that owns nothing")
    seen = sorted(i for indices in owned for i in indices)
    if seen != list(range(len(shapes))):
        missing = sorted(set(range(len(shapes))) - set(seen))
        twice = sorted({i for i in seen if seen.count(i) > 1})
        raise CheckFailed(f"{case} every index 0..{len(shapes) - 1} must appear exactly once; "
                          + (f"missing {missing}" if missing else "")
                          + (" and " if missing and twice else "") + (f"owned twice {twice}" if twice else "")
                          + (f"unknown {sorted(set(seen) - set(range(len(shapes))))}"
                             if not missing and not twice else ""))


def _verify_balance(shapes, world_size, owned) -> None:
    sizes = [torch.Size(s).numel() for s in shapes]
    loads = [sum(sizes[i] for i in indices) for indices in owned]
    largest = max(sizes)
    if max(loads) - min(loads) > largest:
        raise CheckFailed(f"for parameters of {sizes} elements over {world_size} ranks, the ranks own {loads} "
                          f"elements: the gap exceeds the largest parameter ({largest}), so moving one parameter "
                          "would balance better. Balance by element count (numel), not by number of tensors: "
                          "e.g. largest first, each to the rank with the fewest elements so far")


def _verify_everyone_owns(shapes, world_size, owned) -> None:
    idle = [rank for rank, indices in enumerate(owned) if not indices]
    if idle and len(shapes) >= world_size:
        raise CheckFailed(f"for {len(shapes)} parameters over world_size={world_size}, rank(s) {idle} own no "
                          "parameter: that is no sharding at all; spread the parameters over every rank, balanced "
                          "by element count")


@check("partition_parameters", points=1)
def every_parameter_owned_once(g):
    """One list per rank; every index exactly once; no rank idle while there are enough parameters;
    the same answer on every rank."""
    for case in _partition_cases(g, ref.PARTITION_CASES):
        _verify_covering(*case)
        _verify_everyone_owns(*case)


@check("partition_parameters", points=2)
def balanced_by_element_count(g):
    """The busiest and the idlest rank differ by at most one largest parameter."""
    for case in _partition_cases(g, ref.PARTITION_CASES):
        _verify_covering(*case)
        _verify_balance(*case)


@check("partition_parameters", points=1, hidden=True)
def more_ranks_than_parameters(g):
    """world_size 1, ranks that own nothing, equal sizes."""
    for case in _partition_cases(g, ref.HIDDEN_PARTITION_CASES):
        _verify_covering(*case)
        _verify_balance(*case)


# --- ShardedOptimizer -------------------------------------------------------------------

SHARDED_STEPS = 10


def _inner_optimizers(opt) -> list:
    inner = getattr(opt, "optim", None)
    if isinstance(inner, torch.optim.Optimizer):
        return [inner]
    found = {}
    for value in vars(opt).values():
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(item, torch.optim.Optimizer):
                found[id(item)] = item
    if not found and isinstance(opt, torch.optim.Optimizer):
        found[id(opt)] = opt
    return list(found.values())


def _in_rank_sharded(ctx, student, opt_name: str, steps: int):
    cls, kwargs, _ = ref.OPTIMIZERS[opt_name]
    model = ref.mlp().to(ctx.device)
    initial = [_cpu(p) for p in model.parameters()]
    # a generator, as model.parameters() always is: the optimizer must read it only once
    opt = student.task("ShardedOptimizer")(model.parameters(), cls, **kwargs)
    x, y = (t.to(ctx.device) for t in ref.regression_batch())
    for _ in range(steps):
        opt.zero_grad()
        # The same batch on every rank: the gradients agree, as after DDP's all-reduce.
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    params = [_cpu(p) for p in model.parameters()]
    # One more step from gradients that differ per rank: a sharded optimizer still leaves every
    # rank the same parameters (the owners' results, broadcast); a plain one does not.
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y + ctx.rank).backward()
    opt.step()
    after_divergent = [_cpu(p) for p in model.parameters()]
    opt.zero_grad()
    leftover = [i for i, p in enumerate(model.parameters()) if p.grad is not None and bool(p.grad.any())]
    inner = _inner_optimizers(opt)
    state = sum(ref.state_elements(o) for o in inner) if inner or getattr(opt, "optim", 0) is None else None
    return {"initial": initial, "params": params, "leftover_grads": leftover, "state": state,
            "after_divergent": after_divergent, "backend": ctx.backend}


def _disagreement(results) -> str | None:
    first = results[0]["after_divergent"]
    for rank, got in enumerate(results[1:], start=1):
        if any(not torch.equal(a, b) for a, b in zip(got["after_divergent"], first)):
            return (f"after a step whose gradients differ between ranks, ranks 0 and {rank} hold different "
                    "parameters: each rank stepped every parameter itself, so nothing is sharded. Step only the "
                    "parameters this rank owns, then broadcast each from its owner")
    return None


def _require_sharded_step(results) -> None:
    problem = _disagreement(results)
    if problem:
        raise CheckFailed(problem)


def _verify_sharded_params(results, opt_name: str) -> None:
    expected = ref.unsharded_training(opt_name, SHARDED_STEPS)
    label = {"adam": "Adam", "sgd_momentum": "SGD with momentum"}[opt_name]
    for rank, got in enumerate(results):
        for i, (p, exp) in enumerate(zip(got["params"], expected)):
            if _close(p, exp, got["backend"]):
                continue
            if torch.equal(p, got["initial"][i]):
                raise CheckFailed(f"rank {rank}: parameter {i} never changed in {SHARDED_STEPS} steps: another rank "
                                  "owns it, and its new value must reach every rank: after the local step, "
                                  "broadcast each parameter from the rank that owns it")
            _assert_close(p, exp, f"rank {rank}: parameter {i} after {SHARDED_STEPS} {label} steps",
                         "the sharded run must equal the unsharded optimizer: step() updates each parameter once "
                         "(on its owner) and shares it; zero_grad() clears every gradient", backend=got["backend"])


def _verify_sharded_state(results, opt_name: str) -> None:
    _, _, per_param = ref.OPTIMIZERS[opt_name]
    sizes = [p.numel() for p in ref.mlp().parameters()]
    total, largest, world_size = per_param * sum(sizes), per_param * max(sizes), len(results)
    states = [got["state"] for got in results]
    if any(s is None for s in states):
        raise CheckFailed("no inner optimizer found: keep the optimizer_cls instance over this rank's parameters "
                          "in self.optim (None on a rank that owns no parameter)")
    if world_size > 1 and all(s >= total for s in states):
        raise CheckFailed(f"each rank keeps optimizer state for every parameter ({states} elements; all of the "
                          f"state is {total}): build the inner optimizer over the parameters this rank owns only")
    if sum(states) > total:
        raise CheckFailed(f"the ranks hold {states} state elements, {sum(states)} in all, more than the {total} an "
                          "unsharded optimizer holds: some parameters have state on more than one rank")
    if sum(states) < total:
        raise CheckFailed(f"the ranks hold {states} state elements, {sum(states)} in all, fewer than the {total} an "
                          "unsharded optimizer holds: some parameter is owned by no rank")
    bound = total / world_size + largest
    for rank, state in enumerate(states):
        if state > bound:
            raise CheckFailed(f"rank {rank} holds {state} of {total} state elements; about 1/{world_size} is "
                              f"expected (at most {bound:.0f}, one largest parameter above an even share): "
                              "use partition_parameters, balanced by element count")


@check("ShardedOptimizer", points=3)
def matches_unsharded_adam(g):
    """10 steps of ShardedOptimizer(Adam) give every rank the parameters of 10 steps of plain Adam."""
    results = g.run(_in_rank_sharded, "adam", SHARDED_STEPS)
    _verify_sharded_params(results, "adam")
    _require_sharded_step(results)


@check("ShardedOptimizer", points=1)
def matches_unsharded_sgd_momentum(g):
    """The same with SGD(momentum=0.9): one state tensor per parameter instead of two."""
    results = g.run(_in_rank_sharded, "sgd_momentum", SHARDED_STEPS)
    _verify_sharded_params(results, "sgd_momentum")
    _require_sharded_step(results)


@check("ShardedOptimizer", points=2)
def optimizer_state_is_sharded(g):
    """Each rank's optimizer state is about 1/N of the total (within one largest parameter), none duplicated."""
    _verify_sharded_state(g.run(_in_rank_sharded, "adam", 2), "adam")


@check("ShardedOptimizer", points=1)
def zero_grad_clears_every_gradient(g):
    """After zero_grad() no parameter, owned here or not, keeps a gradient (of an optimizer that
    shards something: its state or its step)."""
    results = g.run(_in_rank_sharded, "sgd_momentum", 1)
    total = ref.OPTIMIZERS["sgd_momentum"][2] * sum(p.numel() for p in ref.mlp().parameters())
    if len(results) > 1 and all((got["state"] or 0) >= total for got in results) and _disagreement(results):
        raise CheckFailed("this is no sharded optimizer: every rank keeps the whole optimizer state and steps "
                          "every parameter itself. " + _disagreement(results))
    for rank, got in enumerate(results):
        if got["leftover_grads"]:
            raise CheckFailed(f"rank {rank}: after zero_grad() parameters {got['leftover_grads']} still have "
                              "gradients: clear the gradients of every parameter, not only of the ones this "
                              "rank owns (backward fills them all)")


@check("ShardedOptimizer", points=1, hidden=True, world_size=3)
def sharded_with_three_ranks(g):
    """Three ranks: Adam results and state sharding."""
    results = g.run(_in_rank_sharded, "adam", SHARDED_STEPS)
    _verify_sharded_params(results, "adam")
    _verify_sharded_state(results, "adam")


# --- save_sharded_checkpoint ------------------------------------------------------------

CHECKPOINT_STEPS = 3
SLOW_WRITE_MAX_S = 0.6  # how long rank 0's write waits for ranks that return without waiting for it


def _returned_marker(ctx, rank: int) -> str:
    return os.path.join(ctx.workdir, f"returned.{rank}")


def _hold_write_until_others_returned(ctx) -> None:
    """A slow disk on rank 0, made deterministic: the write starts only once every other rank has
    returned and looked for the file, or after SLOW_WRITE_MAX_S when they are (rightly) still
    waiting in a barrier. A rank that returns early therefore always finds no file."""
    deadline = time.monotonic() + SLOW_WRITE_MAX_S
    others = [_returned_marker(ctx, r) for r in range(1, ctx.world_size)]
    while time.monotonic() < deadline and not all(os.path.exists(m) for m in others):
        time.sleep(0.02)


def _in_rank_checkpoint(ctx, student, resume: bool, slow_write: bool):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    adam, kwargs, _ = ref.OPTIMIZERS["adam"]
    model = ref.mlp().to(ctx.device)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=adam, **kwargs)
    x, y = (t.to(ctx.device) for t in ref.regression_batch())
    for _ in range(CHECKPOINT_STEPS):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    path = os.path.join(ctx.workdir, "checkpoint.pt")
    writes, real_save = [], torch.save

    def recording_save(obj, f, *args, **kwargs):
        # Files only: consolidate_state_dict itself torch.saves into in-memory buffers.
        target = os.fspath(f) if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
        if isinstance(target, str):
            writes.append(target)
            if ctx.rank == 0 and slow_write:
                _hold_write_until_others_returned(ctx)
        return real_save(obj, f, *args, **kwargs)

    torch.save = recording_save
    try:
        student.task("save_sharded_checkpoint")(model, opt, path)
    finally:
        torch.save = real_save
    try:
        torch.load(path, map_location="cpu")
        complete_at_return = True
    except Exception:
        complete_at_return = False
    open(_returned_marker(ctx, ctx.rank), "w").close()
    dist.barrier()  # ours: now the file is finished whatever the student did (or we hang with rank 0)
    problems, params = _checkpoint_problems(path, model), None
    if resume and not problems:
        fresh = ref.mlp(seed=123).to(ctx.device)  # different weights: the checkpoint must overwrite them
        fresh_opt = ZeroRedundancyOptimizer(fresh.parameters(), optimizer_class=adam, **kwargs)
        checkpoint = torch.load(path, map_location=ctx.device)
        fresh.load_state_dict(checkpoint["model"])
        fresh_opt.load_state_dict(checkpoint["optimizer"])
        fresh_opt.zero_grad()
        nn.functional.mse_loss(fresh(x), y).backward()
        fresh_opt.step()
        params = [_cpu(p) for p in fresh.parameters()]
    return {"writes": writes, "complete_at_return": complete_at_return, "problems": problems,
            "params": params, "backend": ctx.backend}


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
        problems.append(f"checkpoint['optimizer'] holds state for {len(optim['state'])} of {n_params} parameters: "
                        "it is one rank's shard; save the state consolidated from every rank")
    return problems


def _run_checkpoint(g, resume: bool, world_size: int | None = None, slow_write: bool = False) -> list:
    result = g.run_raw(_in_rank_checkpoint, resume, slow_write, world_size=world_size,
                       timeout=min(g.timeout, CHECKPOINT_TIMEOUT_S))
    if result.ok:
        return [r.value for r in result.ranks]
    stacks = " ".join(r.stack for r in result.ranks if r.status == "hung")
    if "consolidate_state_dict" in stacks:
        raise CheckFailed("the save deadlocked inside consolidate_state_dict: it is a collective, so every rank "
                          "must call it (consolidation on one rank only waits forever for the others' shards). "
                          "Call optimizer.consolidate_state_dict(to=0) on every rank, then torch.save on rank 0 "
                          "only, then dist.barrier() on every rank.\n" + result.failure())
    errors = " ".join(str(r.error) for r in result.ranks if r.error)
    hint = ""
    if "has not been consolidated" in errors:
        hint = ("optimizer.state_dict() of a ZeroRedundancyOptimizer needs the consolidated state: call "
                "optimizer.consolidate_state_dict(to=0) on every rank first, then state_dict() and torch.save "
                "on rank 0 only")
    raise CheckFailed(describe_failure(result, hint))


def _verify_checkpoint_written(results) -> None:
    for rank, got in enumerate(results):
        if rank > 0 and got["writes"]:
            raise CheckFailed(f"rank {rank} also called torch.save: only rank 0 writes the checkpoint (ranks "
                              "writing the same file at once can leave it corrupt)")
    if not results[0]["writes"]:
        raise CheckFailed("rank 0 did not call torch.save: write {'model': ..., 'optimizer': ...} with torch.save "
                          "on rank 0")
    for rank, got in enumerate(results):
        if got["problems"]:
            raise CheckFailed("the checkpoint is incomplete: " + "; ".join(got["problems"]))
    for rank, got in enumerate(results):
        if not got["complete_at_return"]:
            raise CheckFailed(f"rank {rank} returned before the checkpoint file was complete (rank 0 was still "
                              "writing it): end with dist.barrier() on every rank, so that no rank goes on to "
                              "read, resume or exit before the file exists")


def _verify_resume(results) -> None:
    expected = ref.unsharded_training("adam", CHECKPOINT_STEPS + 1)
    for rank, got in enumerate(results):
        if got["params"] is None:
            raise CheckFailed("the checkpoint could not be resumed: " + "; ".join(got["problems"]))
        for i, (p, exp) in enumerate(zip(got["params"], expected)):
            _assert_close(p, exp, f"rank {rank}: parameter {i} after resuming and taking one more step",
                         "the checkpoint must hold the model and the whole optimizer state (Adam's moments and "
                         "step counts) as they were when saved", backend=got["backend"])


@check("save_sharded_checkpoint", points=1.5)
def checkpoint_complete_and_written_once(g):
    """Rank 0 alone writes model and full optimizer state; no rank returns before the file is complete;
    the call never deadlocks (run with a short timeout)."""
    _verify_checkpoint_written(_run_checkpoint(g, resume=False, slow_write=True))


@check("save_sharded_checkpoint", points=1.5)
def resume_matches_uninterrupted_run(g):
    """Fresh model and ZeroRedundancyOptimizer load the checkpoint; the next step equals an uninterrupted run."""
    _verify_resume(_run_checkpoint(g, resume=True))


@check("save_sharded_checkpoint", points=1, hidden=True, world_size=3)
def checkpoint_with_three_ranks(g):
    """Three ranks: written once, complete, and resumes exactly."""
    results = _run_checkpoint(g, resume=True, world_size=3, slow_write=True)
    _verify_checkpoint_written(results)
    _verify_resume(results)
