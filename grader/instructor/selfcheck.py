"""python -m grader selfcheck: does the grader grade right on THIS machine's hardware?

    python -m grader selfcheck [--exercise ID ...] [--json PATH] [--no-make-grade]   (or: make selfcheck)

Run it once on a new GPU server before a course starts (CI runs it on CPU).
It prints the hardware plan for each world size the checks use, then grades,
on the hardware present, every exercise's solution (expected: full marks) and
known-wrong submissions (the untouched student release, expected: 0; and the
solution with the exercise's typical mistake, whose task is expected to score
less than its full marks), each score next to the
expected one. Then it grades each solution again through `make grade`'s own
path (a course, its sandboxes, nurseries when root) and compares the plan of
every run with the one expected for this hardware. Exit 0 only when every
score and plan is as expected. --json PATH also writes each graded case's
report there (tests/test_selfcheck.py reads them); --no-make-grade leaves
out the pass through make grade.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from grader import cells
from grader.engine.plan import current_plan, plan_for, visible_gpus, widest_job
from grader.exercises import exercise_ids, get_exercise
from grader.runner import run_checks
from grader.submission import read_notebook, read_python_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the course repository


def _release(exercise_id: str) -> str:
    return os.path.join(ROOT, "exercises", exercise_id, f"{exercise_id}.ipynb")


def _grade_source(exercise, source: str, task: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mistake.py")
        with open(path, "w") as f:
            f.write(source)
        return run_checks(exercise, read_python_file(path), task=task)


def cases(exercise_id: str):
    """(label, expectation, grade()) for one exercise; expectation: 'full', 'zero' or 'less'."""
    exercise = get_exercise(exercise_id)
    solution = os.path.join(ROOT, exercise.notebook)
    yield "solution", "full", lambda: run_checks(exercise, read_notebook(solution))
    if os.path.isfile(_release(exercise_id)):
        yield "untouched release", "zero", lambda: run_checks(exercise, read_notebook(_release(exercise_id)))
    source = "\n\n".join(c.source for c in read_notebook(solution).cells) if exercise.typical_mistakes else ""
    for old, new in exercise.typical_mistakes:
        task = mistaken_task(exercise, old)
        mistaken = source.replace(old, new, 1)
        # only the mistaken task's checks: its score below its full marks is the verdict
        yield (
            f"typical mistake in {task}",
            "less",
            lambda mistaken=mistaken, task=task: _grade_source(exercise, mistaken, task),
        )


def mistaken_task(exercise, line: str) -> str:
    """The task whose answer cell in the solution holds `line` (StaleMistake when none does)."""
    with open(os.path.join(ROOT, exercise.notebook), encoding="utf-8") as f:
        answers = cells.answer_cells(json.load(f)["cells"])
    holding = [task for task, cell in answers.items() if line in cells.source(cell)]
    if not holding:  # a stale anchor would grade the solution itself as the "mistake"
        raise StaleMistake(f"{exercise.id}'s typical mistake is no longer in its solution's answers: {line!r}")
    return holding[0]


class StaleMistake(ValueError):
    """One of an exercise's typical_mistakes names a line its solution no longer holds: fix the declaration."""


def as_expected(expectation: str, score: float, max_score: float) -> bool:
    return {"full": score == max_score, "zero": score == 0, "less": score < max_score}[expectation]


def main(exercises: list[str] | None = None, json_path: str | None = None, make_grade: bool = True) -> int:
    gpus = visible_gpus()
    print(f"GPUs visible to the grader: {gpus}")
    for world_size in (1, 2, 3):
        print(f"  world size {world_size}: {current_plan(world_size).describe()}")
    graded: list[dict] = []  # each case's label and report, for --json
    wrong = sum(_grade_cases(exercise_id, graded) for exercise_id in exercises or exercise_ids())
    if json_path:
        with open(json_path, "w") as f:
            json.dump(graded, f)
    for exercise_id in (exercises or exercise_ids()) if make_grade else ():
        wrong += not graded_as_make_grade_does(exercise_id)
    print("selfcheck: " + ("every score as expected" if not wrong else f"{wrong} score(s) NOT as expected"))
    return 0 if not wrong else 1


