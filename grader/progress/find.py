"""Finding the student's notebooks: the course folder, their copies, the one they work in."""

from __future__ import annotations

import glob
import os

from grader import cells
from grader.exercises import exercise_ids

INSTRUCTOR_DIRS = {
    "solutions",
    "source",
    "release",
    "submitted",
    "autograded",
    "feedback",
    ".nbgrader",
    ".ipynb_checkpoints",
}
GRADED_COPY = {"submitted", "autograded", "feedback"}  # nbgrader runs the notebook there: no overview


def candidates(root: str, assignment: str) -> list[str]:
    """The student's copies of an assignment's notebook under root (not the instructor's folders)."""
    nested = glob.glob(os.path.join(glob.escape(root), "*", assignment, f"{assignment}.ipynb"))
    found = [p for p in nested if os.path.basename(os.path.dirname(os.path.dirname(p))) not in INSTRUCTOR_DIRS]
    found += glob.glob(os.path.join(glob.escape(root), assignment, f"{assignment}.ipynb"))
    return sorted(found)


def find_root(start: str) -> str:
    """The course folder holding the student's notebooks, from wherever the kernel runs.

    The nearest folder up from `start` (at most two levels: a notebook sits in
    <root>/exercises/<id>/ or <root>/<course>/<id>/) with the course's
    nbgrader_config.py (a clone of the course), else the nearest one holding
    some assignment's notebook one level down (a folder of fetched
    assignments), else `start`.
    """
    start = os.path.abspath(start)
    chain = ([start] + list(_parents(start)))[:3]
    for folder in chain:
        if os.path.isfile(os.path.join(folder, "nbgrader_config.py")) and os.path.isdir(
            os.path.join(folder, "exercises")
        ):
            return folder
    for folder in chain:
        if any(candidates(folder, a) for a in exercise_ids()):
            return folder
    return start


def _parents(path: str):
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return
        yield parent
        path = parent


def pick_notebook(paths: list[str]) -> str | None:
    """The copy the student works in: the latest saved among those with a changed answer."""
    if not paths:
        return None
    started = [p for p in paths if _answers_changed(p)]
    return max(started or paths, key=os.path.getmtime)


# --- reading answers -----------------------------------------------------------------


def answer_cells(path: str) -> dict[str, dict]:
    return cells.answer_cells(cells.read_cells(path))


def _answers_changed(path: str) -> bool:
    try:
        return any(not cells.untouched(c) for c in answer_cells(path).values())
    except (OSError, ValueError):
        return False
