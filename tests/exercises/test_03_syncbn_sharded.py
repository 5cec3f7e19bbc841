"""03_syncbn_sharded: each typical mistake fails its own check with a message that names it, and leaves the other
checks of its task alone. The solution's full marks, hidden 3-rank checks included (a check this hardware cannot run
says so and is credited): tests/test_selfcheck.py (test_each_solution_passes_every_check_of_every_task)."""

import pytest

from grader.engine.plan import current_plan
from tests.helpers import (
    assert_one_reason,
    failed,
    grade_source,
    mutate,
    solution_source,
)

EXERCISE = "03_syncbn_sharded"


def _nccl_check_runs_here() -> bool:
    return current_plan(2).backend == "nccl"


@pytest.mark.skipif(_nccl_check_runs_here(), reason="2 or more GPUs: the nccl check runs for real here")
def test_nccl_check_says_why_it_was_skipped_without_two_gpus():
    report = grade_source(EXERCISE, solution_source(EXERCISE), task="convert_to_sync_bn")
    nccl = next(c for c in report.checks if c.name == "sync_bn_trains_under_nccl_with_2_gpus")
    assert nccl.skipped, "\n".join(report.lines())
    reason = nccl.message + " ".join(nccl.notes)
    assert "runs only on GPUs" in reason and f"{current_plan(2).gpus} GPU(s)" in reason, reason


@pytest.mark.skipif(not _nccl_check_runs_here(), reason="needs 2 GPUs: nn.SyncBatchNorm refuses CPU tensors")
def test_nccl_check_runs_real_sync_batchnorm_with_two_gpus():
    report = grade_source(EXERCISE, solution_source(EXERCISE), task="convert_to_sync_bn")
    nccl = next(c for c in report.checks if c.name == "sync_bn_trains_under_nccl_with_2_gpus")
    assert nccl.passed and not getattr(nccl, "skipped", False), "\n".join(report.lines())


RECURSIVE = "    return nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"

# (task, old, new, the check that must fail, a phrase of its message, checks of the task that must still pass)
MUTANTS = [
    (
        "convert_to_sync_bn",
        RECURSIVE,
        "    for name, child in model.named_children():\n"
        "        if isinstance(child, nn.modules.batchnorm._BatchNorm):\n"
        "            setattr(model, name, nn.SyncBatchNorm.convert_sync_batchnorm(child))\n"
        "    return model\n",
        "every_batchnorm_becomes_syncbn",
        "must be recursive",
        ["weights_and_running_stats_kept"],
    ),
    (
        "convert_to_sync_bn",
        RECURSIVE,
        "    for module in list(model.modules()):\n"
        "        for name, child in list(module.named_children()):\n"
        "            if isinstance(child, nn.modules.batchnorm._BatchNorm):\n"
        "                setattr(module, name, nn.SyncBatchNorm(child.num_features, child.eps, child.momentum,"
        " child.affine))\n"
        "    return model\n",
        "weights_and_running_stats_kept",
        "must start from the old layer's",
        ["every_batchnorm_becomes_syncbn"],
    ),
    (
        "convert_to_sync_bn",
        RECURSIVE,
        "    nn.SyncBatchNorm.convert_sync_batchnorm(model)\n",
        "every_batchnorm_becomes_syncbn",
        "not the converted model",
        [],
    ),
    (
        "global_batch_stats",
        "    total = AllReduceSum.apply(local)\n",
        "    total = local\n",
        "stats_of_the_concatenated_batch",
        "this rank's own statistics",
        [],
    ),
    (
        "global_batch_stats",
        "    total = AllReduceSum.apply(local)\n",
        "    local = torch.cat([local[:2 * channels] / count, local[-1:]])\n"
        "    local = torch.cat([local[:channels], local[channels:2 * channels] - local[:channels] ** 2, local[-1:]])\n"
        "    total = AllReduceSum.apply(local) / dist.get_world_size()\n"
        "    return total[:channels], total[channels:2 * channels]\n",
        "stats_of_the_concatenated_batch",
        "weigh by its number of samples",
        [],
    ),
    (
        "global_batch_stats",
        "    return mean, var\n",
        "    return mean, var * n / (n - 1)\n",
        "stats_of_the_concatenated_batch",
        "unbiased",
        [],
    ),
    (
        "DistributedBatchNorm",
        "            mean, var = global_batch_stats(x)  #",
        "            mean, var = x.mean(dim=[0] + list(range(2, x.dim()))), "
        "x.var(dim=[0] + list(range(2, x.dim())), unbiased=False)  #",
        "training_output_matches_one_batchnorm",
        "its own batch's statistics",
        [],
    ),
    (
        "DistributedBatchNorm",
        "        dist.all_reduce(grad, op=dist.ReduceOp.SUM)\n        return grad\n",
        "        return grad\n",
        "gradients_match_one_batchnorm",
        "invisible to autograd",
        ["training_output_matches_one_batchnorm", "running_stats_and_eval_match"],
    ),
    (
        "DistributedBatchNorm",
        "unbiased = var * n / (n - 1).clamp(min=1)",
        "unbiased = var",
        "running_stats_and_eval_match",
        "biased variance",
        ["training_output_matches_one_batchnorm", "gradients_match_one_batchnorm"],
    ),
    (
        "DistributedBatchNorm",
        "                dist.all_reduce(n)\n",
        "",
        "running_stats_and_eval_match",
        "this rank's count",
        ["training_output_matches_one_batchnorm", "gradients_match_one_batchnorm"],
    ),
    (
        "DistributedBatchNorm",
        "        if self.training:\n",
        "        if True:\n",
        "running_stats_and_eval_match",
        "in eval mode the output used batch statistics",
        ["training_output_matches_one_batchnorm", "gradients_match_one_batchnorm"],
    ),
    (
        "partition_parameters",
        "    loads = [0] * world_size\n",
        "    return [list(range(r, len(params), world_size)) for r in range(world_size)]\n",
        "balanced_by_element_count",
        "not by number of tensors",
        ["every_parameter_owned_once"],
    ),
    (
        "partition_parameters",
        "sorted(range(len(params)),",
        "sorted(range(len(params) - 1),",
        "every_parameter_owned_once",
        "missing",
        [],
    ),
    (
        "ShardedOptimizer",
        "optimizer_cls(mine, **defaults) if mine else None",
        "optimizer_cls(self.params, **defaults)",
        "optimizer_state_is_sharded",
        "for every parameter",
        ["matches_unsharded_adam", "matches_unsharded_sgd_momentum", "zero_grad_clears_every_gradient"],
    ),
    (
        "ShardedOptimizer",
        "                dist.broadcast(p, src=owner)\n",
        "                pass\n",
        "matches_unsharded_adam",
        "broadcast each parameter from the rank that owns it",
        ["optimizer_state_is_sharded", "zero_grad_clears_every_gradient"],
    ),
    (
        "ShardedOptimizer",
        "        for p in self.params:  # every parameter",
        "        for p in (self.optim.param_groups[0]['params'] if self.optim else []):  #",
        "zero_grad_clears_every_gradient",
        "not only of the ones this rank owns",
        ["matches_unsharded_adam", "matches_unsharded_sgd_momentum", "optimizer_state_is_sharded"],
    ),
    (
        "save_sharded_checkpoint",
        "    dist.barrier()  # nobody returns",
        "    pass  # nobody returns",
        "checkpoint_complete_and_written_once",
        "returned before the checkpoint file was complete",
        ["resume_matches_uninterrupted_run"],
    ),
    (
        "save_sharded_checkpoint",
        "    dist.barrier()  # nobody returns",
        "    dist.all_reduce(torch.zeros(1))  #",
        "checkpoint_complete_and_written_once",
        "on NCCL (GPUs) dist.all_reduce returns once it is queued",
        ["resume_matches_uninterrupted_run"],
    ),  # passes on gloo by itself, so judged as on nccl (fences.py)
    (
        "save_sharded_checkpoint",
        "optimizer.state_dict()}, path)",
        "optimizer.optim.state_dict()}, path)",
        "checkpoint_complete_and_written_once",
        "one rank's shard",
        [],
    ),
    (
        "save_sharded_checkpoint",
        "    if dist.get_rank() == 0:\n        torch.save",
        "    if True:\n        torch.save",
        "checkpoint_complete_and_written_once",
        "consolidate_state_dict(to=0) on every rank first",
        [],
    ),
]


