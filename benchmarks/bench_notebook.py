"""Benchmark: how long a student waits for a task's check cell, in a real kernel.

    make bench     (or: .venv/bin/python benchmarks/bench_notebook.py [--exercise ID ...|all] [--repeats N] [--strict])

Starts a Jupyter kernel, defines the solution's answers in it (as a student who
ran their answer cells), runs one first check (it starts the engine's
forkserver, about 3 s once per kernel), then times `check("<task>")` for every
task: all the visible checks of the task, exactly what its check cell runs.
Target: under 1 s per task on a 2-core laptop, once the first check ran.
By default the exercises whose Exercise says judged_by_bench; 04_torchrun launches
real torchrun agents by design (seconds per check) and is measured with
`--exercise all` but not judged. With
--strict the exit status is 1 when a task misses the target.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from jupyter_client.manager import start_new_kernel  # noqa: E402

from grader.exercises import MODULES, get_exercise  # noqa: E402
from grader.submission import read_notebook  # noqa: E402

TARGET_S = 1.0


def run(client, code: str, timeout: float = 600) -> dict:
    """Execute code; return the user_expressions answer; raise on an error."""
    errors = []

    def on_output(msg):
        if msg["msg_type"] == "error":
            errors.append(msg["content"]["evalue"])

    reply = client.execute_interactive(code, timeout=timeout, output_hook=on_output,
                                       user_expressions={"seconds": "_bench_seconds"})
    if errors or reply["content"]["status"] != "ok":
        raise RuntimeError(f"the kernel failed on {code!r}: {errors or reply['content']}")
    value = reply["content"].get("user_expressions", {}).get("seconds", {})
    return json.loads(value["data"]["text/plain"]) if value.get("status") == "ok" else None


def timed(task: str) -> str:
    return ("import time as _time\n_bench_start = _time.perf_counter()\n"
            f"check({task!r})\n_bench_seconds = _time.perf_counter() - _bench_start")


def bench_exercise(exercise_id: str, repeats: int) -> tuple[float, list[tuple[str, int, float, float]]]:
    exercise = get_exercise(exercise_id)
    answers = read_notebook(os.path.join(ROOT, exercise.notebook))
    with tempfile.TemporaryDirectory() as cwd:
        manager, client = start_new_kernel(kernel_name="python3", cwd=cwd)
        try:
            run(client, f"from grader.notebook import checker\ncheck = checker({exercise_id!r})\n_bench_seconds = 0")
            for cell in answers.cells:
                run(client, cell.source)
            first = run(client, timed(exercise.tasks[0]))
            rows = []
            for task in exercise.tasks:
                times = [run(client, timed(task)) for _ in range(repeats)]
                rows.append((task, len(exercise.checks_for(task, hidden=False)), statistics.median(times), max(times)))
            return first, rows
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercise", action="append", choices=list(MODULES) + ["all"],
                        help="an exercise (repeatable), or all; default: every exercise but 04_torchrun")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--strict", action="store_true", help="exit status 1 when a task misses the target")
    args = parser.parse_args()
    chosen = args.exercise or [e for e in MODULES if get_exercise(e).judged_by_bench]
    exercises = list(MODULES) if "all" in chosen else chosen
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (timings grow with the load)")
    missed = []
    for exercise_id in exercises:
        first, rows = bench_exercise(exercise_id, args.repeats)
        print(f"\n{exercise_id}: first check in a fresh kernel {first:.2f} s (starts the engine); then per task, "
              f"median of {args.repeats}:")
        for task, n, median, worst in rows:
            ok = median < TARGET_S
            judged = get_exercise(exercise_id).judged_by_bench
            verdict = "ok" if ok else ("SLOW" if judged else "slow (real torchrun, not judged)")
            print(f"  {task:24s} {n} check{'s' if n != 1 else ' '}  {median:6.3f} s  (worst {worst:.3f} s)  {verdict}")
            if judged and not ok:
                missed.append(f"{exercise_id}/{task}")
    print(f"\ntarget: every task's checks in under {TARGET_S:g} s once warm: "
          + ("met" if not missed else "missed by " + ", ".join(missed)))
    return 1 if missed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
