"""The multi-process engine: real torch.distributed runs, bounded and clean.

- plan.py:      the hardware plan of a run (nccl with one GPU per rank, else gloo on CPU)
- launcher.py:  the parent side: run_distributed, start, collect, release
- processes.py: the forkserver, ports, kill_tree, rank output files
- results.py:   RankReport and RunResult
- worker.py:    the child side (one process per rank, DistContext)
- integrity.py: inside a rank, notice student code that replaces the grader's objects
- preload.py:   what the forkserver imports once, the modules the integrity guard watches included
                (processes.preload: the public checks, named by their loader)
- stacks.py:    tracebacks and hung stacks, the student's frames first
- background.py: a command (torchrun) in a session of its own, bounded: lesson 4's launcher, exercise 4's runner
- flight_recorder.py: every collective of a rank and where it was called (torch's Flight Recorder), read on request
- divergence.py, source_lines.py: where the ranks' collectives stopped pairing, and the line of code quoted
- frame_guard.py: inside a rank, the student's code is refused the call stack's frames (the grader's)
- guard_list.py: what the integrity guard watches, derived from the grader's code
- forked_forkserver.py: the ranks' forkserver as a fork of this process; huge_pages.py: 2 MiB pages for it
- cuda.py:      what CUDA is here, never initialized in a grader process: how many GPUs it counts (in a child),
                and (tests only) every call into it; cuda_probe.py: what a rank sees of CUDA (the GPU gate's probe)
"""

from grader.engine import cuda

cuda.use_nvml_check()  # every grader process and its children: torch.cuda.is_available() asks NVML, so it is fork-safe
cuda.install()  # tests only (GRADER_CUDA_WATCH=1): recorders on torch's CUDA entry points
from grader.engine.launcher import run_distributed  # noqa: E402
from grader.engine.plan import HardwarePlan, current_plan, plan_for  # noqa: E402
from grader.engine.processes import free_port, kill_tree, release_port, reserved_port, warm_up  # noqa: E402
from grader.engine.results import RankReport, RunFailed, RunResult  # noqa: E402
from grader.engine.worker import DistContext  # noqa: E402

__all__ = [
    "run_distributed",
    "RunResult",
    "RankReport",
    "RunFailed",
    "DistContext",
    "HardwarePlan",
    "plan_for",
    "current_plan",
    "free_port",
    "release_port",
    "reserved_port",
    "kill_tree",
    "warm_up",
]
