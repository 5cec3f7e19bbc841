"""python -m grader selfcheck: does the grader grade right on THIS machine's hardware?

    python -m grader selfcheck [--exercise ID ...]      (or: make selfcheck)

Run it once on a new GPU server before a course starts (CI runs it on CPU).
It prints the hardware plan for each world size the checks use, then grades,
on the hardware present, every exercise's solution (expected: full marks) and
known-wrong submissions (the untouched student release, expected: 0; and a
typical mistake, expected: less than full marks), each score next to the
expected one. Exit 0 only when every score is as expected.
"""
from __future__ import annotations

import os
import sys
import tempfile

from grader.engine.plan import current_plan, visible_gpus
from grader.exercises import exercise_ids, get_exercise
from grader.runner import run_checks
from grader.submission import read_notebook, read_python_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A typical mistake per exercise: (anchor in the solution's answers, replacement).
KNOWN_MISTAKES = {
    "02_ddp_basics": ("loader.sampler.set_epoch(epoch)", "pass  # no set_epoch"),
}


def _release(exercise_id: str) -> str:
    return os.path.join(ROOT, "exercises", exercise_id, f"{exercise_id}.ipynb")


def _grade_source(exercise, source: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mistake.py")
        with open(path, "w") as f:
            f.write(source)
        return run_checks(exercise, read_python_file(path))


def cases(exercise_id: str):
    """(label, expectation, grade()) for one exercise; expectation: 'full', 'zero' or 'less'."""
    exercise = get_exercise(exercise_id)
    solution = os.path.join(ROOT, exercise.notebook)
    yield "solution", "full", lambda: run_checks(exercise, read_notebook(solution))
    if os.path.isfile(_release(exercise_id)):
        yield "untouched release", "zero", lambda: run_checks(exercise, read_notebook(_release(exercise_id)))
    if exercise_id in KNOWN_MISTAKES:
        old, new = KNOWN_MISTAKES[exercise_id]
        source = "\n\n".join(c.source for c in read_notebook(solution).cells)
        if old in source:
            yield f"mistake: {old} left out", "less", lambda: _grade_source(exercise, source.replace(old, new, 1))


def as_expected(expectation: str, score: float, max_score: float) -> bool:
    return {"full": score == max_score, "zero": score == 0, "less": score < max_score}[expectation]


def main(exercises: list[str] | None = None) -> int:
    gpus = visible_gpus()
    print(f"GPUs visible to the grader: {gpus}")
    for world_size in (1, 2, 3):
        print(f"  world size {world_size}: {current_plan(world_size).describe()}")
    wrong = 0
    for exercise_id in exercises or exercise_ids():
        for label, expectation, grade in cases(exercise_id):
            report = grade()
            ok = as_expected(expectation, report.score, report.max_score)
            wrong += not ok
            expected = {"full": f"{report.max_score:g}", "zero": "0", "less": f"< {report.max_score:g}"}[expectation]
            print(f"{'ok ' if ok else 'BAD'} {exercise_id:<20} {label:<40} {report.score:g}/{report.max_score:g}"
                  f"  (expected {expected})", flush=True)
            if not ok and expectation == "full":
                print("\n".join("      " + line for line in report.lines() if not line.startswith("✓")))
            skipped = [c for c in report.checks if c.skipped]
            for c in skipped:
                print(f"      {c.name}: {'; '.join(c.notes) or c.message.splitlines()[0]}")
    print("selfcheck: " + ("every score as expected" if not wrong else f"{wrong} score(s) NOT as expected"))
    return 0 if not wrong else 1


def register(sub) -> None:
    parser = sub.add_parser("selfcheck", help="grade the solutions and known-wrong submissions on this hardware",
                            description=__doc__.split("\n\n")[2])
    parser.add_argument("--exercise", action="append", choices=exercise_ids(), default=None,
                        help="only this exercise (repeatable)")
    parser.set_defaults(func=lambda args: main(args.exercise))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or None))
