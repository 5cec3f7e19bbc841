"""Modules the forkserver imports once, so every rank starts warm.

Importing torch costs about 0.9 s per process, and the first DDP construction
lazily imports about 800 more modules (torch._dynamo, sympy, ...) for another
0.9 s. The forkserver imports them all once; each forked rank inherits them.
Nothing here may touch CUDA or start threads: forked children must be able to
initialise CUDA and OpenMP themselves.
"""
import importlib

import torch  # noqa: F401
import torch.distributed  # noqa: F401
from torch.nn.parallel import DistributedDataParallel  # noqa: F401

LAZY_MODULES = [
    "torch._dynamo",
    "torch.distributed.fsdp",
    "torch.distributed.tensor.parallel",
    "torch.distributed.checkpoint",
    "torch.distributed.optim",
    "torch.distributed.nn",
    "torch.distributed.algorithms.join",
    "torch.utils.data",
    "cloudpickle",
    "grader.engine.worker",
    "grader.checks",
]

# Every exercise's checks too: imported before any student code runs in a rank, so the
# integrity guard knows all of them (and a check's first run does not pay the import).
from grader.exercises import MODULES  # noqa: E402

for _name in LAZY_MODULES + list(MODULES.values()):
    try:
        importlib.import_module(_name)
    except Exception:  # a missing optional module only costs speed
        pass
