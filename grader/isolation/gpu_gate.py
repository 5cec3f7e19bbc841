"""Before `make grade` grades anything: can the submissions' ranks use this machine's GPUs?

    gate = check_gpus(worker_args, sandbox=True, nursery=True, no_gpu=False)   # raises GpuUnusable

When the machine has NVIDIA devices (/dev/nvidiactl, or NVML counts GPUs), a probe rank (engine/cuda_probe.py)
runs exactly where the submissions' ranks will: in a nursery's job, a plain sandbox, or unsandboxed. If CUDA
counts none there, grading stops before anything is graded, with one line saying what failed and how to grade
anyway (--no-gpu: every run on gloo, the results say so; --no-sandbox). A machine without NVIDIA devices is
not probed: every run is gloo on CPU, as each result's plan says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from grader.engine.cuda import FAKE_GPUS_ENV, cuda_devices, fake_gpus

PROBE_ARGV = [sys.executable, "-m", "grader.engine.cuda_probe"]
PROBE_BOUND_S = 300.0  # a cold nursery or sandbox plus the driver's first init, on a loaded machine


class GpuUnusable(RuntimeError):
    pass


@dataclass(frozen=True)
class GpuGate:
    gpus: int  # what CUDA counts where the ranks run (0: every run gloo on CPU)
    probed: dict | None  # the probe rank's report, when the machine has NVIDIA devices


def nvidia_present(dev: str = "/dev") -> bool:
    """The machine has NVIDIA GPUs: the driver's control node, or NVML counts some (never CUDA: not initialized
    here). GRADER_FAKE_GPUS (tests) stands for them."""
    fake = fake_gpus()
    if fake is not None:
        return fake > 0
    if os.path.exists(os.path.join(dev, "nvidiactl")):
        return True
    return _nvml_count() > 0


def _nvml_count() -> int:
    """GPUs NVML counts (libnvidia-ml, the driver's management library; it does not initialize CUDA)."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        count = ctypes.c_uint(0)
        if nvml.nvmlInit_v2() != 0:
            return 0
        try:
            return count.value if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else 0
        finally:
            nvml.nvmlShutdown()
    except (OSError, AttributeError):  # no NVIDIA driver here
        return 0


def job_shape(worker_args: list[str]) -> list[int]:
    """[the grading world size, the exercise's widest run]: what decides each grading job's GPU group."""
    from grader.exercises import get_exercise

    world_size = int(worker_args[worker_args.index("--world-size") + 1]) if "--world-size" in worker_args else 2
    widest = max([world_size] + [c.world_size or 0 for c in get_exercise(worker_args[0]).checks])
    return [world_size, widest]


def probe_where_graded(worker_args: list[str], sandbox: bool, nursery: bool) -> dict:
    """The probe rank's report from where the submissions' ranks run; {"failed": why} when it reported nothing."""
    shape = job_shape(worker_args)
    if sandbox and nursery:
        from grader.isolation.nursery_client import Nursery

        box = Nursery(worker_args, True, 1)
        try:
            job = box.start(None, probe=shape)
            line = _read_line(job.stdout) if job is not None else ""
        finally:
            box.close()
    else:
        from grader.exercises import find

        job = ["--job", ",".join(map(str, shape))]
        argv, env = PROBE_ARGV + job + list(find(worker_args[0]).public), None  # imported first, as grading_worker
        if sandbox:
            from grader.isolation.sandbox import Sandbox

            built = Sandbox(argv, None, True, 1)
            argv, env = built.argv, built.env
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=PROBE_BOUND_S)
            line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-300:]
        except subprocess.TimeoutExpired:
            line = ""
    try:
        return json.loads(line)
    except ValueError:
        return {"failed": f"the probe reported nothing ({line or 'no output'})"}


def _read_line(stream) -> str:
    import select

    ready, _, _ = select.select([stream], [], [], PROBE_BOUND_S)
    return stream.readline().strip() if ready else ""


def _require_nccl(probed: dict, sandbox: bool, nursery: bool) -> None:
    """Raises GpuUnusable when a GPU group's NCCL all_reduce and barrier failed where the ranks run."""
    failed = [g for g in probed.get("groups") or [] if isinstance(g, dict) and not g.get("ok")]
    if not failed:
        return
    where = ("a nursery's job" if nursery else "the sandbox") if sandbox else "a grading worker"
    why = ([line.strip() for line in str(failed[0].get("error")).splitlines() if line.strip()] or ["?"])[-1][:300]
    raise GpuUnusable(
        f"NCCL failed on GPUs {','.join(map(str, failed[0].get('devices') or []))} in {where} ({why}): nothing was "
        "graded; grade on CPU anyway with --no-gpu" + (", or outside the sandbox with --no-sandbox" if sandbox else "")
    )


def check_gpus(worker_args: list[str], sandbox: bool, nursery: bool, no_gpu: bool) -> GpuGate:
    """Raises GpuUnusable when the machine has NVIDIA devices but CUDA counts none where the ranks run."""
    if no_gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # inherited by every worker, sandbox and nursery: no rank sees one
        os.environ.pop(FAKE_GPUS_ENV, None)
        cuda_devices.cache_clear()
        return GpuGate(0, None)
    if not nvidia_present():
        return GpuGate(0, None)
    probed = probe_where_graded(worker_args, sandbox, nursery)
    gpus = probed.get("gpus", 0) if isinstance(probed.get("gpus"), int) else 0
    rank = probed.get("rank") if isinstance(probed.get("rank"), dict) else {}
    if gpus > 0 and not rank.get("failed") and not rank.get("cuda_error"):
        _require_nccl(probed, sandbox, nursery)
        return GpuGate(gpus, probed)
    where = ("a nursery's job" if nursery else "the sandbox") if sandbox else "a grading worker"
    why = (
        probed.get("failed")
        or rank.get("failed")
        or rank.get("cuda_error")
        or probed.get("cuda_error")
        or "CUDA counts 0 GPUs"
    )
    why = ([line.strip() for line in str(why).splitlines() if line.strip()] or ["?"])[-1][:300]  # one line
    clues = [
        f"{k}: {rank[k]}" for k in ("comm", "dumpable", "sys_pci") if k in rank and rank[k] not in ("written", True)
    ]
    raise GpuUnusable(
        f"this machine has NVIDIA GPUs, but CUDA counts none in {where} ({why}"
        + (f"; {', '.join(clues)}" if clues else "")
        + "): nothing was graded; grade on CPU anyway "
        "with --no-gpu" + (", or outside the sandbox with --no-sandbox" if sandbox else "")
    )
