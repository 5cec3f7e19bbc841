"""What CUDA is here, learned without a grader process ever initializing it (a process that called cuInit cannot
hand CUDA on to a fork: "Cannot re-initialize CUDA in forked subprocess").

    cuda_devices()                                  # CudaCount(count=2, error=None, driver=12080)
    main(["--job", "2,3", *MODULES])                # the probe rank's process: one JSON line {"plan": ..., "rank": ...}

How many GPUs CUDA counts (cuda_devices), asked in a child process: the child loads the driver (libcuda.so.1) with
ctypes, calls cuInit and cuDeviceGetCount: what a rank's CUDA will see (MIG devices, CUDA_VISIBLE_DEVICES, a driver
that cannot start), unlike NVML, which counts physical GPUs. GRADER_FAKE_GPUS=N (tests only) answers N without
asking.

What a rank sees of CUDA where it runs (probe; unsandboxed, in a sandbox, in a nursery's job): one real rank (no
process group) reports whether it could write its own /proc/self/task/<tid>/comm (NVIDIA's driver does in cuInit,
and fails with error 304 when it cannot), whether it is dumpable (a non-dumpable process's /proc files belong to
root), whether /sys/bus/pci is there (NVML and NCCL's topology read it), the driver's environment it kept, and what
CUDA counts once initialized. With the job's shape (--job: the grading world size and the exercise's widest run)
and GPUs that CUDA can use, each group of GPUs a grading job will get then runs a real NCCL all_reduce and barrier
(after the rank's warm-up, worker.py), so that an NCCL that cannot form a communicator here stops `make grade`
before any student is graded. `make grade` runs it before grading anything when the machine has NVIDIA devices
(isolation/gpu_gate.py).

Tests only (GRADER_CUDA_WATCH=1, install): record any call into torch's CUDA entry points, and what a forked child
inherits of them, so a test can prove no grader process touches CUDA before it forks ranks: one module-level
torch.cuda.is_available() in a check would break every rank on a GPU machine, and nothing on a CPU machine would
show it. Installed by grader.engine's import in every grader process (the kernel's forkserver, grading_worker, a
nursery, a job: the variable is kept in sandboxes), each wrapper notes its first callers; at every fork the child
keeps what its ancestors had called as `inherited` (the probe rank reports it).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass

FAKE_GPUS_ENV = "GRADER_FAKE_GPUS"  # tests only: the GPU count every grader process of the run believes
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"  # torch.cuda.is_available() then asks NVML: fork-safe
PROBE_TIMEOUT_S = 120.0  # a liveness bound (a driver's first init on a loaded node), never a verdict

_PROBE = r"""
import ctypes, json
out = {"count": 0, "error": None, "driver": None}
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError:
    out["error"] = "no CUDA driver (libcuda.so.1 not found)"
else:
    rc = lib.cuInit(0)
    if rc == 0:
        n = ctypes.c_int()
        rc = lib.cuDeviceGetCount(ctypes.byref(n))
        out["count"] = n.value if rc == 0 else 0
        v = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            out["driver"] = v.value
    if rc == 100:
        out["error"] = "the CUDA driver sees no device (CUDA error 100)"
    elif rc != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(rc, ctypes.byref(name))
        out["error"] = "cuInit failed: CUDA error %d (%s)" % (rc, (name.value or b"?").decode())
print(json.dumps(out))
"""


@dataclass(frozen=True)
class CudaCount:
    count: int
    error: str | None = None  # why CUDA counts none, when it does not start
    driver: int | None = None  # cuDriverGetVersion, e.g. 12080


def fake_gpus() -> int | None:
    value = os.environ.get(FAKE_GPUS_ENV, "")
    return int(value) if value.isdigit() else None


def use_nvml_check() -> None:
    """torch.cuda.is_available() and device_count() in this process and its children ask NVML, never the driver."""
    os.environ.setdefault(NVML_CHECK_ENV, "1")


@functools.lru_cache(maxsize=None)
def cuda_devices() -> CudaCount:
    """CUDA's own count of the GPUs this process may use (asked once per process, in a child)."""
    fake = fake_gpus()
    if fake is not None:
        return CudaCount(fake)
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return CudaCount(0, "CUDA_VISIBLE_DEVICES is empty")
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return CudaCount(int(answer["count"]), answer["error"], answer["driver"])
    except subprocess.TimeoutExpired:
        return CudaCount(0, f"asking the CUDA driver for its devices took over {PROBE_TIMEOUT_S:.0f} s")
    except (OSError, ValueError, IndexError, KeyError) as exc:
        return CudaCount(0, f"asking the CUDA driver for its devices failed: {exc}")


# --- tests only: a watch on torch's CUDA entry points ---

WATCH_ENV = "GRADER_CUDA_WATCH"
ENTRY_POINTS = {
    "torch.cuda": (
        "is_available",
        "device_count",
        "init",
        "_lazy_init",
        "set_device",
        "current_device",
        "get_device_name",
        "mem_get_info",
    ),
    "torch._C": ("_cuda_getDeviceCount", "_cuda_init", "_cuda_setDevice"),
}
called: list[str] = []  # "torch.cuda.is_available in pid 12 (python -m ...)", this process and its ancestors
inherited: list[str] = []  # what the ancestors had called when this process was forked


def _record(name: str, fn):
    @functools.wraps(fn)
    def recorded(*args, **kwargs):
        if len(called) < 20:
            called.append(f"{name} in pid {os.getpid()} ({' '.join(sys.argv[:3])})")
        return fn(*args, **kwargs)

    recorded.__cuda_watch__ = True
    return recorded


def _forked() -> None:
    inherited[:] = called


def install() -> bool:
    if os.environ.get(WATCH_ENV) != "1":
        return False
    import importlib

    for module_name, names in ENTRY_POINTS.items():
        module = importlib.import_module(module_name)
        for name in names:
            fn = getattr(module, name, None)
            if fn is not None and not getattr(fn, "__cuda_watch__", False):
                setattr(module, name, _record(f"{module_name}.{name}", fn))
    os.register_at_fork(after_in_child=_forked)
    return True


# --- the probe rank ---

KEPT_ENV = ("LD_LIBRARY_PATH", "NCCL_DEBUG", "PYTORCH_NVML_BASED_CUDA_CHECK", "GRADER_FAKE_GPUS")


def probe_rank(ctx) -> dict:
    """In the rank: the facts the driver needs, then CUDA's own count (initializing CUDA here only)."""
    import ctypes

    seen: dict = {"device": str(ctx.device), "cuda_before_fork": list(inherited)}
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
