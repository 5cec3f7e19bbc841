"""The hardware plan: a pure function of the world size and the visible GPUs, and
what a rank really sees under it."""
import os

import pytest
import torch

from grader.engine import plan_for, run_distributed, warm_up
from grader.engine.plan import current_plan


@pytest.mark.parametrize("gpus", [0, 1, 2, 4, 8])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_nccl_only_with_one_gpu_per_rank(gpus, world_size):
    plan = plan_for(world_size, gpus)
    if gpus >= world_size:
        assert plan.backend == "nccl" and not plan.hides_gpus
        assert [plan.device(r) for r in range(world_size)] == [f"cuda:{r}" for r in range(world_size)]
        assert "nccl" in plan.describe()
    else:
        assert plan.backend == "gloo" and plan.hides_gpus
        assert {plan.device(r) for r in range(world_size)} == {"cpu"}
        text = plan.describe()
        assert text.startswith(f"{world_size} rank") and "gloo on CPU" in text
        if gpus:
            assert f"{gpus} GPU" in text and "nccl needs one GPU per rank" in text


def test_one_gpu_laptop_two_ranks_is_gloo_and_says_why():
    assert plan_for(2, 1).describe() == ("2 ranks, gloo on CPU (1 GPU visible: nccl needs one GPU per rank; "
                                         "the GPUs are hidden from the ranks)")
    assert plan_for(1, 1).backend == "nccl"  # world size 1 on a one-GPU machine runs on the GPU


def test_bad_world_size_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        plan_for(0, 2)


def _what_the_rank_sees(ctx):
    import torch.distributed as dist

    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "cuda": torch.cuda.is_available(),
            "backend": dist.get_backend(), "ctx_backend": ctx.backend, "device": str(ctx.device)}


def test_ranks_of_a_gloo_plan_see_no_gpu():
    """Fewer GPUs than ranks: the ranks' idiomatic `"nccl" if torch.cuda.is_available() else "gloo"`
    must give gloo, so the GPUs are hidden before anything in the rank touches CUDA."""
    warm_up()
    result = run_distributed(_what_the_rank_sees, 2, plan=plan_for(2, 1))
    assert result.ok, result.failure()
    for seen in result.values:
        assert seen == {"visible": "", "cuda": False, "backend": "gloo", "ctx_backend": "gloo", "device": "cpu"}
    assert result.plan == plan_for(2, 1)


@pytest.mark.skipif(torch.cuda.device_count() < 1, reason="needs a GPU: world size 1 runs nccl on cuda:0")
def test_world_size_one_runs_nccl_on_the_gpu():
    result = run_distributed(_what_the_rank_sees, 1)
    assert result.ok, result.failure()
    assert result.values[0]["backend"] == "nccl" and result.values[0]["device"] == "cuda:0"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs: one per rank for nccl")
def test_two_ranks_on_two_gpus_run_nccl():
    result = run_distributed(_what_the_rank_sees, 2)
    assert result.ok, result.failure()
    assert [v["device"] for v in result.values] == ["cuda:0", "cuda:1"]
    assert {v["backend"] for v in result.values} == {"nccl"}


def test_the_default_plan_follows_this_machine():
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert current_plan(2) == plan_for(2, gpus)
