"""`make lab` and `make grade` say in one line when other accounts of the machine can read the course (solutions/,
the gradebook, graded/) or the grader's hidden checks (grader/gradebook/course_access.py); a course that is the
instructor's alone (0700, or under a folder others cannot pass) gets no line about it. `make grade`'s own line is
shown by tests/test_grade_toctou.py (a 0755 course)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from grader.gradebook.course_access import warning
from tests.helpers import ROOT


@pytest.fixture
def where():
    """A folder every account may pass (pytest's own tmp_path is private to its user)."""
    folder = tempfile.mkdtemp(prefix="course-access-")
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _course(where: str, mode: int, above: int = 0o755) -> str:
    parent = tempfile.mkdtemp(dir=where)
    course = os.path.join(parent, "course")
    os.makedirs(os.path.join(course, "solutions"))
    os.chmod(course, mode)
    os.chmod(parent, above)
    return course


def _line(course: str) -> str:
    """What `make lab` runs, as it runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "grader.gradebook.course_access", course], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr
    return proc.stderr


def test_a_course_others_can_enter_is_named_in_one_line(where):
    course = _course(where, 0o755)
    said = _line(course)
    assert said.count("\n") == 1 and f"{course} (0755): solutions/" in said and f"chmod 700 {course}" in said, said


def test_a_private_course_is_not_named(where):
    for mode, above in ((0o700, 0o755), (0o755, 0o700)):  # the course itself, or a folder above it
        course = _course(where, mode, above)
        assert course not in (warning(course) or ""), warning(course)
        assert course not in _line(course)


def test_make_lab_runs_the_check_on_its_course():
    dry = subprocess.run(["make", "-n", "-C", ROOT, "lab"], capture_output=True, text=True, timeout=300)
    assert f"python -m grader.gradebook.course_access {ROOT}" in dry.stdout, dry.stdout[-3000:]
