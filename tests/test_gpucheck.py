"""make gpucheck (python -m grader gpucheck): a verdict a line; on a machine without GPUs it runs green and its
GPU steps say "no GPU" and pass nothing."""

import json
import os
import subprocess
import sys

import pytest

from grader.engine.cuda import cuda_devices
from tests.helpers import ROOT, needs_bwrap

GPU_STEPS = (
    "nccl runs",
    "plain sandbox: CUDA",
    "03's nn.SyncBatchNorm",
    "make grade of the demo class",
    "selfcheck of exercises 1 and 3",
)


@needs_bwrap
def test_gpucheck_runs_green_and_says_no_gpu_for_its_gpu_steps(tmp_path):
    if cuda_devices().count:
        pytest.skip("this machine has GPUs: make gpucheck runs its GPU steps for real")
    out = tmp_path / "gpucheck.json"
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "gpucheck"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=dict(os.environ, GRADER_GPUCHECK_JSON=str(out)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    verdicts = [line for line in lines if line[:4].strip() in ("ok", "BAD", "--")]
    assert verdicts and not [line for line in verdicts if line.startswith("BAD")]
    for step in GPU_STEPS:
        line = next(line for line in verdicts if step in line)
        assert line.startswith("--") and "no GPU" in line, line  # passes nothing
    for step in ("fork safety (unsandboxed)", "fork safety (sandboxed)", "plain sandbox: what the driver needs"):
        assert any(line.startswith("ok") and step in line for line in verdicts), step
    assert lines[-1].startswith("gpucheck: every step as expected") and "no GPU here" in lines[-1]
    written = json.loads(out.read_text())
    assert written["lines"][:-1] == verdicts
    facts = written["facts"]
    assert facts["torch"] and facts["gpus"] == 0 and facts["rank"]["backend"] == "gloo"
    assert set(facts["rank"]["first_use_s"]) == {"matmul", "conv2d", "all_reduce", "barrier"}
    assert facts["rank"]["host_memory_kib"]["VmRSS"] > 0
    assert facts["rank"]["cpu_tensor_under_nccl"].startswith("not run")


# --- its 1-GPU and 2-GPU logic, with a fake GPU count (GRADER_FAKE_GPUS: what CUDA counts, tests only) ----------


@pytest.fixture(autouse=True)
def fresh_count():
    cuda_devices.cache_clear()
    yield
    cuda_devices.cache_clear()


def fake(monkeypatch, gpus: int) -> None:
    monkeypatch.setenv("GRADER_FAKE_GPUS", str(gpus))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("COURSE_LANG", "en")
    cuda_devices.cache_clear()


def job_plans(gpus: int, monkeypatch) -> list[str]:
    """The plans a demo-class job's runs get on a machine with `gpus` GPUs, as `make grade` shares them out."""
    from grader.engine import plan
    from grader.isolation.gpu_share import GpuShare

    fake(monkeypatch, gpus)
    share = GpuShare.plan(gpus, world_size=2, widest=3, cores=16, jobs=None)
    plan.assign_gpus(share.take())
    try:
        return [plan.current_plan(w).describe() for w in (2, 3)]
    finally:
        plan.assign_gpus(None)


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_every_plan_line_is_as_expected_with_fake_gpus(gpus, monkeypatch):
    from grader.engine.plan import current_plan
    from grader.instructor.gpucheck import plan_as_expected, runs_nccl

    fake(monkeypatch, gpus)
    plans = [current_plan(w).describe() for w in (1, 2, 3)]
    assert all(plan_as_expected(p) for p in plans), plans
    assert [runs_nccl(p) for p in plans] == [w <= gpus for w in (1, 2, 3)]  # gloo where a run needs more GPUs


def test_on_one_gpu_the_demo_class_on_gloo_is_ok_and_nccl_would_be_bad(monkeypatch):
    from grader.instructor.gpucheck import demo_verdict

    plans = job_plans(1, monkeypatch)
    assert all("gloo" in p for p in plans), plans
    assert demo_verdict({"plans": plans, "regrade": False}, gpus=1) == "ok"
    assert demo_verdict({"plans": ["2 ranks, nccl, rank r on cuda:r (1 GPU visible)"]}, gpus=1) == "BAD"
    assert demo_verdict({"plans": plans, "regrade": True}, gpus=1) == "BAD"  # a machine failure is never ok
    assert demo_verdict({"plans": []}, gpus=1) == "BAD"


def test_on_two_gpus_the_demo_class_must_run_nccl(monkeypatch):
    from grader.instructor.gpucheck import demo_verdict

    plans = job_plans(2, monkeypatch)
    assert ", nccl," in plans[0] and ", gloo" in plans[1], plans  # 2 ranks on the job's 2 GPUs; 3 ranks: gloo
    assert demo_verdict({"plans": plans}, gpus=2) == "ok"
    assert demo_verdict({"plans": job_plans(1, monkeypatch)}, gpus=2) == "BAD"  # GPUs there, but every run on CPU


def test_selfcheck_runs_only_on_two_gpus_or_more(capsys):
    from grader.instructor import gpucheck

    gpucheck.selfcheck_step(1)
    line = capsys.readouterr().out.strip()
    assert line.startswith("--") and "selfcheck of exercises 1 and 3" in line and "nccl needs 2" in line


def test_a_check_that_needs_a_newer_torch_names_the_api():
    from grader.instructor.gpucheck import missing_api

    assert missing_api("AttributeError: module 'torch.distributed' has no attribute 'shard_full'") == "shard_full"
    assert missing_api("ImportError: cannot import name 'fully_shard' from 'torch.distributed.fsdp'") == "fully_shard"
    assert missing_api("rank 0: expected 3.0, got 4.0") is None
