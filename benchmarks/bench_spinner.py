"""Benchmark: how much longer a class takes beside a spinner, with a CPU bound per job.

    make bench   (or: .venv/bin/python benchmarks/bench_spinner.py [--students 7] [--jobs N] [--no-unbounded]
                 [--strict])

A class of exercise 02 (N students with the solution's answers) is graded with `python -m grader grade`, sandboxed,
twice: alone, then beside one more student whose pick_device keeps 100 processes spinning in every rank that calls it
(tests/hostile/limits/spinner.py). Each job has its own cgroup where the grader can make one (job_limits.py: a CPU
quota of what its ranks compute on and a CPU for its worker, and one share of the CPUs among the jobs). Target: the class beside
the spinner within 1.5x of its time alone (TARGET). Also printed: whether every honest student kept exactly its
score, whether the spinner was flagged, the load, and (unless --no-unbounded) the same spinner class with
GRADER_JOB_CGROUPS=0, where the scheduler shares the CPUs per process (RLIMIT_DATA 2 GiB there, so that as many
jobs fit in memory: memory_fit.py). Only a measurement: no grade rests on these times.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from samples.make_samples import solution_answers  # noqa: E402
from tests.graded_class import A, attacker_notebook, generated_course, grade_args, notebook_with, place  # noqa: E402

TARGET = 1.5  # the class beside a spinner, at most this many times its time alone
SPINNER = "spinner"


def grade(base: str, students: int, spinner: bool, jobs: int, env: dict) -> tuple[float, dict, str]:
    """(seconds, student -> result, the run's output) for one class, graded in a fresh course under base."""
    course = generated_course(os.path.join(base, "course"))
    for i in range(students):
        place(course, f"honest{i:02d}", notebook_with(solution_answers()))
    if spinner:
        place(course, SPINNER, attacker_notebook(SPINNER, course))
    env = dict(os.environ, HOME=base, **env)
    env.pop("XDG_STATE_HOME", None)
    start = time.perf_counter()
    done = subprocess.run(grade_args(course.root, jobs=jobs), cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"grading failed:\n{done.stdout}\n{done.stderr}")
    results = {}
    for name in os.listdir(course.results_dir(A)):
        with open(os.path.join(course.results_dir(A), name)) as f:
            results[name.removesuffix(".json")] = json.load(f)
    return seconds, results, done.stdout + done.stderr


def scores(results: dict) -> dict:
    return {s: r["report"]["score"] for s, r in results.items() if s != SPINNER}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-unbounded", dest="unbounded", action="store_false", help="skip GRADER_JOB_CGROUPS=0")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args()
    runs = {"alone": (False, {}), "beside a spinner": (True, {})}
    if args.unbounded:
        runs["beside a spinner, no cgroups"] = (
            True,
            {"GRADER_JOB_CGROUPS": "0", "GRADER_PROCESS_MEMORY": str(2 << 30)},
        )
    times, results, load = {}, {}, [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (kind, (spinner, env)) in enumerate(runs.items()):
            times[kind], results[kind], output = grade(
                os.path.join(tmp, str(i)), args.students, spinner, args.jobs, env
            )
            load.append(os.getloadavg()[0])
            notice = [line for line in output.splitlines() if "no limit per job" in line]
            print(f"{kind:<32} {times[kind]:6.1f} s" + (f"   ({notice[0][:100]}...)" if notice else ""))
    ratio = times["beside a spinner"] / times["alone"]
    same = all(scores(results[k]) == scores(results["alone"]) for k in results)
    flagged = any("limit on CPU" in f for f in results["beside a spinner"][SPINNER].get("flags", []))
    print(
        f"{args.students} honest students, --jobs {args.jobs}: beside a spinner {ratio:.2f}x the class alone "
        f"(target at most {TARGET}x{'' if ratio <= TARGET else f', missed by {ratio - TARGET:.2f}x'})"
    )
    if "beside a spinner, no cgroups" in times:
        print(f"without cgroups: {times['beside a spinner, no cgroups'] / times['alone']:.2f}x the class alone")
    print(f"honest scores identical in every run: {same}; spinner flagged for CPU: {flagged}")
    print(f"load average (1 min) before and after each run: {', '.join(f'{x:.1f}' for x in load)}")
    return 1 if args.strict and (ratio > TARGET or not same or not flagged) else 0


if __name__ == "__main__":
    sys.exit(main())
