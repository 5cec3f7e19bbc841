"""Benchmark: a warm 2-rank check of one correct task versus the same work
launched as a fresh `torchrun --nproc_per_node=2`.

    make bench        (or: .venv/bin/python benchmarks/bench_engine.py [--repeats N])

Prints the median time of each and their ratio (target: the engine at least
10x faster than fresh torchrun per check once warm).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from grader.runner import run_checks  # noqa: E402
from grader.engine import free_port, warm_up  # noqa: E402
from grader.exercises import get_exercise  # noqa: E402
from grader.submission import read_notebook  # noqa: E402

# The same work as the wrap_model checks: build a tiny net, wrap it in DDP, one backward.
TORCHRUN_SCRIPT = """
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank() + 1)
model = DDP(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))
x, y = torch.randn(8, 4), torch.randn(8, 1)
nn.MSELoss()(model(x), y).backward()
dist.barrier()
dist.destroy_process_group()
"""


def time_engine(repeats: int) -> list[float]:
    exercise = get_exercise("02_ddp_basics")
    submission = read_notebook(os.path.join(ROOT, "solutions", "02_ddp_basics", "02_ddp_basics.ipynb"))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        report = run_checks(exercise, submission, task="wrap_model")
        assert report.passed
        times.append((time.perf_counter() - start) / len(report.checks))
    return times


def time_torchrun(repeats: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "ddp_step.py")
        with open(script, "w") as f:
            f.write(TORCHRUN_SCRIPT)
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--nproc_per_node=2",
                    "--rdzv-backend=c10d",
                    f"--rdzv-endpoint=127.0.0.1:{free_port()}",
                    script,
                ],
                capture_output=True,
                timeout=120,
            )
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    warm_up()
    time_engine(1)  # warm: forkserver started, first preflight done
    engine = statistics.median(time_engine(args.repeats))
    torchrun = statistics.median(time_torchrun(max(3, args.repeats // 2)))
    print(f"engine, one 2-rank check of wrap_model (warm, incl. its share of the load step): {engine:.3f} s")
    print(f"fresh torchrun --nproc_per_node=2 of the same DDP work:                         {torchrun:.3f} s")
    print(f"ratio: the engine is {torchrun / engine:.1f}x faster (target >= 10x)")


if __name__ == "__main__":
    main()
