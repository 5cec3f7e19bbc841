"""`make grade` checks what it needs before grading anything (issue 17).

Each missing step (the course directory and its nbgrader_config.py, the
assignment in the gradebook, submissions in submitted/) is one clear line on
stderr and exit status 2, and nothing is written: no graded/, no gradebook.
"""
import os
import subprocess
import sys

import pytest

from grader.gradebook import roundtrip
from samples.make_samples import solution_answers
from tests.test_instructor_workflow import A, notebook_with, place


def grade(root: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "grade", A, "--root", root, "--quiet", "--jobs", "1"],
                          capture_output=True, text=True, timeout=300)


def tree(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files}


def refused(root: str, *expected: str) -> str:
    before = tree(root) if os.path.isdir(root) else None
    proc = grade(root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    assert proc.stdout == ""
    for text in expected:
        assert text in lines[0], lines[0]
    assert (tree(root) if os.path.isdir(root) else None) == before, "something was written"
    return lines[0]


@pytest.fixture(scope="module")
def answers():
    return notebook_with(solution_answers())


def test_no_course_directory(tmp_path):
    refused(str(tmp_path / "nowhere"), "no course directory", "--root")


def test_no_nbgrader_config(tmp_path, answers):
    place(roundtrip.Course(str(tmp_path)), "ada", answers)
    refused(str(tmp_path), "no nbgrader_config.py", "not an nbgrader course directory")


def test_assignment_not_in_the_gradebook(tmp_path, answers):
    course = roundtrip.make_course(str(tmp_path), [A])
    place(course, "ada", answers)
    line = refused(course.root, f"{A} is not in the gradebook", f"nbgrader generate_assignment {A}")
    assert not os.path.exists(os.path.join(course.root, "gradebook.db")), line


def test_assignment_missing_from_an_existing_gradebook(tmp_path, answers):
    course = roundtrip.make_course(str(tmp_path), [A])
    roundtrip.nbgrader(["db", "student", "add", "ada"], course.root, course.root)  # a gradebook, without A
    place(course, "ada", answers)
    refused(course.root, f"{A} is not in the gradebook", "make exercises")


def test_no_submissions(tmp_path):
    course = roundtrip.make_course(str(tmp_path), [A])
    roundtrip.nbgrader(["generate_assignment", A, "--force"], course.root, course.root)
    refused(course.root, f"no submissions of {A}", f"nbgrader collect {A}")


def test_unknown_assignment(tmp_path):
    course = roundtrip.make_course(str(tmp_path), [A])
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", "99_nope", "--root", course.root, "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown assignment '99_nope'" in proc.stderr
    assert not os.path.exists(os.path.join(course.root, "graded"))
