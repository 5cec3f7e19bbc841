"""Per-rank cost of the tamper guard: integrity.Guard() (before student code) and one full verify(),
warm in one process, then as a rank pays it: the first Guard() in a freshly forked rank (copy-on-write
pages, any watched module the forkserver lacks), and an empty 2-rank launch with the guard against
one without (trusted=True), each the median of `repeats`. Measurements for the report only.

    .venv/bin/python benchmarks/bench_guard.py
"""

import statistics
import time

import grader.engine.preload  # noqa: F401  (what the forkserver imports)
from grader.engine import forked_forkserver, integrity, processes, run_distributed
from grader.exercises import exercise_ids, find, get_exercise


def _first_guard(ctx):
    from grader.engine import integrity as guard_module

    started = time.perf_counter()
    guard_module.Guard()
    return time.perf_counter() - started


def _empty(ctx):
    return ctx.rank


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(repeats: int = 30) -> None:
    for exercise_id in exercise_ids():
        processes.preload(find(exercise_id).public)
    forked_forkserver.start_here()  # as a grading worker does: the ranks fork from this process's state
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
    print(
        f"{len(guard.watched())} namespaces, {len(guard._all)} names watched; warm in one process: Guard() "
        f"median {statistics.median(inits) * 1e3:.1f} ms, verify() median {statistics.median(verifies) * 1e3:.1f} ms"
    )
    firsts = [t for _ in range(repeats // 3) for t in run_distributed(_first_guard, 2, trusted=True).values]
    print(f"first Guard() in a freshly forked rank: median {statistics.median(firsts) * 1e3:.1f} ms")
    guarded = _median(lambda: run_distributed(_empty, 2), repeats // 3)
    unguarded = _median(lambda: run_distributed(_empty, 2, trusted=True), repeats // 3)
    print(
        f"empty 2-rank launch: {guarded:.3f} s with the guard, {unguarded:.3f} s without "
        f"(the guard's share {guarded - unguarded:.3f} s per launch)"
    )


if __name__ == "__main__":
    main()
