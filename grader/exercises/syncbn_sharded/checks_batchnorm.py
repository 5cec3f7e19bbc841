"""03_syncbn_sharded: DistributedBatchNorm, a synchronized BatchNorm built by hand.

Every check runs the student's task in real ranks (world size 2 unless the
check asks for another; the hidden ones use 3) and compares what the ranks
computed together with one process working on the whole batch (reference.py).
Functions prefixed `_in_rank_` run inside every rank and return plain CPU
tensors; the verdicts are reached in the parent.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded.scaled_closeness import assert_close_scaled, close, cpu
from grader.exercises.syncbn_sharded import EXERCISE

# --- DistributedBatchNorm ---------------------------------------------------------------

BN_STEPS = 3
BN_TAIL = (2, 2)


def _in_rank_distributed_bn(ctx, student, tail: tuple, steps: int):
    problem = ref.bn_problem(ctx.world_size, tail, steps)
    sizes = problem["sizes"]
    bn = student.task("DistributedBatchNorm")(ref.CHANNELS, eps=problem["eps"], momentum=problem["momentum"])
    if isinstance(bn, nn.SyncBatchNorm):
        raise CheckFailed(
            "DistributedBatchNorm is an nn.SyncBatchNorm: the task is to build it by hand, from "
            "global_batch_stats and an autograd-aware all-reduce"
        )
    for name in ("weight", "bias"):
        if not isinstance(getattr(bn, name, None), nn.Parameter):
            raise CheckFailed(
                f"DistributedBatchNorm has no nn.Parameter `{name}` of shape ({ref.CHANNELS},), as nn.BatchNorm has"
            )
    buffers = dict(bn.named_buffers())
    for name in ("running_mean", "running_var"):
        if name not in buffers:
            raise CheckFailed(
                f"DistributedBatchNorm has no buffer `{name}`: register it with "
                "self.register_buffer, as nn.BatchNorm does"
            )
    with torch.no_grad():
        bn.weight.copy_(problem["weight"])
        bn.bias.copy_(problem["bias"])
    bn = bn.to(ctx.device).train()
    out = {key: [] for key in ("outputs", "input_grads", "weight_grads", "bias_grads", "running_mean", "running_var")}
    for step in range(steps):
        x = ref.shard(problem["batches"][step], sizes, ctx.rank).to(ctx.device).requires_grad_(True)
        upstream = ref.shard(problem["upstream"][step], sizes, ctx.rank).to(ctx.device)
        bn.zero_grad(set_to_none=True)
        y = bn(x)
        if not torch.is_tensor(y) or y.shape != x.shape:
            raise CheckFailed(
                f"the forward returned {getattr(y, 'shape', type(y).__name__)} for an input of "
                f"shape {tuple(x.shape)}: return a tensor of the input's shape"
            )
        if y.requires_grad:
            (y * upstream).sum().backward()  # this rank's share of the loss; the total is the sum over ranks
        out["outputs"].append(cpu(y))
        out["input_grads"].append(cpu(x.grad))
        out["weight_grads"].append(cpu(bn.weight.grad))
        out["bias_grads"].append(cpu(bn.bias.grad))
        out["running_mean"].append(cpu(bn.running_mean))
        out["running_var"].append(cpu(bn.running_var))
    bn.eval()
    with torch.no_grad():
        out["eval_output"] = cpu(bn(ref.shard(problem["eval_batch"], sizes, ctx.rank).to(ctx.device)))
    out["backend"] = ctx.backend
    return out


def _bn_case(g, tail: tuple, world_size: int):
    results = g.run(_in_rank_distributed_bn, tail, BN_STEPS, world_size=world_size)
    problem = ref.bn_problem(world_size, tail, BN_STEPS)
    return results, problem, ref.reference_bn_run(problem, tail)


def _verify_bn_outputs(g, results, problem, expected) -> None:
    sizes = problem["sizes"]
    for rank, got in enumerate(results):
        for step in range(BN_STEPS):
            y, exp = got["outputs"][step], ref.shard(expected["outputs"][step], sizes, rank)
            if close(g, y, exp):
                continue
            if close(g, y, ref.local_stats_outputs(problem, rank, step)):
                raise CheckFailed(
                    f"rank {rank} (holding {sizes[rank]} of {sum(sizes)} samples) normalized with its "
                    "own batch's statistics: use the mean and variance over every rank's samples "
                    "(global_batch_stats) in the training forward"
                )
            assert_close_scaled(
                g,
                y,
                exp,
                f"rank {rank}: training output at step {step + 1}",
                "normalize with the global mean and the biased global variance, then weight * x + bias",
            )


def _verify_bn_backward(g, results, problem, expected) -> None:
    sizes = problem["sizes"]
    try:
        _verify_bn_outputs(g, results, problem, expected)
    except CheckFailed as exc:
        raise CheckFailed(f"the training outputs are already wrong, so the gradients cannot be right: {exc}") from None
    world_size = len(results)
    for rank, got in enumerate(results):
        for step in range(BN_STEPS):
            grad, exp = got["input_grads"][step], ref.shard(expected["input_grads"][step], sizes, rank)
            if grad is None:
                raise CheckFailed(
                    f"rank {rank}: no gradient reached the input: the output must stay connected to "
                    "the autograd graph (no torch.no_grad, .detach() or .data in the forward)"
                )
            if close(g, grad, exp):
                continue
            if world_size > 1 and close(g, grad, ref.detached_stats_input_grad(problem, rank, step)):
                raise CheckFailed(
                    f"rank {rank}: the input gradient ignores the other ranks: the all-reduce of the "
                    "statistics is invisible to autograd. Sum over ranks with an autograd Function "
                    "whose backward all-reduces the incoming gradient too"
                )
            assert_close_scaled(g, grad, exp, f"rank {rank}: input gradient at step {step + 1}")
    for name in ("weight", "bias"):
        for step in range(BN_STEPS):
            grads = [got[f"{name}_grads"][step] for got in results]
            if any(grad is None for grad in grads):
                raise CheckFailed(f"`{name}` got no gradient: use self.{name} in the training forward")
            exp = expected[f"{name}_grads"][step]
            total = torch.stack(grads).sum(0)
            if world_size > 1 and not close(g, total, exp) and all(close(g, gr, exp) for gr in grads):
                raise CheckFailed(
                    f"every rank already holds the whole {name} gradient: the module must leave each "
                    "rank its own samples' contribution (DDP then averages the ranks' gradients, so a "
                    "whole gradient on every rank comes out world_size times too large)"
                )
            assert_close_scaled(
                g,
                total,
                exp,
                f"the {name} gradient summed over ranks at step {step + 1}",
                f"each rank's {name}.grad is its own samples' share; together they are the whole batch's gradient",
            )


def _verify_bn_running_stats(g, results, problem, expected) -> None:
    sizes = problem["sizes"]
    for rank, got in enumerate(results):
        for step in range(BN_STEPS):
            assert_close_scaled(
                g,
                got["running_mean"][step],
                expected["running_mean"][step],
                f"rank {rank}: running_mean after training step {step + 1}",
                "running_mean = (1 - momentum) * running_mean + momentum * global mean (not detached "
                "from a local mean)",
            )
            var, exp = got["running_var"][step], expected["running_var"][step]
            if step == 0 and not close(g, var, exp):
                for wrong, message in ref.running_var_after_first_step(problem, rank).values():
                    if close(g, var, wrong):
                        raise CheckFailed(f"rank {rank}: {message}")
            assert_close_scaled(
                g,
                var,
                exp,
                f"rank {rank}: running_var after training step {step + 1}",
                "running_var = (1 - momentum) * running_var + momentum * unbiased global variance",
            )
        exp = ref.shard(expected["eval_output"], sizes, rank)
        if not close(g, got["eval_output"], exp):
            x = ref.shard(problem["eval_batch"], sizes, rank)
            mean, var = ref.batch_stats(problem["eval_batch"])
            local_mean, local_var = ref.batch_stats(x)
            for m, v in ((mean, var), (local_mean, local_var)):
                if close(
                    g, got["eval_output"], ref.normalize(x, m, v, problem["weight"], problem["bias"], problem["eps"])
                ):
                    raise CheckFailed(
                        f"rank {rank}: in eval mode the output used batch statistics: after "
                        "model.eval() normalize with running_mean and running_var (self.training "
                        "tells the two modes apart)"
                    )
            assert_close_scaled(
                g,
                got["eval_output"],
                exp,
                f"rank {rank}: eval-mode output",
                "in eval mode normalize with running_mean and running_var",
            )


@EXERCISE.check("DistributedBatchNorm", points=3)
def training_output_matches_one_batchnorm(g):
    """Outputs of 3 training steps on uneven 4-d shards equal one nn.BatchNorm2d over the whole batch."""
    _verify_bn_outputs(g, *_bn_case(g, BN_TAIL, g.world_size))


@EXERCISE.check("DistributedBatchNorm", points=3, depends_on=("training_output_matches_one_batchnorm",))
def gradients_match_one_batchnorm(g):
    """Input gradients on every rank, and the weight and bias gradients summed over ranks."""
    _verify_bn_backward(g, *_bn_case(g, BN_TAIL, g.world_size))


@EXERCISE.check("DistributedBatchNorm", points=2, depends_on=("training_output_matches_one_batchnorm",))
def running_stats_and_eval_match(g):
    """running_mean and the unbiased running_var after each step; the eval forward uses them."""
    _verify_bn_running_stats(g, *_bn_case(g, BN_TAIL, g.world_size))
