"""make demo: grade the bundled sample submissions and print the grade table.

The samples live in samples/submitted/<student>/<assignment>/ (nbgrader's
layout); samples/make_samples.py rebuilds them from the solution.
"""
from __future__ import annotations

import glob
import os
import time

from grader.checks import run_checks
from grader.engine import warm_up
from grader.exercises import get_exercise
from grader.submission import SubmissionError, read_submission

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples", "submitted")


def grade_samples(assignment: str = "02_ddp_basics", samples: str = SAMPLES) -> dict[str, object]:
    exercise = get_exercise(assignment)
    results = {}
    for path in sorted(glob.glob(os.path.join(samples, "*", assignment, "*.ipynb"))):
        student = path.split(os.sep)[-3]
        try:
            results[student] = run_checks(exercise, read_submission(path))
        except SubmissionError as exc:
            results[student] = str(exc)
    return results


def grade_table(assignment: str, results: dict) -> str:
    tasks = get_exercise(assignment).tasks
    width = max(len(t) for t in tasks)
    students = list(results)
    lines = [" " * width + "  " + "  ".join(f"{s:>6}" for s in students)]
    for task in tasks:
        cells = []
        for s in students:
            report = results[s]
            if isinstance(report, str):
                cells.append(f"{'-':>6}")
                continue
            mine = [c for c in report.checks if c.task == task]
            cells.append(f"{sum(c.points for c in mine):>3g}/{sum(c.max_points for c in mine):<2g}")
        lines.append(f"{task:<{width}}  " + "  ".join(cells))
    totals = [(f"{r.score:>3g}/{r.max_score:<2g}" if not isinstance(r, str) else f"{'n/a':>6}") for r in results.values()]
    lines.append(f"{'total':<{width}}  " + "  ".join(totals))
    return "\n".join(lines)


def main(assignment: str = "02_ddp_basics") -> int:
    start = time.monotonic()
    warm_up()
    print(f"Grading the sample submissions of {assignment} with real 2-process runs "
          f"(gloo on CPU, nccl when there are enough GPUs)...", flush=True)
    results = grade_samples(assignment)
    print()
    print(grade_table(assignment, results))
    print()
    for student, report in results.items():
        if isinstance(report, str):
            print(f"{student}: cannot be graded: {report}")
            continue
        misses = [c for c in report.checks if not c.passed]
        if misses:
            first = misses[0].message.splitlines()[0]
            print(f"{student}: {len(misses)} failed check(s); first: {misses[0].name}: {first}")
    print(f"\ngraded {len(results)} submissions in {time.monotonic() - start:.1f} s")
    return 0
