"""Wall-clock timing of torch work that stays right on GPUs.

CUDA calls return once the work is queued, so a clock read around them measures the launch. These helpers
wait for the device before each reading (torch.cuda.synchronize); on a CPU every call returns when its work is
done and nothing needs to wait. Used by lesson 1 (the all-reduce timings) and lesson 2 (§14.6, the
synchronisation strategies); lesson 2's "Timing on a GPU" callout explains why.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

import torch

T = TypeVar("T")


def synchronize(device=None) -> None:
    """Wait until the queued work of `device` has run: a no-op unless it is a CUDA device."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(work: Callable[[], T], device=None) -> tuple[T, float]:
    """Run work() and return (its result, seconds), the device's queued work finished at both clock readings."""
    synchronize(device)  # work queued before us must not be counted
    start = time.perf_counter()
    result = work()
    synchronize(device)  # ... and ours must have run, not only been launched
    return result, time.perf_counter() - start


def best_of(work: Callable[[], object], repeats: int, device=None, warmup: int = 1) -> float:
    """The fastest of `repeats` timed runs of work(), in seconds, after `warmup` untimed ones.

    The minimum, because on a shared machine every disturbance only adds time.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        work()
    return min(timed(work, device)[1] for _ in range(repeats))
