"""What the tamper guard watches, imported once by the forkserver (processes.PRELOAD).

integrity.Guard() imports every watched module a rank lacks, before student code runs, so that no
submission can load and patch one first. Left to the ranks, that import (fsspec, DCP's state_dict,
DDP's comm hooks: modules no check imports at the top) cost 0.15-0.35 s in every rank of every
launch here, about half of an empty 2-rank launch (benchmarks/bench_guard.py). Only torch and
standard-library modules are named (guard_list.py): nothing a public rank must not have.
"""

from grader.engine import integrity

integrity.import_watched()
