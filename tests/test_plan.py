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
    assert plan_for(2, 1).describe() == (
        "2 ranks, gloo on CPU (1 GPU visible: nccl needs one GPU per rank; the GPUs are hidden from the ranks)"
    )
    assert plan_for(1, 1).backend == "nccl"  # world size 1 on a one-GPU machine runs on the GPU


def test_bad_world_size_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        plan_for(0, 2)


def _what_the_rank_sees(ctx):
    import torch.distributed as dist

    return {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda": torch.cuda.is_available(),
        "backend": dist.get_backend(),
        "ctx_backend": ctx.backend,
        "device": str(ctx.device),
    }


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


# GPUs shared out among grading jobs, with GRADER_FAKE_GPUS standing for the GPUs CUDA counts (tests only).
from grader.engine import plan as plans  # noqa: E402
from grader.engine.cuda import cuda_devices  # noqa: E402
from grader.gradebook.grading_jobs import share_gpus  # noqa: E402


@pytest.fixture
def fake_gpus(monkeypatch):
    def use(n):
        monkeypatch.setenv("GRADER_FAKE_GPUS", str(n))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        cuda_devices.cache_clear()

    yield use
    cuda_devices.cache_clear()
    plans.assign_gpus(None)


# gpus -> (GPUs per job, --jobs default on 16 cores, the groups): the exercise's widest run is 3 ranks
SHARES = {1: (0, 16, []), 2: (2, 1, [("0", "1")]), 8: (3, 2, [("0", "1", "2"), ("3", "4", "5")])}


@pytest.mark.parametrize("gpus", sorted(SHARES))
def test_each_job_gets_its_own_gpus_and_jobs_follow_them(fake_gpus, monkeypatch, gpus):
    fake_gpus(gpus)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    share = share_gpus(plans.visible_gpus(), "02_ddp_basics", 2, None)
    width, jobs, groups = SHARES[gpus]
    assert (share.width, share.jobs, share.free) == (width, jobs, groups)
    taken = [share.take() for _ in range(jobs)]
    flat = [d for group in taken if group for d in group]
    assert len(flat) == len(set(flat)), "two jobs on one GPU"
    assert share.take() == (), "a job beyond the groups sees no GPU (gloo), never another job's"
    share.give(taken[0])
    assert share.take() == taken[0]
    assert share_gpus(gpus, "02_ddp_basics", 2, 5).jobs == 5  # --jobs given: kept


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_a_jobs_plans_follow_the_plan_table_for_its_own_gpus(fake_gpus, gpus):
    fake_gpus(gpus)
    assert [current_plan(w).backend for w in (1, 2, 3)] == ["nccl" if gpus >= w else "gloo" for w in (1, 2, 3)]
    width = SHARES[gpus][0]
    group = share_gpus(gpus, "02_ddp_basics", 2, None).take()
    plans.assign_gpus(group)
    for w in (1, 2, 3):  # the README's plan table, for the job's own GPUs
        plan = current_plan(w)
        assert plan.backend == ("nccl" if width >= w else "gloo") and plan.gpus == width
        assert plan.visible == ",".join(group or ())


def test_a_job_without_gpus_runs_gloo_and_its_ranks_see_none(fake_gpus):
    """A job given no GPUs on a machine that has some: its ranks see none, whatever CUDA_VISIBLE_DEVICES was."""
    fake_gpus(8)
    plans.assign_gpus(())
    plan = current_plan(2)
    assert plan == plan_for(2, 0, "") and plan.hides_gpus
    warm_up()
    result = run_distributed(_what_the_rank_sees, 2, plan=plan)
    assert result.ok, result.failure()
    assert {v["visible"] for v in result.values} == {""} and {v["backend"] for v in result.values} == {"gloo"}


def test_cuda_is_counted_in_a_child_never_here():
    """The plan asks CUDA itself (what a rank will see: MIG, a driver that cannot start), in a child process."""
    cuda_devices.cache_clear()
    count = cuda_devices()
    assert count.count == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if count.count == 0:
        assert count.error  # says why: no driver, no device, cuInit's error


@pytest.mark.parametrize(
    "gpus,job,nodes",
    [(1, None, ["", ""]), (2, None, ["0", "1"]), (8, None, ["0", "1"]), (8, ("4", "5", "6"), ["4", "5"])],
)
def test_exercise_4s_two_torchrun_nodes_never_share_a_gpu(fake_gpus, gpus, job, nodes):
    """Two agents of one worker each: both workers have LOCAL_RANK 0, so each agent must see its own GPU (or none,
    for gloo), never both cuda:0 of the same devices."""
    from grader.exercises.torchrun.grader_free_python import node_gpus

    fake_gpus(gpus)
    plans.assign_gpus(job)
    assert [node_gpus(i, 2, 1)["CUDA_VISIBLE_DEVICES"] for i in range(2)] == nodes
    assert node_gpus(0, 1, 2)["CUDA_VISIBLE_DEVICES"] == ("" if gpus < 2 else ",".join((job or ("0", "1"))[:2]))
