"""A correct submission never loses points to teardown noise; the nccl path
where GPUs exist."""

import pytest
import torch

from grader.runner import run_checks
from grader.engine import run_distributed
from grader.exercises import get_exercise
from grader.submission import read_notebook
from tests.helpers import solution_notebook


def test_correct_submission_graded_30_times_gets_30_full_marks():
    exercise = get_exercise("02_ddp_basics")
    submission = read_notebook(solution_notebook("02_ddp_basics"))
    scores = []
    for _ in range(30):
        # the DDP-heavy tasks: DDP training over 3 epochs, and DDP next to MiniDDP
        reports = [run_checks(exercise, submission, task=t) for t in ("train_one_epoch", "MiniDDP")]
        scores.append(all(r.passed for r in reports))
    assert scores.count(True) == 30, f"{scores.count(True)} of 30 gradings gave full marks"


def _nccl_all_reduce(ctx):
    import torch.distributed as dist

    t = torch.ones(4, device=ctx.device) * (ctx.rank + 1)
    dist.all_reduce(t)
    return ctx.backend, str(ctx.device), t.cpu()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least 2 GPUs for nccl (CI has none)")
def test_nccl_one_gpu_per_rank():
    result = run_distributed(_nccl_all_reduce, world_size=2)
    assert result.ok, result.failure()
    assert [v[:2] for v in result.values] == [("nccl", "cuda:0"), ("nccl", "cuda:1")]
    assert all(torch.equal(v[2], torch.full((4,), 3.0)) for v in result.values)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least 2 GPUs for nccl (CI has none)")
def test_ddp_basics_solution_on_gpus():
    report = run_checks(get_exercise("02_ddp_basics"), read_notebook(solution_notebook("02_ddp_basics")))
    assert report.passed, "\n".join(report.lines())
