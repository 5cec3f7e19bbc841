"""A class of exercise 02 graded as an instructor grades it: the course, its submissions as nbgrader's collect
leaves them, `python -m grader grade` run over it, and what hostile students place in their answers (an attack
from tests/hostile/ run by pick_device, a forged full-marks result).

Shared by the tests that grade whole classes (the gradebook, sandbox, nursery, hostile-class and limits tests).
"""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys

from grader.code_digest import grader_digest
from grader.exercises import get_exercise
from grader.gradebook import roundtrip
from grader.gradebook.course import Course
from tests.helpers import ROOT

A = "02_ddp_basics"
HOSTILE = os.path.join(ROOT, "tests", "hostile")


def notebook_with(answers: dict[str, str], edit=None) -> dict:
    """The released notebook with these answer cells (grade_id -> source); edit(nb) changes it further."""
    with open(os.path.join(ROOT, "exercises", A, f"{A}.ipynb")) as f:
        nb = json.load(f)
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = answers[grade_id]
    if edit:
        edit(nb)
    return nb


def place(course, student, content) -> str:
    """A submission as nbgrader's collect leaves it."""
    folder = os.path.join(course.root, "submitted", student, A)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "timestamp.txt"), "w") as f:
        f.write("2026-11-29 12:00:00.000000 UTC")
    path = os.path.join(folder, f"{A}.ipynb")
    with open(path, "w") as f:
        f.write(content if isinstance(content, str) else json.dumps(content))
    return path


def generated_course(root: str) -> Course:
    """A course at root with exercise 02 generated (nbgrader's generate_assignment), ready for submissions."""
    course = roundtrip.make_course(root, [A])
    roundtrip.nbgrader(["generate_assignment", A, "--force"], course.root, course.root)
    return course


def grade_args(root: str, *extra: str, jobs: int = 2, python: str = sys.executable) -> list[str]:
    """`make grade`'s command for exercise 02 of the course at root, quiet, 20 s per run."""
    return [
        python,
        "-m",
        "grader",
        "grade",
        A,
        "--root",
        root,
        "--jobs",
        str(jobs),
        "--timeout",
        "20",
        "--quiet",
        *extra,
    ]


def run_grade(
    root: str, *extra: str, jobs: int = 2, env: dict | None = None, timeout: float = 1100
) -> subprocess.CompletedProcess:
    """grade_args run from the repository, its output captured."""
    return subprocess.run(
        grade_args(root, *extra, jobs=jobs),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or os.environ,
        cwd=ROOT,
    )


def full_marks_checks(exercise_id: str = A) -> list[dict]:
    """Every check of the exercise passed with all its points, as a result file lists them."""
    return [
        {
            "name": c.name,
            "task": c.task,
            "passed": True,
            "points": c.points,
            "max_points": c.points,
            "message": "",
            "hidden": c.hidden,
            "notes": [],
        }
        for c in get_exercise(exercise_id).checks
    ]


def forged_result(student: str) -> str:
    """A full-marks result for `student`, with the grader's digest and a made-up seal; the attack puts its
    submission's sha256 in place of SHA."""
    score = get_exercise(A).max_score
    return json.dumps(
        {
            "student": student,
            "assignment": A,
            "grader": grader_digest(A),
            "sha256": "SHA",
            "readable": True,
            "error": None,
            "sandboxed": True,
            "seal": "0" * 64,
            "report": {"exercise": A, "score": score, "max_score": score, "checks": full_marks_checks()},
        }
    )


def pick_device_attack(name: str, values: dict) -> str:
    """pick_device's answer running tests/hostile/NAME.py's attack (or tests/hostile/limits/NAME.py's), its
    $placeholders filled from values, in every rank of that task's checks; it then raises with what it got
    ('ATTACK NAME: GOT ...' or 'ATTACK NAME: refused: ...'), so the attempt shows in its own check message."""
    path = os.path.join(HOSTILE, f"{name}.py")
    with open(path if os.path.exists(path) else os.path.join(HOSTILE, "limits", f"{name}.py")) as f:
        attack = string.Template(f.read()).substitute(values, me=name)
    return (
        f"{attack}\n\ndef pick_device(local_rank: int) -> torch.device:\n"
        f"    try:\n        _outcome = 'GOT: ' + repr(_attack())[:1500]\n"
        f"    except BaseException as _exc:\n        _outcome = f'refused: {{type(_exc).__name__}}: {{_exc}}'\n"
        f"    raise RuntimeError(f'ATTACK {name}: {{_outcome}}')\n"
    )


def attacker_notebook(name: str, course, planted: int = 0) -> dict:
    """A submission answering only pick_device, with `name`'s attack, for an attack that needs no more than the
    course's root (no grader path, home, victim or listening port: those are the hostile class's own) and the serial
    of a kernel key the grading account planted (kernel_keys)."""
    values = {"course": course.root, "repo": ROOT, "grader": "", "home": "", "port": 1, "planted": planted}
    return notebook_with(
        {"pick_device_answer": pick_device_attack(name, dict(values, forged=repr(forged_result(name))))}
    )
