"""Benchmark: a warm 4-rank check of the tasks whose checks run 4 ranks (ring_attention's 4-block ring,
build_hsdp_model's 2 x 2 mesh), the solution graded, once the forkserver is warm.

    make bench        (or: .venv/bin/python benchmarks/bench_four_ranks.py [--repeats N])

Prints the median seconds per 4-rank check of each task (target: under 2 s on a 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from grader.engine import warm_up  # noqa: E402
from grader.exercises import get_exercise  # noqa: E402
from grader.runner import run_checks  # noqa: E402
from grader.submission import read_notebook  # noqa: E402

TASKS = (("01_parallelism", "ring_attention"), ("03_syncbn_sharded", "build_hsdp_model"))


def seconds_per_check(exercise_id: str, task: str) -> float:
    """One grading of the task's public checks (their 4-rank runs among them): the seconds per check."""
    exercise = get_exercise(exercise_id)
    submission = read_notebook(os.path.join(ROOT, "solutions", exercise_id, f"{exercise_id}.ipynb"))
    start = time.perf_counter()
    report = run_checks(exercise, submission, task=task)
    elapsed = time.perf_counter() - start
    assert report.passed, "\n".join(report.lines())
    return elapsed / len(report.checks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    warm_up()
    for exercise_id, task in TASKS:
        seconds_per_check(exercise_id, task)  # warm: the forkserver and this task's first load
        median = statistics.median(seconds_per_check(exercise_id, task) for _ in range(args.repeats))
        sizes = sorted({c.world_size or 2 for c in get_exercise(exercise_id).checks_for(task, hidden=False)})
        print(f"{task}: a warm public check of the solution ({sizes} ranks): {median:.3f} s per check (target < 2 s)")


if __name__ == "__main__":
    main()
