"""Benchmark: grading a class with `make grade` versus plain `nbgrader autograde`.

    make bench   (or: .venv/bin/python benchmarks/bench_grading.py [--students 20] [--jobs 2])

Two identical throwaway courses hold the same N collected submissions of
02_ddp_basics (the bundled samples, repeated). One is graded by plain
`nbgrader autograde` (serial; it executes every notebook, whose check cells run
the grader inside the student's kernel), the others by `python -m grader grade`
(parallel, outside the kernels), three ways: sandboxed with nurseries (the default as
root, GRADER_NURSERY=1: one sandboxed, torch-preloaded nursery per phase forks each
submission's public and hidden jobs into namespaces of their own), sandboxed with a
sandbox per job (GRADER_NURSERY=0: each submission in two fresh bubblewrap sandboxes,
each paying a cold start), both skipped without bwrap, and with --no-sandbox
(long-lived workers). Prints the times, the ratios against plain
nbgrader (the course's target: at least 4x, sandboxed; by how much a ratio falls
short), whether every student got the same score, the load while it ran, the machine's CPU
per submission while each kind graded (and the kernel's share of it), and where
one submission's time goes (grading_profile.py: process and sandbox start, torch
import, forkserver, per-launch overhead, the checks' own work; nbgrader's own steps
are the gradebook write timed below), with the ceiling the checks' own CPU puts on any ratio.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import grading_profile  # noqa: E402

from grader.instructor.demo import sample_students  # noqa: E402
from grader.gradebook import roundtrip  # noqa: E402
from grader.gradebook.inject import gradebook_scores  # noqa: E402
from grader.gradebook.refuse_autograde import ALLOW  # noqa: E402  (the sample class is ours: trusted)
from grader.isolation.nursery_client import NURSERY_ENV  # noqa: E402

A = "02_ddp_basics"
TARGET = 4.0  # the course's target: make grade, sandboxed, at least 4x plain nbgrader autograde


def class_of(course, n: int) -> None:
    samples = itertools.cycle(sorted(sample_students(A).items()))
    for i in range(n):
        name, path = next(samples)
        folder = os.path.join(course.root, "submitted", f"{name}{i:02d}", A)
        os.makedirs(folder)
        shutil.copy(path, os.path.join(folder, f"{A}.ipynb"))
        with open(os.path.join(folder, "timestamp.txt"), "w") as f:
            f.write("2026-11-29 12:00:00.000000 UTC")


def machine_cpu() -> tuple[float, float]:
    """CPU-seconds the whole machine has been busy, and of those the kernel's (/proc/stat: every process counts,
    a sandbox's too)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / hz, ticks[2] / hz  # all but idle and iowait; system


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-profile", dest="profile", action="store_false", help="skip the per-phase breakdown")
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    kinds = {"--no-sandbox": ["--no-sandbox"]}
    env = {kind: dict(os.environ) for kind in ("--no-sandbox", "sandboxed, a sandbox per job", "sandboxed, nurseries")}
    env["sandboxed, a sandbox per job"][NURSERY_ENV] = "0"  # one sandbox per submission and phase
    env["sandboxed, nurseries"][NURSERY_ENV] = "1"  # jobs forked from one nursery per phase (nursery.py)
    if shutil.which("bwrap"):
        kinds["sandboxed, a sandbox per job"] = []
        kinds["sandboxed, nurseries"] = []
    else:
        print("sandboxed grading not measured: bwrap is not installed (apt-get install bubblewrap)")
    with tempfile.TemporaryDirectory() as tmp:
        courses = {}
        for kind in ("nbgrader", *kinds):
            folder = "".join(c if c.isalnum() else "-" for c in kind).strip("-")
            course = roundtrip.make_course(os.path.join(tmp, folder), [A])
            roundtrip.nbgrader(["generate_assignment", A, "--force"], course.root, course.root)
            class_of(course, args.students)
            courses[kind] = course

        start = time.perf_counter()
        roundtrip.nbgrader(
            ["autograde", A, "--force", ALLOW], courses["nbgrader"].root, courses["nbgrader"].root, timeout=7200
        )
        times = {"nbgrader": time.perf_counter() - start}
        cpu = {}
        for kind, extra in kinds.items():
            start, busy = time.perf_counter(), machine_cpu()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "grader",
                    "grade",
                    A,
                    "--root",
                    courses[kind].root,
                    "--jobs",
                    str(args.jobs),
                    "--quiet",
                    *extra,
                ],
                check=True,
                capture_output=True,
                timeout=7200,
                env=env[kind],
            )
            times[kind] = time.perf_counter() - start
            cpu[kind] = tuple(b - a for a, b in zip(busy, machine_cpu()))
            load.append(os.getloadavg()[0])
        # nbgrader's own steps in make grade: a second run finds every result done and only writes the gradebook
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grader",
                "grade",
                A,
                "--root",
                courses["--no-sandbox"].root,
                "--quiet",
                "--no-sandbox",
            ],
            check=True,
            capture_output=True,
            timeout=7200,
        )
        rerun = time.perf_counter() - start
        scores = {kind: gradebook_scores(course, A) for kind, course in courses.items()}
    print(
        f"{args.students} submissions of {A}, {os.cpu_count()} cores; 1-minute load average "
        f"{min(load):.1f} to {max(load):.1f} while it ran"
    )
    print(f"plain nbgrader autograde (serial, in the kernels):       {times['nbgrader']:7.1f} s")
    for kind in kinds:
        label = f"python -m grader grade --jobs {args.jobs} ({kind})"
        same = scores[kind] == scores["nbgrader"]
        ratio = times["nbgrader"] / times[kind]
        verdict = "met" if ratio >= TARGET else f"NOT met: {times[kind] / (times['nbgrader'] / TARGET):.2f}x too slow"
        print(
            f"{label:<56} {times[kind]:7.1f} s   ratio: {ratio:.2f}x faster than plain nbgrader "
            f"(target >= {TARGET:g}x: {verdict}); identical scores: {same}"
        )
        for student in sorted(set(scores["nbgrader"]) | set(scores[kind])) if not same else []:
            if scores["nbgrader"].get(student) != scores[kind].get(student):
                print(f"  {student}: nbgrader {scores['nbgrader'].get(student)}, {kind} {scores[kind].get(student)}")
    for kind, (busy, system) in cpu.items():
        print(
            f"machine CPU while grading ({kind}): {busy:.1f} CPU-s, {busy / args.students:.1f} per submission; "
            f"{100 * system / busy:.0f}% of it in the kernel (forks, copy-on-write faults, exits, namespaces)"
        )
    for kind in ("sandboxed, a sandbox per job", "sandboxed, nurseries"):
        if kind in kinds:
            print(f"sandbox cost ({kind}): {times[kind] / times['--no-sandbox']:.2f}x the unsandboxed time")
    print(
        f"per submission: plain nbgrader {times['nbgrader'] / args.students:.1f} s; make grade's parent, "
        f"nbgrader's own steps included (a re-run that only writes the gradebook): {rerun:.1f} s for the class"
    )
    if args.profile:
        lines, checks_cpu = grading_profile.breakdown(
            A, sorted(sample_students(A).values())[0], "sandboxed, nurseries" in kinds
        )
        print(
            "\n".join(
                lines
                + grading_profile.ceiling(checks_cpu, os.cpu_count() or 1, times["nbgrader"] / args.students, TARGET)
            )
        )


if __name__ == "__main__":
    main()
