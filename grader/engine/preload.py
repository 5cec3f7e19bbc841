"""Modules the forkserver imports once, so every rank starts warm.

Importing torch costs about 0.9 s per process, and the first DDP construction
lazily imports about 800 more modules (torch._dynamo, sympy, ...) for another
0.9 s. The forkserver imports them all once; each forked rank inherits them.
Nothing here may touch CUDA or start threads: forked children must be able to
initialise CUDA and OpenMP themselves. A notebook's kernel imports this module
too (grader.notebook), so it holds nothing only a forkserver may have. The engine
knows no exercise: the exercises' public check modules are added to the forkserver's
preload by whoever loads an exercise (processes.preload, called by grader.exercises).
Only the optional torch modules below may be missing silently.

Last, what the tamper guard watches: integrity.Guard() imports every watched module a rank lacks, before student
code runs, so that no submission can load and patch one first. Left to the ranks, that import (fsspec, DCP's
state_dict, DDP's comm hooks: modules no check imports at the top) cost 0.15-0.35 s in every rank of every launch
here, about half of an empty 2-rank launch (benchmarks/bench_guard.py). Only torch and standard-library modules are
named (guard_list.py): nothing a public rank must not have. (The kernel's warm-up imports them too, in a background
thread: no check waits on them.)
"""

import importlib

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

import grader.engine.worker  # noqa: E402,F401  (grader.checks comes with the checks the loader adds)
from grader.engine import integrity  # noqa: E402

integrity.import_watched()
