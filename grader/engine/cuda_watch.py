"""Tests only (GRADER_CUDA_WATCH=1): record any call into torch's CUDA entry points, and what a forked child
inherits of them, so a test can prove no grader process touches CUDA before it forks ranks.

A process that initialized CUDA cannot hand it on to a fork ("Cannot re-initialize CUDA in forked subprocess"):
one module-level torch.cuda.is_available() in a check would break every rank on a GPU machine, and nothing on a
CPU machine would show it. Installed by grader.engine's import in every grader process (the kernel's forkserver,
grading_worker, a nursery, a job: the variable is kept in sandboxes), each wrapper notes its first callers;
at every fork the child keeps what its ancestors had called as `inherited` (a rank reports it: cuda_probe.py).
"""

from __future__ import annotations

import functools
import os
import sys

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
