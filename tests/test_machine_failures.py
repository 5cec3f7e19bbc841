"""A rank's clock starts when its device and process group are set up; what the machine fails is never the
student's: "could not run on this machine", nothing paid, listed for regrading. GRADER_FAKE_GPUS=2 on this CPU
machine is a machine whose GPUs CUDA cannot set up (torch.cuda.set_device really fails in the rank)."""

import pytest

from grader.engine import run_distributed, warm_up
from grader.engine.cuda import cuda_devices
from grader.exercises import get_exercise
from grader.gradebook.batch import _valid
from grader.gradebook.commands import format_grades
from grader.runner import run_checks
from grader.submission import read_notebook
from tests.helpers import solution_notebook


@pytest.fixture
def broken_gpus(monkeypatch):
    monkeypatch.setenv("GRADER_FAKE_GPUS", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cuda_devices.cache_clear()
    yield
    cuda_devices.cache_clear()


def _fine(ctx):
    return ctx.rank


def test_a_gpu_the_rank_cannot_set_up_is_the_machines_failure(broken_gpus):
    warm_up()
    result = run_distributed(_fine, 2)
    assert result.plan.backend == "nccl"
    assert result.unavailable and not result.ok
    text = result.failure()
    assert "could not run on this machine" in text and "sys.exit" not in text, text


def test_a_check_the_machine_cannot_run_pays_nothing_and_says_so(broken_gpus):
    report = run_checks(
        get_exercise("02_ddp_basics"), read_notebook(solution_notebook("02_ddp_basics")), task="MiniDDP"
    )
    failed = [c for c in report.checks if not c.passed]
    assert failed and all(c.unrunnable and c.points == 0 for c in failed), report.lines()
    for c in failed:
        assert c.message.startswith("could not run on this machine") and "regrading" in c.message, c.message
        assert "sys.exit" not in c.message and "your code" not in c.message.split("\n")[0]
    assert report.to_json()["checks"][0]["unrunnable"] is True


def _student_runs_out_of_gpu_memory(ctx):
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_the_students_own_out_of_memory_is_said_in_the_students_terms():
    warm_up()
    result = run_distributed(_student_runs_out_of_gpu_memory, 2)
    assert not result.unavailable
    assert "ran out of GPU memory in your code" in result.failure()


def test_a_result_with_a_check_the_machine_could_not_run_is_regraded_and_said():
    result = {"sha256": "d", "grader": "v", "sandboxed": True, "regrade": True}
    assert not _valid(result, "d", "v", True) and _valid(dict(result, regrade=False), "d", "v", True)
    table = format_grades({"ada": dict(result, student="ada", flags=[], plans=["2 ranks, nccl"])}, {"ada": (0, 5)})
    assert "could not run on this machine: regrade" in table
