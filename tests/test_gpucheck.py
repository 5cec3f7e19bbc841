"""make gpucheck (python -m grader gpucheck): a verdict a line; on a machine without GPUs it runs green and its
GPU steps say "no GPU" and pass nothing."""

import subprocess
import sys

import pytest

from grader.engine.cuda_count import cuda_devices
from tests.helpers import ROOT, needs_bwrap

GPU_STEPS = ("nccl runs", "plain sandbox: CUDA", "03's nn.SyncBatchNorm", "make grade of the demo class")


@needs_bwrap
def test_gpucheck_runs_green_and_says_no_gpu_for_its_gpu_steps():
    if cuda_devices().count:
        pytest.skip("this machine has GPUs: make gpucheck runs its GPU steps for real")
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "gpucheck"], capture_output=True, text=True, timeout=900, cwd=ROOT
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
    assert lines[-1].startswith("gpucheck: every step as expected")
