"""A probe rank: what a rank sees of CUDA where it runs (unsandboxed, in a sandbox, in a nursery's job).

    python -m grader.engine.cuda_probe [--job W,WIDEST] MODULES   # one JSON line: {"plan": ..., "rank": {...}}

One real rank (run_distributed, 1 rank, no process group) reports whether it could write its own
/proc/self/task/<tid>/comm (NVIDIA's driver does in cuInit, and fails with error 304 when it cannot),
whether it is dumpable (a non-dumpable process's /proc files belong to root), whether /sys/bus/pci is there
(NVML and NCCL's topology read it), the driver's environment it kept, and what CUDA counts once initialized.
With the job's shape (--job: the grading world size and the exercise's widest run) and GPUs that CUDA can use,
each group of GPUs a grading job will get then runs a real NCCL all_reduce and barrier (after the rank's warm-up,
worker.py), so that an NCCL that cannot form a communicator here stops `make grade` before any student is graded.
`make grade` runs it before grading anything when the machine has NVIDIA devices (isolation/gpu_gate.py). It sits
above the launcher (cuda.py, below it, only counts and watches).
"""

from __future__ import annotations

import json
import os
import sys
import threading

KEPT_ENV = ("LD_LIBRARY_PATH", "NCCL_DEBUG", "PYTORCH_NVML_BASED_CUDA_CHECK", "GRADER_FAKE_GPUS")


def probe_rank(ctx) -> dict:
    """In the rank: the facts the driver needs, then CUDA's own count (initializing CUDA here only)."""
    import ctypes

    from grader.engine import cuda

    seen: dict = {"device": str(ctx.device), "cuda_before_fork": list(cuda.inherited)}
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write("cuda-probe")
        seen["comm"] = "written"
    except OSError as exc:
        seen["comm"] = f"{type(exc).__name__}: {exc.strerror or exc}"
    seen["dumpable"] = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 1  # PR_GET_DUMPABLE
    seen["sys_pci"] = os.path.isdir("/sys/bus/pci/devices")
    seen["env"] = {name: os.environ[name] for name in KEPT_ENV if name in os.environ}
    seen["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    import torch

    seen["cuda_count"], seen["cuda_error"] = 0, None
    if ctx.device.type == "cuda":
        try:
            torch.cuda.init()
            seen["cuda_count"] = torch.cuda.device_count()
            torch.zeros(1, device=ctx.device).add_(1).item()  # a context and a kernel on the rank's device
        except Exception as exc:  # what a rank would hit: said, never raised
            seen["cuda_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return seen


def _all_reduce_and_barrier(ctx) -> bool:
    import torch
    import torch.distributed as dist

    t = torch.ones(4, device=ctx.device)
    dist.all_reduce(t)
    dist.barrier()
    return t.sum().item() == 4.0 * ctx.world_size


def nccl_groups(gpus: int, job: tuple[int, int], timeout: float) -> list[dict]:
    """Each GPU group a grading job gets (engine/plan.py) runs an NCCL all_reduce and barrier: its report."""
    from grader.engine import run_distributed
    from grader.engine.plan import assign_gpus, gpu_groups, widest_job

    width = widest_job(gpus, *job)
    reports = []
    for devices in gpu_groups(gpus, width):
        assign_gpus(devices)
        try:
            result = run_distributed(_all_reduce_and_barrier, width, trusted=True, timeout=timeout)
        finally:
            assign_gpus(None)
        ok = result.ok and all(result.values)
        why = None if ok else (result.failure() if not result.ok else "a wrong sum")
        reports.append({"devices": list(devices), "backend": result.backend, "ok": ok, "error": why})
    return reports


def probe(timeout: float = 120.0, job: tuple[int, int] | None = None) -> dict:
    """The probe rank's report, under the plan one rank gets here; with job (world size, widest run), each GPU
    group's NCCL run too."""
    from grader.engine import run_distributed
    from grader.engine.cuda import cuda_devices
    from grader.engine.plan import current_plan

    plan = current_plan(1)
    counted = cuda_devices()
    result = run_distributed(probe_rank, 1, plan=plan, init_group=False, trusted=True, timeout=timeout)
    rank = result.ranks[0].value if result.ok else {"failed": result.failure()}
    usable = plan.gpus > 0 and result.ok and not rank.get("cuda_error")
    return {
        "plan": plan.describe(),
        "gpus": plan.gpus,
        "cuda_error": counted.error,
        "driver": counted.driver,
        "plans": {w: current_plan(w).describe() for w in (1, 2, 3)},
        "rank": rank,
        "groups": nccl_groups(plan.gpus, job, timeout) if usable and job else [],
    }


def main(argv: list[str] | None = None) -> int:
    """argv: modules to import first, as the process that forks ranks does (a grading worker's public checks)."""
    from grader.engine import forked_forkserver, processes

    modules = list(argv if argv is not None else sys.argv[1:])
    job = None
    if modules[:1] == ["--job"]:
        job = tuple(int(n) for n in modules[1].split(","))
        modules = modules[2:]
    if modules:  # as grading_worker does: the public checks imported, then the ranks' forkserver forked from here
        processes.preload(modules)
        forked_forkserver.start_here()
    out = sys.stdout
    out.write(json.dumps(probe(job=job)) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
