"""Modules the forkserver imports once, so every rank starts warm.

Importing torch costs about 0.9 s per process, and the first DDP construction
lazily imports about 800 more modules (torch._dynamo, sympy, ...) for another
0.9 s. The forkserver imports them all once; each forked rank inherits them.
Nothing here may touch CUDA or start threads: forked children must be able to
initialise CUDA and OpenMP themselves.
"""
import importlib
import os

import torch  # noqa: F401
import torch.distributed  # noqa: F401
from torch.nn.parallel import DistributedDataParallel  # noqa: F401

LAZY_MODULES = [  # optional: a torch build without one only costs speed
    "torch._dynamo",
    "torch.distributed.fsdp",
    "torch.distributed.tensor.parallel",
    "torch.distributed.checkpoint",
    "torch.distributed.optim",
    "torch.distributed.nn",
    "torch.distributed.algorithms.join",
]

for _name in LAZY_MODULES:
    try:
        importlib.import_module(_name)
    except ImportError:
        pass

import cloudpickle  # noqa: E402,F401
import torch.utils.data  # noqa: E402,F401

import grader.checks  # noqa: E402,F401
import grader.engine.worker  # noqa: E402,F401
from grader.exercises import MODULES  # noqa: E402
from grader.exercises.instructor import MASKED_ENV  # noqa: E402

# Every exercise's public checks too: imported before any student code runs in a rank, so the
# integrity guard knows them (and a check's first run does not pay the import). Never the hidden
# ones: a rank of a hidden check imports its module when it unpickles the check, before any student
# code runs; ranks of public checks never have them.
_masked = os.environ.get(MASKED_ENV)
os.environ[MASKED_ENV] = "1"
try:
    for _module in MODULES.values():
        importlib.import_module(_module)
finally:
    if _masked is None:
        del os.environ[MASKED_ENV]
    else:
        os.environ[MASKED_ENV] = _masked
