"""check("task") inside a notebook.

    from grader.notebook import checker
    check = checker("02_ddp_basics")
    check("wrap_model")          # ✓/✗ per check; AssertionError when any fails

The code checked is what is defined in the kernel *now* (serialized by value),
not the saved file, so the same line works while editing and as an nbgrader
test cell.
"""
from __future__ import annotations

import sys

from grader.checks import run_checks
from grader.exercises import get_exercise
from grader.submission import from_namespace


def checker(exercise_id: str, world_size: int = 2, timeout: float = 30.0):
    exercise = get_exercise(exercise_id)

    def check(task: str, hidden: bool = False, namespace: dict | None = None):
        ns = namespace if namespace is not None else vars(sys.modules["__main__"])
        submission = from_namespace(ns, exercise.tasks)
        report = run_checks(exercise, submission, task=task, hidden=hidden, world_size=world_size, timeout=timeout)
        print("\n".join(report.lines()))
        if not report.passed:
            failed = [c.name for c in report.checks if not c.passed]
            raise AssertionError(f"{task}: {len(failed)} check(s) failed: {', '.join(failed)}")
        # nothing returned: the last line of a cell would print it under the ✓ lines

    return check