def _grade_cases(exercise_id: str, graded_out: list | None = None) -> int:
    """Grade one exercise's cases, a line each; returns how many were not as expected. Appends each case's
    {exercise, label, expectation, report} to graded_out."""
    if not get_exercise(exercise_id).typical_mistakes:
        print(
            f"--  {exercise_id:<20} no typical mistake to grade: "
            "append one to EXERCISE.typical_mistakes in a hidden_*.py module"
        )
    try:
        graded = list(cases(exercise_id))
    except StaleMistake as exc:
        print(f"BAD {exc}")
        return 1
    wrong = 0
    for label, expectation, grade in graded:
        report = grade()
        if graded_out is not None:
            graded_out.append(
                {"exercise": exercise_id, "label": label, "expectation": expectation, "report": report.to_json()}
            )
        ok = as_expected(expectation, report.score, report.max_score)
        wrong += not ok
        expected = {"full": f"{report.max_score:g}", "zero": "0", "less": f"< {report.max_score:g}"}[expectation]
        print(
            f"{'ok ' if ok else 'BAD'} {exercise_id:<20} {label:<40} {report.score:g}/{report.max_score:g}"
            f"  (expected {expected})",
            flush=True,
        )
        if not ok and expectation == "full":
            print("\n".join("      " + line for line in report.lines() if not line.startswith("✓")))
        for c in report.checks:
            if c.skipped:
                print(f"      {c.name}: {'; '.join(c.notes) or c.message.splitlines()[0]}")
    return wrong


def expected_plans(exercise_id: str, gpus: int) -> set[str]:
    """The plans a grading job's runs get on this hardware: its own GPUs (gpu_share.py), per world size."""
    sizes = {2} | {c.world_size or 2 for c in get_exercise(exercise_id).checks}
    width = widest_job(gpus, 2, max(sizes))
    return {plan_for(w, width).describe() for w in sizes | {1}}


def graded_as_make_grade_does(exercise_id: str) -> bool:
    """The solution, submitted to a course and graded by `python -m grader grade` (sandboxed, nurseries when
    root): full marks, and every run on a plan this hardware should give. Prints one line."""
    from grader.gradebook import roundtrip
    from grader.isolation import sandbox as sandboxes

    label = "solution, sandboxed (make grade)"
    if not sandboxes.available():
        print(f"BAD {exercise_id:<20} {label:<40} not run: bwrap is missing ({sandboxes.INSTALL_HINT})")
        return False
    root = tempfile.mkdtemp(prefix="selfcheck-course-")
    try:
        course = roundtrip.make_course(root, [exercise_id])
        roundtrip.release(course, exercise_id)
        notebook = roundtrip.fetch(course, exercise_id, "solution")
        shutil.copy(os.path.join(ROOT, get_exercise(exercise_id).notebook), notebook)
        roundtrip.submit(course, exercise_id, "solution")
        roundtrip.collect(course, exercise_id)
        done = subprocess.run(
            [sys.executable, "-m", "grader", "grade", exercise_id, "--root", root, "--quiet"],
            capture_output=True,
            text=True,
            timeout=3600,
            cwd=ROOT,
        )
        path = os.path.join(root, "graded", exercise_id, "solution.json")
        if done.returncode != 0 or not os.path.exists(path):
            why = (done.stderr.strip().splitlines() or ["no result"])[-1]
            print(f"BAD {exercise_id:<20} {label:<40} make grade exited {done.returncode}: {why}")
            return False
        with open(path) as f:
            result = json.load(f)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = result.get("report") or {}
    plans, expected = result.get("plans") or [], expected_plans(exercise_id, visible_gpus())
    ok = report.get("score") == report.get("max_score") and bool(plans) and set(plans) <= expected
    print(
        f"{'ok ' if ok else 'BAD'} {exercise_id:<20} {label:<40} {report.get('score', 0):g}/"
        f"{report.get('max_score', 0):g}  ran on: {'; '.join(plans) or 'nothing'}",
        flush=True,
    )
    if set(plans) - expected:
        print(f"      expected on this hardware: {'; '.join(sorted(expected))}")
    return ok


def register(sub) -> None:
    parser = sub.add_parser(
        "selfcheck",
        help="grade the solutions and known-wrong submissions on this hardware",
        description=__doc__.split("\n\n")[2],
    )
    parser.add_argument(
        "--exercise", action="append", choices=exercise_ids(), default=None, help="only this exercise (repeatable)"
    )
    parser.add_argument("--json", metavar="PATH", default=None, help="also write each graded case's report to PATH")
    parser.add_argument(
        "--no-make-grade",
        action="store_true",
        help="leave out the pass through make grade's sandbox (make test-exercise: a course copied under /tmp)",
    )
    parser.set_defaults(func=lambda args: main(args.exercise, args.json, not args.no_make_grade))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or None))
