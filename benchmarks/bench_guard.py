"""Per-rank cost of the tamper guard: integrity.Guard() (before student code) and one full verify(),
in a process that has what the forkserver preloads (torch, the exercises' checks).

    .venv/bin/python benchmarks/bench_guard.py
"""
import statistics
import time

import grader.engine.preload  # noqa: F401  (what the forkserver imports)
from grader.engine import integrity
from grader.exercises import exercise_ids, get_exercise


def main(repeats: int = 30) -> None:
    for exercise_id in exercise_ids():
        get_exercise(exercise_id)  # the check modules, as a rank has them
    integrity.Guard()
    inits, verifies = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        guard = integrity.Guard()
        inits.append(time.perf_counter() - started)
        started = time.perf_counter()
        guard.verify("in the benchmark")
        verifies.append(time.perf_counter() - started)
    print(f"{len(guard.watched())} namespaces, {len(guard._all)} names watched; "
          f"Guard() median {statistics.median(inits) * 1e3:.1f} ms, verify() median "
          f"{statistics.median(verifies) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
