"""What a grading run needs, checked before anything is graded or written.

In the order an instructor does the steps (the README's order):
1. the course directory, with its nbgrader_config.py;
2. the assignment in the gradebook (`nbgrader generate_assignment`, or `make exercises`);
3. submissions in submitted/<student>/<assignment>/ (`nbgrader collect`), as plain files and folders of a
   bounded size (submitted_files.py: no link, FIFO or device, no sparse file of GiBs). A submission holding
   anything else is refused alone, before anything of it is read: the rest of the class is graded.

The assignment is not created on the fly from the source notebook: the
gradebook must describe the notebook the students were given, which only
generate_assignment (that also wrote the release) knows. Each missing piece is
one line saying what to do; nothing is written (not even an empty gradebook).
"""

from __future__ import annotations

import os
import warnings

from grader.exercises import exercise_ids, get_exercise
from grader.exercises.instructor import MARKER, is_student_build
from grader.engine.private_folders import UnsafeFolder
from grader.gradebook.course import Course
from grader.gradebook.results import results_key
from grader.gradebook.submitted_files import NotAFolder, refused_submissions


class NotReady(Exception):
    """A step before grading is missing: str() is the one line saying which and what to do."""


def check_ready(course: Course, assignment: str) -> tuple[dict[str, str], dict[str, str]]:
    """Raises NotReady, or returns (student -> submitted notebook, for the submissions that may be read;
    student -> the one line saying why nothing of theirs may be read)."""
    root = course.root
    if is_student_build():
        raise NotReady(
            f"this grader is a student build ({MARKER} exists): it has no hidden checks, so its grades "
            "would be wrong; grade with the instructor's install of the course"
        )
    if not os.path.isdir(root):
        raise NotReady(f"no course directory {root}: pass the course with --root (make grade COURSE=DIR)")
    if not os.path.isfile(os.path.join(root, "nbgrader_config.py")):
        raise NotReady(
            f"{root} has no nbgrader_config.py, so it is not an nbgrader course directory: pass the "
            f"course with --root (make grade COURSE=DIR)"
        )
    if assignment not in exercise_ids():
        raise NotReady(f"unknown assignment {assignment!r}: the grader knows {', '.join(exercise_ids())}")
    get_exercise(assignment)  # a check module that fails to import raises here, with its traceback, before any grading
    if not _in_gradebook(course.db_url, assignment):
        raise NotReady(
            f"{assignment} is not in the gradebook ({_shown(course.db_url)}): run "
            f"`nbgrader generate_assignment {assignment}` (make exercises) in {root} first"
        )
    try:
        results_key()  # the seal of graded/ (results.py): created now, or refused if others could read it
    except UnsafeFolder as exc:
        raise NotReady(f"{exc}; the grading user's state folder must be private to it") from None
    try:  # before anything there is read or followed
        refused = refused_submissions(os.path.join(root, "submitted"), assignment)
    except NotAFolder as exc:
        raise NotReady(str(exc)) from None
    submissions = {s: path for s, path in course.submitted(assignment).items() if s not in refused}
    if not submissions and not refused:
        raise NotReady(
            f"no submissions of {assignment} in {os.path.join(root, 'submitted')}/<student>/"
            f"{assignment}/: run `nbgrader collect {assignment}` in {root} first"
        )
    return submissions, refused


def _in_gradebook(db_url: str, assignment: str) -> bool:
    if db_url.startswith("sqlite:///") and not os.path.isfile(db_url[len("sqlite:///") :]):
        return False  # opening it would create an empty gradebook
    from nbgrader.api import Gradebook, MissingEntry

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Gradebook(db_url) as gb:
            try:
                gb.find_assignment(assignment)
            except MissingEntry:
                return False
    return True


def _shown(db_url: str) -> str:
    """The URL without a password."""
    if "@" in db_url and "://" in db_url:
        scheme, rest = db_url.split("://", 1)
        return f"{scheme}://…@{rest.split('@', 1)[1]}"
    return db_url
