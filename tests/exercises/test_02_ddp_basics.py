"""02_ddp_basics: each typical mistake fails its own check with a message that names it. The solution's full marks,
hidden checks included: tests/test_selfcheck.py (test_each_solution_passes_every_check_of_every_task)."""

import pytest

from tests.helpers import (
    assert_one_reason,
    failed,
    grade_source,
    mutate,
    solution_source,
)

EXERCISE = "02_ddp_basics"


MUTANTS = [
    (
        "pick_backend",
        'return "nccl" if torch.cuda.is_available() else "gloo"',
        'return "nccl"',
        "backend_matches_hardware",
        "expected 'gloo'",
    ),
    (
        "cleanup",
        "    dist.barrier()\n    dist.destroy_process_group()",
        "    dist.destroy_process_group()",
        "cleanup_waits_then_destroys",
        "call dist.barrier() before",
    ),
    (
        "cleanup",
        "    dist.barrier()\n    dist.destroy_process_group()",
        "    dist.barrier()",
        "cleanup_waits_then_destroys",
        "call dist.destroy_process_group()",
    ),
    (
        "wrap_model",
        "    return DDP(model)\n",
        "    return model\n",
        "wrap_model_broadcasts_rank0_parameters",
        "not a DistributedDataParallel",
    ),
    (
        "make_dataloader",
        "return DataLoader(dataset, batch_size=batch_size, sampler=sampler)",
        "return DataLoader(dataset, batch_size=batch_size, shuffle=True)",
        "dataloader_shards_disjoint_and_cover",
        "no DistributedSampler",
    ),
    (
        "make_dataloader",
        "return DataLoader(dataset, batch_size=batch_size, sampler=sampler)",
        "return DataLoader(dataset, batch_size=batch_size // world_size, sampler=sampler)",
        "dataloader_shards_disjoint_and_cover",
        "batch_size is per rank",
    ),
    ("make_dataloader", "shuffle=True, seed=seed)", "shuffle=True)", "dataloader_shuffles_with_seed", "pass the seed"),
    ("train_one_epoch", "    loader.sampler.set_epoch(epoch)\n", "", "train_calls_set_epoch", "set_epoch(epoch)"),
    ("train_one_epoch", "    dist.all_reduce(totals)\n", "", "loss_is_global_mean", "each returned its own mean"),
    (
        "save_checkpoint",
        "    if dist.get_rank() == 0:\n        torch.save",
        "    if True:\n        torch.save",
        "checkpoint_written_by_rank0_only",
        "only rank 0",
    ),
    (
        "save_checkpoint",
        "torch.save(model.module.state_dict(), path)",
        "torch.save(model.state_dict(), path)",
        "checkpoint_has_unwrapped_keys",
        "start with 'module.'",
    ),
    (
        "save_checkpoint",
        "        torch.save(model.module.state_dict(), path)\n    dist.barrier()",
        "        torch.save(model.module.state_dict(), path)",
        "checkpoint_complete_before_return",
        "before rank 0 had finished writing",
    ),
    # a fence that holds on gloo only (fences.py): judged on CPU as nccl would
    (
        "save_checkpoint",
        "        torch.save(model.module.state_dict(), path)\n    dist.barrier()",
        "        torch.save(model.module.state_dict(), path)\n    dist.all_reduce(torch.zeros(1))",
        "checkpoint_complete_before_return",
        "on NCCL (GPUs) dist.all_reduce returns once it is queued",
    ),
    (
        "save_checkpoint",
        "        torch.save(model.module.state_dict(), path)\n    dist.barrier()",
        "        torch.save(model.module.state_dict(), path)\n    dist.broadcast(torch.zeros(1), src=0)",
        "checkpoint_complete_before_return",
        "only dist.barrier() holds every rank",
    ),
    (
        "cleanup",
        "    dist.barrier()\n    dist.destroy_process_group()",
        "    dist.all_reduce(torch.zeros(1))\n    dist.destroy_process_group()",
        "cleanup_waits_then_destroys",
        "on NCCL (GPUs) dist.all_reduce returns once it is queued",
    ),
    (
        "load_checkpoint",
        "torch.load(path, map_location=device)",
        "torch.load(path)",
        "checkpoint_loads_onto_device",
        "without map_location",
    ),
    (
        "MiniDDP",
        "        param.grad.div_(self.world_size)  # sum of (g / N) over ranks = the average\n",
        "",
        "mini_ddp_matches_ddp",
        "world_size times DDP's",
    ),
    (
        "MiniDDP",
        "                dist.broadcast(tensor, src=0)",
        "                pass",
        "mini_ddp_broadcasts_rank0_state",
        "broadcast rank 0's parameters and buffers",
    ),
    (
        "MiniDDP",
        "            if param.requires_grad:\n",
        "            if True:\n",
        "mini_ddp_frozen_and_tied_parameters",
        "frozen parameter",
    ),
]


