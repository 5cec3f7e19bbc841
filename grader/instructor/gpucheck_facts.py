"""gpucheck's facts step: what a GPU machine is, measured once and written with every verdict to one JSON file.

Versions (torch, CUDA, NCCL, driver); in one rank of the W=1 plan (nccl on cuda:0 with a GPU, else gloo on the
CPU), after its device and group are set up as a graded rank's are: the first-use times of a matmul (cuBLAS), a
convolution (cuDNN), an all_reduce and a barrier, then the same again warm; the rank's host memory (VmRSS,
VmHWM); and the error a CPU tensor meets in an nccl group (what a check that builds on the CPU would raise).
Facts, never verdicts: timings are measured once and say nothing about a pass. Every API used here is in
torch 2.11, the torch a lent GPU machine has.
"""

from __future__ import annotations

import json
import platform
import time

from grader.engine import run_distributed
from grader.engine.cuda import cuda_devices

FIRST_USE = ("matmul", "conv2d", "all_reduce", "barrier")


def _host_memory_kib() -> dict:
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0])
    return found


def _timed(torch, device, op) -> float:
    start = time.perf_counter()
    op()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return round(time.perf_counter() - start, 4)


def _first_use_in_rank(ctx) -> dict:
    """In one rank: first-use and warm times of each op, host memory, and a CPU tensor's error under nccl."""
    import torch
    import torch.distributed as dist

    device = ctx.device
    a = torch.randn(256, 256, device=device)
    image, kernel = torch.randn(1, 3, 32, 32, device=device), torch.randn(8, 3, 3, 3, device=device)
    ops = {
        "matmul": lambda: a @ a,
        "conv2d": lambda: torch.nn.functional.conv2d(image, kernel),
        "all_reduce": lambda: dist.all_reduce(torch.ones(4, device=device)),
        "barrier": lambda: dist.barrier(),
    }
    first = {name: _timed(torch, device, op) for name, op in ops.items()}
    warm = {name: _timed(torch, device, op) for name, op in ops.items()}
    cpu_error = "not run: no nccl group here"
    if ctx.backend == "nccl":
        try:
            dist.all_reduce(torch.ones(1))
            cpu_error = "none: the nccl group accepted a CPU tensor"
        except Exception as exc:
            cpu_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return {
        "device": str(device),
        "backend": ctx.backend,
        "first_use_s": first,
        "warm_s": warm,
        "host_memory_kib": _host_memory_kib(),
        "cpu_tensor_under_nccl": cpu_error,
    }


def versions() -> dict:
    import torch

    counted = cuda_devices()
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
    except Exception as exc:  # a CUDA build without NCCL
        nccl = f"unknown ({type(exc).__name__})"
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "driver": counted.driver,
        "gpus": counted.count,
        "cuda_count_error": counted.error,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def measure() -> tuple[dict, str | None]:
    """(the facts, why the rank could not measure them or None)."""
    facts = versions()
    result = run_distributed(_first_use_in_rank, 1, timeout=300, trusted=True)
    facts["plan"] = result.plan.describe()
    if not result.ok:
        return facts, result.failure()
    facts["rank"] = result.values[0]
    return facts, None


def summary(facts: dict) -> str:
    """One line: where the rank ran, its first-use times and its host memory."""
    rank = facts.get("rank") or {}
    first = rank.get("first_use_s") or {}
    times = ", ".join(f"{name} {first[name]:.3f} s" for name in FIRST_USE if name in first)
    rss = (rank.get("host_memory_kib") or {}).get("VmRSS")
    memory = f"{rss / 1024:.0f} MiB" if rss else "unknown"
    return f"{rank.get('device', '?')} ({rank.get('backend', '?')}): first use {times}; a rank's host memory {memory}"


def write(path: str, facts: dict, lines: list[str]) -> None:
    with open(path, "w") as f:
        json.dump({"facts": facts, "lines": lines}, f, indent=2, default=str)
        f.write("\n")
