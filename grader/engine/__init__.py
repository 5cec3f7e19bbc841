"""The multi-process engine: real torch.distributed runs, bounded and clean.

- plan.py:      the hardware plan of a run (nccl with one GPU per rank, else gloo on CPU)
- launcher.py:  the parent side: run_distributed, start, collect, release
- processes.py: the forkserver, ports, kill_tree, rank output files
- results.py:   RankReport and RunResult
- worker.py:    the child side (one process per rank, DistContext)
- integrity.py: inside a rank, notice student code that replaces the grader's objects
- preload.py:   what the forkserver imports once (processes.preload: the public checks, named by their loader)
- stacks.py:    tracebacks and hung stacks, the student's frames first
"""
from grader.engine.launcher import run_distributed
from grader.engine.plan import HardwarePlan, current_plan, plan_for
from grader.engine.processes import free_port, kill_tree, release_port, reserved_port, warm_up
from grader.engine.results import RankReport, RunFailed, RunResult
from grader.engine.worker import DistContext

__all__ = ["run_distributed", "RunResult", "RankReport", "RunFailed", "DistContext", "HardwarePlan",
           "plan_for", "current_plan", "free_port", "release_port", "reserved_port", "kill_tree", "warm_up"]
