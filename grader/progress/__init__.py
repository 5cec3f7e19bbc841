"""Which tasks of which assignments pass, from the student's own saved notebooks.

    python -m grader progress [--root DIR] [--assignment ID] [--json] [--no-cache]

    from grader.progress import show_progress     # the cell at the top of each exercise
    show_progress()

For every assignment it finds the student's notebook (`exercises/<id>/<id>.ipynb`
in a clone of the course, or the copy fetched from the Assignments tab,
`<course>/<id>/<id>.ipynb`), runs the visible checks of every task whose answer
cell was changed (an untouched stub is "not started" and costs nothing), and
shows one compact row per assignment. Verdicts are cached by the answers' text
and the checks' code, so a second look is instant until something changes.
Hidden checks are not run: they are the instructor's.

Modules: find.py (the notebooks), grade.py (the visible checks of started tasks),
cache.py (verdicts by answers and grader digest), view.py (text and notebook views), submitted.py (when the student last submitted, from nbgrader's
cache).
"""

from grader.progress.find import candidates, find_root, pick_notebook
from grader.progress.grade import AssignmentProgress, TaskProgress, assignment_progress, course_progress
from grader.progress.view import register, show_progress

__all__ = [
    "show_progress",
    "course_progress",
    "assignment_progress",
    "candidates",
    "find_root",
    "pick_notebook",
    "AssignmentProgress",
    "TaskProgress",
    "register",
]
