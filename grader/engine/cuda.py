"""What CUDA is here, learned without a grader process ever initializing it (a process that called cuInit cannot
hand CUDA on to a fork: "Cannot re-initialize CUDA in forked subprocess").

    cuda_devices()   # CudaCount(count=2, error=None, driver=12080)

How many GPUs CUDA counts (cuda_devices), asked in a child process: the child loads the driver (libcuda.so.1) with
ctypes, calls cuInit and cuDeviceGetCount: what a rank's CUDA will see (MIG devices, CUDA_VISIBLE_DEVICES, a driver
that cannot start), unlike NVML, which counts physical GPUs. GRADER_FAKE_GPUS=N (tests only) answers N without
asking. use_nvml_check(): torch.cuda.is_available() asks NVML, which is fork-safe.

Tests only (GRADER_CUDA_WATCH=1, install): record any call into torch's CUDA entry points, and what a forked child
inherits of them, so a test can prove no grader process touches CUDA before it forks ranks: one module-level
torch.cuda.is_available() in a check would break every rank on a GPU machine, and nothing on a CPU machine would
show it. Installed by grader.engine's import in every grader process (the kernel's forkserver, grading_worker, a
nursery, a job: the variable is kept in sandboxes), each wrapper notes its first callers; at every fork the child
keeps what its ancestors had called as `inherited` (a rank reports it: cuda_probe.py).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
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
