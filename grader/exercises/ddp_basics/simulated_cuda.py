"""Inside a rank: make the student's code believe CUDA is (or is not) available.

The grader's machine may have no GPU, yet pick_backend and pick_device must
decide from torch.cuda.is_available(): a function that always answers "gloo"
would pass on every CPU machine. Only the student's decision runs under the
simulation (no tensor ever goes to a simulated GPU); everything is restored after.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def cuda_available(available: bool, gpus: int):
    """torch.cuda.is_available() returns `available`; set_device calls are recorded, not made."""
    import torch

    calls: list = []
    names = ("is_available", "set_device", "device_count")
    saved = {name: getattr(torch.cuda, name) for name in names}
    torch.cuda.is_available = lambda: available
    torch.cuda.set_device = lambda device: calls.append(device)
    torch.cuda.device_count = lambda: gpus if available else 0
    try:
        yield calls
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)


def device_index(device) -> int | None:
    """The GPU index in a set_device argument: 1, "cuda:1", torch.device("cuda", 1)."""
    import torch

    if isinstance(device, int):
        return device
    try:
        return torch.device(device).index
    except (TypeError, RuntimeError):
        return None