@pytest.mark.parametrize(
    "task, old, new, check_name, phrase, unaffected", MUTANTS, ids=[f"{m[3]}:{m[4][:24]}" for m in MUTANTS]
)
def test_typical_mistake_fails_with_a_targeted_message(task, old, new, check_name, phrase, unaffected):
    report = grade_source(EXERCISE, mutate(solution_source(EXERCISE), old, new), task=task)
    messages = failed(report)
    assert check_name in messages, f"{check_name} passed; results:\n" + "\n".join(report.lines())
    assert phrase in messages[check_name], messages[check_name]
    wrongly_failed = [name for name in unaffected if name in messages]
    assert not wrongly_failed, "\n".join(report.lines())
    assert_one_reason(report, check_name)  # the checks whose expectation rests on it point to it


@pytest.mark.timeout(120)  # the check's own short timeout catches the deadlock; the default 30 s each would not fit
def test_consolidating_on_rank_0_only_deadlocks_and_says_so():
    source = mutate(
        solution_source(EXERCISE),
        "    optimizer.consolidate_state_dict(to=0)\n    if dist.get_rank() == 0:\n",
        "    if dist.get_rank() == 0:\n        optimizer.consolidate_state_dict(to=0)\n",
    )
    report = grade_source(EXERCISE, source, checks=["checkpoint_complete_and_written_once"])
    message = failed(report)["checkpoint_complete_and_written_once"]
    assert "consolidation on one rank only" in message and "every rank must call it" in message, message


def test_a_wait_that_holds_on_gloo_only_is_no_fence():
    """An all_reduce as the wait passes on CPU by luck of gloo's blocking: the check says why it is no wait on GPUs."""
    source = mutate(
        solution_source(EXERCISE),
        "    dist.barrier()  # nobody returns before the file is complete\n",
        "    dist.all_reduce(torch.zeros(1))\n",
    )
    report = grade_source(EXERCISE, source, checks=["checkpoint_complete_and_written_once"])
    message = failed(report)["checkpoint_complete_and_written_once"]
    assert "rank 1 waited for rank 0's checkpoint only in dist.all_reduce" in message, message
    assert "dist.barrier()" in message, message
