"""Benchmark: grading a class with `make grade` versus plain `nbgrader autograde`.

    make bench   (or: .venv/bin/python benchmarks/bench_grading.py [--students 20] [--jobs 2])

Two identical throwaway courses hold the same N collected submissions of
02_ddp_basics (the bundled samples, repeated). One is graded by plain
`nbgrader autograde` (serial; it executes every notebook, whose check cells run
the grader inside the student's kernel), the other by `python -m grader grade`
(parallel, outside the kernels). Prints both times, their ratio (target on 2
cores: at least 1.7x) and whether every student got the same score.
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

from grader.demo import sample_students  # noqa: E402
from grader.gradebook import roundtrip  # noqa: E402
from grader.gradebook.inject import gradebook_scores  # noqa: E402

A = "02_ddp_basics"


def class_of(course, n: int) -> None:
    samples = itertools.cycle(sorted(sample_students(A).items()))
    for i in range(n):
        name, path = next(samples)
        folder = os.path.join(course.root, "submitted", f"{name}{i:02d}", A)
        os.makedirs(folder)
        shutil.copy(path, os.path.join(folder, f"{A}.ipynb"))
        with open(os.path.join(folder, "timestamp.txt"), "w") as f:
            f.write("2026-11-29 12:00:00.000000 UTC")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        courses = {}
        for kind in ("nbgrader", "grader"):
            course = roundtrip.make_course(os.path.join(tmp, kind), [A])
            roundtrip.nbgrader(["generate_assignment", A, "--force"], course.root, course.root)
            class_of(course, args.students)
            courses[kind] = course

        start = time.perf_counter()
        roundtrip.nbgrader(["autograde", A, "--force"], courses["nbgrader"].root, courses["nbgrader"].root,
                           timeout=7200)
        plain = time.perf_counter() - start

        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "grader", "grade", A, "--root", courses["grader"].root,
                        "--jobs", str(args.jobs), "--quiet"], check=True, capture_output=True, timeout=7200)
        ours = time.perf_counter() - start

        plain_scores = gradebook_scores(courses["nbgrader"], A)
        our_scores = gradebook_scores(courses["grader"], A)
    same = plain_scores == our_scores
    print(f"{args.students} submissions of {A}, {os.cpu_count()} cores")
    print(f"plain nbgrader autograde (serial, in the kernels): {plain:7.1f} s")
    print(f"python -m grader grade --jobs {args.jobs} (make grade):    {ours:7.1f} s")
    print(f"ratio: {plain / ours:.2f}x faster (target >= 1.7x); identical scores: {same}")
    if not same:
        for student in sorted(set(plain_scores) | set(our_scores)):
            if plain_scores.get(student) != our_scores.get(student):
                print(f"  {student}: nbgrader {plain_scores.get(student)}, grader {our_scores.get(student)}")


if __name__ == "__main__":
    main()