@pytest.mark.parametrize("task, old, new, check_name, phrase", MUTANTS, ids=[m[3] + ":" + m[4][:20] for m in MUTANTS])
def test_typical_mistake_fails_with_a_targeted_message(task, old, new, check_name, phrase):
    report = grade_source(EXERCISE, mutate(solution_source(EXERCISE), old, new), task=task)
    messages = failed(report)
    assert check_name in messages, f"{check_name} passed; results:\n" + "\n".join(report.lines())
    assert phrase in messages[check_name], messages[check_name]
    # One mistake, one reason: the other failed checks (those whose expectation rests on it) point to it.
    assert_one_reason(report, check_name)
    # The first hint addresses it: check() notes the first failed check, hint() starts with that check's hint.
    from grader.notebook.hints import check_hints

    assert [c.name for c in report.checks if not c.passed][0] == check_name
    assert check_name in check_hints(EXERCISE), f"{check_name} carries no hint (CHECK_HINTS in its hints.py)"


# Waits that hold on nccl too (fences.py): a barrier after something else, a collective whose result the waiting
# rank reads back to the host.
FENCES = {
    "all_reduce, then barrier": "dist.all_reduce(torch.zeros(1))\n    dist.barrier()",
    "broadcast_object_list from rank 0": "dist.broadcast_object_list([None], src=0)",
}


@pytest.mark.parametrize("fence", FENCES.values(), ids=list(FENCES))
def test_a_fence_that_holds_on_nccl_gets_full_marks(fence):
    source = mutate(
        solution_source(EXERCISE),
        "        torch.save(model.module.state_dict(), path)\n    dist.barrier()",
        "        torch.save(model.module.state_dict(), path)\n    " + fence,
    )
    report = grade_source(EXERCISE, source, task="save_checkpoint")
    assert report.passed and report.score == report.max_score > 0, "\n".join(report.lines())


def test_a_wait_that_holds_on_gloo_only_is_no_fence():
    """An all_reduce as the wait passes on CPU by luck of gloo's blocking: the check says why it is no wait on GPUs."""
    source = mutate(
        solution_source(EXERCISE),
        "        torch.save(model.module.state_dict(), path)\n    dist.barrier()",
        "        torch.save(model.module.state_dict(), path)\n    dist.all_reduce(torch.zeros(1))",
    )
    message = failed(grade_source(EXERCISE, source, task="save_checkpoint"))["checkpoint_complete_before_return"]
    assert "rank 1 waited for rank 0's write only in dist.all_reduce" in message and "dist.barrier()" in message


def test_wrong_setup_rank_is_caught_without_waiting_for_ever():
    source = mutate(solution_source(EXERCISE), "rank=rank, world_size", "rank=0, world_size")
    report = grade_source(EXERCISE, source, task="setup", timeout=8)
    assert "did every process join as rank 0" in failed(report)["process_group_has_right_rank_and_size"]
