"""`make grade` checks what it needs before grading anything.

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
from tests.graded_class import A, notebook_with, place


def grade(root: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader", "grade", A, "--root", root, "--quiet", "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )


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
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "grade", "99_nope", "--root", course.root, "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown assignment '99_nope'" in proc.stderr
    assert not os.path.exists(os.path.join(course.root, "graded"))


@pytest.fixture
def graded_course(tmp_path, answers):
    """A course ready to grade: the assignment in the gradebook, ada's honest submission collected."""
    course = roundtrip.make_course(str(tmp_path / "course"), [A])
    roundtrip.nbgrader(["generate_assignment", A, "--force"], course.root, course.root)
    place(course, "ada", answers)
    return course


def submission(course, student: str) -> str:
    return os.path.join(course.root, "submitted", student, A)


def test_links_fifos_and_outside_hard_links_under_submitted_are_refused(graded_course, tmp_path):
    """What plain `nbgrader collect` lets through: bob's folder linked to ada's (he would get her grade), an
    extra file of chloe's linked to /etc/shadow (it would be copied into feedback/), dan's FIFO, eve's hard link
    to a file outside her submission. One line names each; nothing is graded, moved or written."""
    course = graded_course
    os.makedirs(os.path.join(course.root, "submitted", "bob"))
    os.symlink(submission(course, "ada"), submission(course, "bob"))
    for student in ("chloe", "dan", "eve"):
        place(course, student, "{}")
    os.symlink("/etc/shadow", os.path.join(submission(course, "chloe"), "notes.txt"))
    os.mkfifo(os.path.join(submission(course, "dan"), "pipe"))
    outside = tmp_path / "outside.txt"
    outside.write_text("not eve's")
    os.link(outside, os.path.join(submission(course, "eve"), "data.txt"))
    line = refused(
        course.root,
        "submitted holds what grading must not read",
        f"bob/{A} is a symbolic link",
        f"chloe/{A}/notes.txt is a symbolic link (to /etc/shadow)",
        f"dan/{A}/pipe is a FIFO",
        f"eve/{A}/data.txt is a hard link to a file outside its submission",
        "make collect",
    )
    assert os.readlink(os.path.join(submission(course, "chloe"), "notes.txt")) == "/etc/shadow", line
    assert os.readlink(submission(course, "bob")) == submission(course, "ada")
    assert not os.path.exists(os.path.join(course.root, "autograded"))


def test_hard_links_inside_one_submission_are_fine():
    """Two names of one file in the same submission take nothing from anyone: not refused."""
    from grader.gradebook.submitted_files import problems

    import tempfile

    with tempfile.TemporaryDirectory() as base:
        folder = os.path.join(base, "ada", A)
        os.makedirs(folder)
        with open(os.path.join(folder, "a.txt"), "w") as f:
            f.write("x")
        os.link(os.path.join(folder, "a.txt"), os.path.join(folder, "b.txt"))
        assert problems(base) == []
        os.makedirs(os.path.join(base, "bob", A))
        os.link(os.path.join(folder, "a.txt"), os.path.join(base, "bob", A, "c.txt"))
        assert len(problems(base)) == 3, problems(base)  # every name of it, in both submissions


def test_a_symlinked_notebook_is_named_in_one_short_line(graded_course):
    course = graded_course
    os.makedirs(submission(course, "bob"))
    solution = os.path.join(course.root, "solutions", A, f"{A}.ipynb")
    os.symlink(solution, os.path.join(submission(course, "bob"), f"{A}.ipynb"))
    line = refused(course.root, f"bob/{A}/{A}.ipynb is a symbolic link (to {solution})")
    assert len(line) < 600, line


def test_a_sparse_file_of_gibs_is_refused_before_it_is_read(graded_course):
    """3 GiB of apparent size and no blocks on disk: refused by its size, never copied."""
    course = graded_course
    big = os.path.join(submission(course, "ada"), "weights.bin")
    with open(big, "wb") as f:
        f.truncate(3 << 30)
    refused(course.root, f"ada/{A} holds 3.0 GiB of files", f"ada/{A}/weights.bin: 3.0 GiB", "100.0 MiB")
    assert os.stat(big).st_blocks * 512 < 1 << 20  # still sparse: nothing was written into it


def test_a_missing_notebooks_error_names_it_once():
    """With no plain notebook to grade (path None) the error names the notebook once, not the path between
    every character (str.replace with an empty old string)."""
    from grader.gradebook.grade_job import grade_one

    shown_as = f"/course/submitted/bob/{A}/{A}.ipynb"
    result = grade_one(A, "bob", None, 5.0, 2, "v", shown_as, "public")
    assert result["error"] == f"no notebook named {A}.ipynb was submitted", result["error"][:300]
    assert not result["readable"]
