"""CUDA where the submissions' ranks run: a probe rank in the nursery's job, the plain sandbox and unsandboxed
sees what NVIDIA's driver needs; and `make grade` never grades on CPU silently on a machine with GPUs."""

import os
import subprocess
import sys

import pytest

from grader.code_digest import grader_digest
from grader.gradebook import roundtrip
from grader.isolation import gpu_gate
from grader.isolation import sandbox as sandboxes
from grader.isolation.gpu_gate import GpuUnusable, check_gpus, probe_where_graded
from samples.make_samples import solution_answers
from tests.helpers import needs_bwrap
from tests.graded_class import A, notebook_with, place, run_grade

LIB = os.path.join(sys.prefix, "lib")  # a folder LD_LIBRARY_PATH may name, as a driver's would be


def _worker_args():
    return [A, "--timeout", "30", "--world-size", "2", "--version", grader_digest(A)]


WHERE = [
    pytest.param(True, True, id="nursery", marks=pytest.mark.skipif(os.geteuid() != 0, reason="nurseries: root")),
    pytest.param(True, False, id="plain-sandbox"),
    pytest.param(False, False, id="unsandboxed"),
]


@needs_bwrap
@pytest.mark.parametrize("sandbox,nursery", WHERE)
def test_a_probe_rank_has_what_the_cuda_driver_needs(monkeypatch, sandbox, nursery):
    """NVIDIA's driver writes /proc/self/task/<tid>/comm in cuInit (error 304 when it cannot: a read-only /proc,
    or a non-dumpable process whose /proc files are root's); NVML and NCCL read /sys; a driver may be found
    through LD_LIBRARY_PATH; torch.cuda.is_available() is fork-safe only with the NVML check."""
    monkeypatch.setenv("LD_LIBRARY_PATH", LIB)
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    report = probe_where_graded(_worker_args(), sandbox, nursery)
    rank = report.get("rank", {})
    assert rank.get("comm") == "written", report
    assert rank["dumpable"] is True, report
    assert rank["sys_pci"] is True, report
    assert rank["env"].get("LD_LIBRARY_PATH") == LIB and rank["env"].get("NCCL_DEBUG") == "WARN", report
    assert rank["env"].get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1", report
    assert report["plan"] == "1 rank, gloo on CPU (no GPU visible)" and report["gpus"] == 0


def test_a_machine_without_nvidia_devices_is_not_probed(monkeypatch):
    monkeypatch.delenv("GRADER_FAKE_GPUS", raising=False)
    monkeypatch.setattr(gpu_gate, "probe_where_graded", lambda *a: pytest.fail("probed a machine without GPUs"))
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has NVIDIA devices")
    assert check_gpus(_worker_args(), True, False, False).gpus == 0


@needs_bwrap
def test_gpus_the_sandbox_cannot_see_stop_grading(monkeypatch):
    """The machine has GPUs (GRADER_FAKE_GPUS stands for them) but the sandbox's environment loses what says so,
    as an emptied environment loses a driver found through LD_LIBRARY_PATH: CUDA counts 0 there, and the gate
    says so instead of grading everything on gloo."""
    monkeypatch.setenv("GRADER_FAKE_GPUS", "2")
    emptied = sandboxes.environment
    monkeypatch.setattr(
        sandboxes, "environment", lambda masked: {k: v for k, v in emptied(masked).items() if k != "GRADER_FAKE_GPUS"}
    )
    with pytest.raises(GpuUnusable, match="CUDA counts none in the sandbox .*--no-gpu.*--no-sandbox"):
        check_gpus(_worker_args(), True, False, False)


def _grade(root: str, *extra: str) -> subprocess.CompletedProcess:
    return run_grade(root, *extra, jobs=1, env=dict(os.environ, GRADER_FAKE_GPUS="2"))


@needs_bwrap
def test_make_grade_on_gpus_cuda_cannot_use_stops_before_grading_then_no_gpu_grades_on_cpu(tmp_path):
    """On this CPU machine, GRADER_FAKE_GPUS=2 is a machine whose GPUs CUDA cannot use in the ranks (the probe rank
    really tries cuda:0): `make grade` exits 2 with one line, grades nothing; --no-gpu grades, each result and the
    table saying the plan."""
    root = str(tmp_path)
    course = roundtrip.make_course(root, [A])
    roundtrip.release(course, A)
    place(course, "ada", notebook_with(solution_answers()))
    stopped = _grade(root)
    assert stopped.returncode == 2, stopped.stderr[-3000:]
    lines = stopped.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and "CUDA counts none" in lines[0] and "--no-gpu" in lines[0] and "--no-sandbox" in lines[0]
    ), stopped.stderr
    assert not os.path.exists(os.path.join(root, "graded", A))
    graded = _grade(root, "--no-gpu")
    assert graded.returncode == 0, graded.stderr[-3000:]
    assert "ran on: 2 ranks, gloo on CPU (no GPU visible)" in graded.stdout, graded.stdout
    import json

    with open(os.path.join(root, "graded", A, "ada.json")) as f:
        ada = json.load(f)
    assert "2 ranks, gloo on CPU (no GPU visible)" in ada["plans"] and ada["report"]["score"] > 0
