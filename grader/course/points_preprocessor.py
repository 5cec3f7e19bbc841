"""nbgrader refuses to generate an exercise whose check cells' points disagree with its checks.

`make exercises` stamps the points before it generates (grader/course/points.py); an instructor who runs
`nbgrader generate_assignment` or presses Generate in the formgrader after changing a check would
otherwise put stale points into the gradebook and the release. nbgrader_config.py puts this first in
GenerateAssignment's preprocessors; a notebook that is not one of the course's exercises passes as it is.
"""

from __future__ import annotations

import copy

from nbgrader.preprocessors import NbGraderPreprocessor

from grader.exercises import exercise_ids, get_exercise
from grader.course.points import set_points


class StalePoints(Exception):
    """The check cells' points are not the checks' points: the message names each cell."""


class RefuseStalePoints(NbGraderPreprocessor):  # (nbconvert's base class is disabled by default)
    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        assignment, notebook = info.get("assignment"), info.get("notebook")
        if assignment not in exercise_ids():
            return nb, resources
        exercise = get_exercise(assignment)
        if notebook != exercise.notebook.rsplit("/", 1)[-1].removesuffix(".ipynb"):
            return nb, resources
        changes = set_points(exercise, copy.deepcopy(nb.cells))
        if changes:
            raise StalePoints(
                f"{assignment}/{notebook}.ipynb: the check cells' points disagree with the checks: "
                + "; ".join(changes)
                + ". Run `python -m grader points` (or `make exercises`), "
                "then generate again."
            )
        return nb, resources
