"""GPUs in exclusive-process compute mode (`nvidia-smi -c EXCLUSIVE_PROCESS`, common on shared clusters): a GPU
then holds one process's context at a time, and a second notebook's rank on it fails with "CUDA-capable device(s)
is/are busy or unavailable". There, notebook checks run one at a time: one check of a task at once
(grader/notebook/), and one notebook's checks at once on this machine (a lock file every account can open).

The mode is asked of NVML, which does not initialize CUDA (fork-safe). GRADER_FAKE_EXCLUSIVE=1 (tests only)
answers yes. Waiting for the lock is bounded (WAIT_BOUND_S): past it the check runs anyway, and a busy GPU is
then the machine's failure ("could not run on this machine", engine/machine_faults.py), never the student's.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import tempfile
import time
from functools import lru_cache

EXCLUSIVE_PROCESS = 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
FAKE_ENV = "GRADER_FAKE_EXCLUSIVE"
LOCK_NAME = "grader-gpu-exclusive.lock"
WAIT_BOUND_S = 600.0  # a liveness bound: another notebook's whole check, on a loaded machine
POLL_S = 0.2


def _nvml_compute_modes() -> list[int]:
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:  # no NVIDIA driver here
        return []
    if nvml.nvmlInit_v2() != 0:
        return []
    try:
        count, modes = ctypes.c_uint(0), []
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return []
        for index in range(count.value):
            handle, mode = ctypes.c_void_p(), ctypes.c_int(-1)
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                continue
            if nvml.nvmlDeviceGetComputeMode(handle, ctypes.byref(mode)) == 0:
                modes.append(mode.value)
        return modes
    finally:
        nvml.nvmlShutdown()


@lru_cache(maxsize=1)
def exclusive_process() -> bool:
    """Some GPU of this machine is in exclusive-process compute mode."""
    if os.environ.get(FAKE_ENV) == "1":
        return True
    return EXCLUSIVE_PROCESS in _nvml_compute_modes()


def lock_path() -> str:
    return os.path.join(tempfile.gettempdir(), LOCK_NAME)


def _open_lock() -> int:
    fd = os.open(lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    with contextlib.suppress(OSError):  # another account's file: opened, not ours to change
        os.fchmod(fd, 0o666)
    return fd


@contextlib.contextmanager
def one_at_a_time(serialize: bool):
    """Hold the machine's GPU lock around the body when serialize (exclusive mode with GPUs); waits at most
    WAIT_BOUND_S for it, then runs the body anyway."""
    if not serialize:
        yield
        return
    fd = _open_lock()
    try:
        deadline = time.monotonic() + WAIT_BOUND_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock
