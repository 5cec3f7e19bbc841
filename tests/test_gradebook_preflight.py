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


def test_a_bad_file_refuses_its_submission_only(graded_course, tmp_path):
    """What plain `nbgrader collect` lets through: bob's folder linked to ada's (he would get her grade), an
    extra file of chloe's linked to /etc/shadow (it would be copied into feedback/), dan's FIFO, eve's hard link
    to a file outside her submission, fay's 3 GiB sparse file (no blocks on disk), gus's notebook linked to the
    solution. Each of those submissions is refused alone, flagged with one line naming what is wrong; ada is
    graded in full; nothing is followed, read, moved or copied."""
    course = graded_course
    os.makedirs(os.path.join(course.root, "submitted", "bob"))
    os.symlink(submission(course, "ada"), submission(course, "bob"))
    for student in ("chloe", "dan", "eve", "fay"):
        place(course, student, "{}")
    os.symlink("/etc/shadow", os.path.join(submission(course, "chloe"), "notes.txt"))
    os.mkfifo(os.path.join(submission(course, "dan"), "pipe"))
    outside = tmp_path / "outside.txt"
    outside.write_text("not eve's")
    os.link(outside, os.path.join(submission(course, "eve"), "data.txt"))
    big = os.path.join(submission(course, "fay"), "weights.bin")
    with open(big, "wb") as f:
        f.truncate(3 << 30)
    os.makedirs(submission(course, "gus"))
    solution = os.path.join(course.root, "solutions", A, f"{A}.ipynb")
    os.symlink(solution, os.path.join(submission(course, "gus"), f"{A}.ipynb"))
    proc = grade(course.root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert "44/44" in rows["ada"] and "FLAGGED" not in rows["ada"], proc.stdout
    expected = {
        "bob": f"bob/{A} is a symbolic link (to {submission(course, 'ada')})",
        "chloe": f"chloe/{A}/notes.txt is a symbolic link (to /etc/shadow)",
        "dan": f"dan/{A}/pipe is a FIFO",
        "eve": f"eve/{A}/data.txt is a hard link to a file outside its submission",
        "fay": f"fay/{A} holds 3.0 GiB of files (fay/{A}/weights.bin: 3.0 GiB)",
        "gus": f"gus/{A}/{A}.ipynb is a symbolic link (to {solution})",
    }
    for student, why in expected.items():
        assert f"FLAGGED: nothing of this submission was read: {why}" in rows[student], rows[student]
        assert "make collect" in rows[student] and rows[student].count("FLAGGED") == 1, rows[student]
        assert " 0/44" in rows[student], rows[student]
    assert os.readlink(os.path.join(submission(course, "chloe"), "notes.txt")) == "/etc/shadow"
    assert os.readlink(submission(course, "bob")) == submission(course, "ada")
    assert os.stat(big).st_blocks * 512 < 1 << 20  # still sparse: nothing was written into it
    assert sorted(os.listdir(os.path.join(course.root, "autograded"))) == ["ada"]
    assert sorted(os.listdir(os.path.join(course.root, "autograded", "ada", A))) == [f"{A}.ipynb", "timestamp.txt"]


def test_submitted_itself_a_link_refuses_the_class(graded_course, tmp_path):
    course = graded_course
    os.rename(os.path.join(course.root, "submitted"), tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", os.path.join(course.root, "submitted"))
    refused(course.root, "submitted is a symbolic link", "Nothing was graded")


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


def test_a_missing_notebooks_error_names_it_once():
    """With no plain notebook to grade (path None) the error names the notebook once, not the path between
    every character (str.replace with an empty old string)."""
    from grader.gradebook.grade_job import grade_one

    shown_as = f"/course/submitted/bob/{A}/{A}.ipynb"
    result = grade_one(A, "bob", None, 5.0, 2, "v", shown_as, "public")
    assert result["error"] == f"no notebook named {A}.ipynb was submitted", result["error"][:300]
    assert not result["readable"]
