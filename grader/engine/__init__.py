"""The multi-process engine: real torch.distributed runs, bounded and clean.

- launcher.py: the parent side (run_distributed, RunResult)
- worker.py:   the child side (one process per rank, DistContext)
- preload.py:  what the forkserver imports once
- stacks.py:   tracebacks and hung stacks, the student's frames first
"""
from grader.engine.launcher import RankReport, RunFailed, RunResult, default_backend, free_port, run_distributed, warm_up
from grader.engine.worker import DistContext

__all__ = ["run_distributed", "RunResult", "RankReport", "RunFailed", "DistContext",
           "default_backend", "free_port", "warm_up"]
