"""Benchmark: how long a student waits for a task's check cell, in a real kernel.

    make bench     (or: .venv/bin/python benchmarks/bench_notebook.py [--exercise ID ...|all] [--repeats N] [--strict])

Starts a Jupyter kernel, runs the notebook's first cell (`check = checker(...)`,
which starts the engine in the background), defines the solution's answers in it
(as a student who ran their answer cells, as fast as "Run All" does), and times
the first check right after, and a second check at once (it waits for the
kernel's own warm-up, which starts when the first check ends); then times
`check("<task>")` for every task: all the visible checks of the task, exactly
what its check cell runs.
Targets on a 2-core laptop: the first check under 2 s right after the first
cell, and every task under 1 s once warm. For comparison it also times the first
check of a second fresh kernel whose first cell did not start the engine (how
the first check cost before the first cell started it), and the first check of
a third kernel whose student paused --pause seconds after the answer cells (a
realistic pace), not judged either. When the first check misses its target, the
benchmark times a lone import of what the forkserver preloads, to say why.
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
import subprocess
import sys
import time
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from jupyter_client.manager import start_new_kernel  # noqa: E402

from grader.exercises import exercise_ids, get_exercise  # noqa: E402
from grader.submission import read_notebook  # noqa: E402

TARGET_S = 1.0  # a task's check cell, once the engine is warm
FIRST_TARGET_S = 2.0  # the first check, right after the notebook's first cell
FIRST_CELL = "from grader.notebook import checker\ncheck = checker({!r})\n_bench_seconds = 0"
# the first cell as it was before it started the engine: the first check() then starts it
COLD_FIRST_CELL = (
    "import grader.notebook as _g\n_kept = _g.start_forkserver, _g.start_warming\n"
    "_g.start_forkserver = _g.start_warming = lambda *a: None\ncheck = _g.checker({!r})\n"
    "_g.start_forkserver, _g.start_warming = _kept\n_bench_seconds = 0"
)


def run(client, code: str, timeout: float = 600) -> dict:
    """Execute code; return the user_expressions answer; raise on an error."""
    errors, shown = [], []

    def on_output(msg):
        if msg["msg_type"] == "error":
            errors.append(msg["content"]["evalue"])
        shown.append(msg["content"].get("text") or msg["content"].get("data", {}).get("text/plain", ""))

    reply = client.execute_interactive(
        code, timeout=timeout, output_hook=on_output, user_expressions={"seconds": "_bench_seconds"}
    )
    if errors or reply["content"]["status"] != "ok":
        raise RuntimeError(f"the kernel failed on {code!r}: {errors or reply['content']}\n" + "".join(shown)[-4000:])
    value = reply["content"].get("user_expressions", {}).get("seconds", {})
    return json.loads(value["data"]["text/plain"]) if value.get("status") == "ok" else None


def timed(task: str) -> str:
    return (
        "import time as _time\n_bench_start = _time.perf_counter()\n"
        f"check({task!r})\n_bench_seconds = _time.perf_counter() - _bench_start"
    )


def first_check(exercise, answers, first_cell: str, pause: float = 0.0) -> tuple[float, float, float, object]:
    """(seconds of the first cell, of the answer cells, of the first check) in a fresh kernel, and the
    kernel; pause: seconds between the answer cells and the first check (a student reading)."""
    cwd = tempfile.TemporaryDirectory()
    manager, client = start_new_kernel(kernel_name="python3", cwd=cwd.name)
    try:
        cell = run(
            client,
            "import time as _time\n_bench_start = _time.perf_counter()\n"
            + first_cell.format(exercise.id)
            + "\n_bench_seconds = _time.perf_counter() - _bench_start",
        )
        start = time.perf_counter()
        for answer in answers.cells:
            run(client, answer.source)
        answering = time.perf_counter() - start
        time.sleep(pause)
        first = run(client, timed(exercise.tasks[0]))
    except BaseException:
        close((manager, client, cwd))
        raise
    return cell, answering, first, (manager, client, cwd)


def close(kernel) -> None:
    manager, client, cwd = kernel
    client.stop_channels()
    manager.shutdown_kernel(now=True)
    cwd.cleanup()


def bench_exercise(exercise_id: str, repeats: int, pause: float):
    exercise = get_exercise(exercise_id)
    answers = read_notebook(os.path.join(ROOT, exercise.notebook))
    *_, cold, kernel = first_check(exercise, answers, COLD_FIRST_CELL)
    close(kernel)
    paused = None
    if pause > 0:
        *_, paused, kernel = first_check(exercise, answers, FIRST_CELL, pause)
        close(kernel)
    cell, answering, first, kernel = first_check(exercise, answers, FIRST_CELL)
    try:
        second = run(kernel[1], timed(exercise.tasks[0]))  # joins the kernel's warm-up, begun as the first ended
        rows = []
        for task in exercise.tasks:
            times = [run(kernel[1], timed(task)) for _ in range(repeats)]
            rows.append((task, len(exercise.checks_for(task, hidden=False)), statistics.median(times), max(times)))
        return (cell, answering, first, second, cold, paused), rows
    finally:
        close(kernel)


def forkserver_import_seconds(exercise_id: str) -> float:
    """Seconds a lone process takes, now, to import what the forkserver preloads for this exercise."""
    from grader.engine.processes import PRELOAD
    from grader.exercises import find

    modules = list(PRELOAD) + list(find(exercise_id).public)
    code = (
        "import importlib, time\nt = time.perf_counter()\n"
        + "".join(f"importlib.import_module({m!r})\n" for m in modules)
        + "print(time.perf_counter() - t)"
    )
    return float(
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=300
        ).stdout
    )


def why_first_slow(exercise_id: str, before_check: float) -> str:
    """Why the first check right after "Run All" missed its target (measured now, printed under the miss)."""
    lone = forkserver_import_seconds(exercise_id)
    return (
        f"the forkserver, started at the beginning of the first cell, needs {lone:.2f} s alone at this load to "
        f"import torch, torch._dynamo, FSDP, DCP and the checks; the first cell and the answer cells took "
        f"{before_check:.2f} s, "
        + (
            "so the first check waits for the rest, longer"
            if before_check < lone
            else "yet it was still importing: slower"
        )
        + " while this kernel imports torch and the checks on the same cores and other processes load them "
        "(the kernel's torch._dynamo waits for the first check's end). Meeting 2 s under "
        "Run All needs the forkserver ready sooner: fewer modules before the first task (torch._dynamo, FSDP "
        "and DCP serve later tasks), or one import shared by kernel and forkserver (engine/forked_forkserver.py "
        "forked from the kernel; the first cell would then wait for that import itself)"
    )


# Why a task misses the target, and what would meet it (measured; printed under the miss only)
WHY_SLOW = {
    "03_syncbn_sharded/load_resharded": (
        "two launches one after the other by design (a DCP save by 2 ranks, shared by the two checks, then "
        "their loads by 3 and by 1 side by side: a rank cannot change its world size); most of each rank's "
        "CPU is DTensor's first-use cost in a fresh process (sharding propagation per operation: the same save "
        "costs 0.26 CPU-s in a fresh rank, 0.09 when repeated in one). Warming those caches in the forkserver "
        "with a fake process group is wrong (its rank-0 shard offsets broke dcp.save's plan on rank 1, measured). "
        "Meeting 1 s needs ranks that already ran FSDP2 at that world size (kept between checks), or fewer world "
        "sizes"
    ),
}


def over(seconds: float, target: float) -> str:
    return f"(+{seconds - target:.2f} s, {seconds / target:.1f}x the {target:g} s target)"


def verdict(seconds: float, target: float, judged: bool, why_not: str) -> str:
    if seconds < target:
        return "ok"
    return f"SLOW {over(seconds, target)}" if judged else f"slow ({why_not})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--exercise",
        action="append",
        choices=exercise_ids() + ["all"],
        help="an exercise (repeatable), or all; default: every exercise but 04_torchrun",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--pause",
        type=float,
        default=10.0,
        help="also time the first check after this pause after the answer cells (0: skip)",
    )
    parser.add_argument("--strict", action="store_true", help="exit status 1 when a task misses the target")
    args = parser.parse_args()
    chosen = args.exercise or [e for e in exercise_ids() if get_exercise(e).judged_by_bench]
    exercises = exercise_ids() if "all" in chosen else chosen
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (timings grow with the load)")
    missed = []
    for exercise_id in exercises:
        (cell, answering, first, second, cold, paused), rows = bench_exercise(exercise_id, args.repeats, args.pause)
        judged = get_exercise(exercise_id).judged_by_bench
        ok = first < FIRST_TARGET_S
        print(
            f"\n{exercise_id}: first cell {cell:.2f} s (starts the engine in the background); first check right "
            f"after it {first:.2f} s  {verdict(first, FIRST_TARGET_S, judged, 'not judged')}  "
            f"(a first cell that does not start the engine: first check {cold:.2f} s)"
        )
        print(
            f"  a second check at once after the first: {second:.2f} s (it joins the kernel's own warm-up, "
            f"torch._dynamo and friends, which starts when the first check ends; measured, not judged)"
        )
        if paused is not None:
            print(
                f"  first check {args.pause:g} s after the answer cells (a student reading first): {paused:.2f} s "
                f"(measured, not judged)"
            )
        if judged and not ok:
            missed.append(f"{exercise_id} first check {over(first, FIRST_TARGET_S)}")
            print(f"      why: {why_first_slow(exercise_id, cell + answering)}")
        print(f"  then per task, median of {args.repeats}:")
        for task, n, median, worst in rows:
            ok = median < TARGET_S
            print(
                f"  {task:24s} {n} check{'s' if n != 1 else ' '}  {median:6.3f} s  (worst {worst:.3f} s)  "
                f"{verdict(median, TARGET_S, judged, 'real torchrun, not judged')}"
            )
            if judged and not ok:
                missed.append(f"{exercise_id}/{task} {over(median, TARGET_S)}")
                if f"{exercise_id}/{task}" in WHY_SLOW:
                    print(f"      why: {WHY_SLOW[exercise_id + '/' + task]}")
    print(
        f"\ntargets: the first check under {FIRST_TARGET_S:g} s right after the first cell, every task's "
        f"checks in under {TARGET_S:g} s once warm: " + ("met" if not missed else "missed by " + ", ".join(missed))
    )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 1 if missed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
