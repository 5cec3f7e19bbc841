"""Our results into nbgrader: autograded notebooks, feedback, gradebook scores.

nbgrader's autograde is kept, with one preprocessor swapped: instead of
executing the student's notebook in a kernel (serial, and open to whatever the
student's code does there), InjectCheckResults writes into each check cell the
✓/✗ lines and the points our out-of-kernel run gave that task (a numeric
result is nbgrader's partial credit). nbgrader then saves the grades, copies
the notebook to autograded/ and builds feedback as usual. Last, every task's
score is written into the gradebook directly from our results, so a student
who deleted or retyped a check cell, or sent a notebook nbgrader cannot read,
is still scored, and only by the authoritative run.
"""
from __future__ import annotations

import json
import os
import warnings

import nbformat
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, IgnorePattern, LimitOutput,
                                    NbGraderPreprocessor, SaveAutoGrades)
from traitlets import Unicode

from grader.checks import CheckResult
from grader.gradebook.course import Course


def task_lines(checks: list[dict]) -> list[str]:
    """The ✓/✗ lines of one task; a hidden check shows only its verdict."""
    lines = []
    for c in checks:
        if c.get("hidden"):
            mark = "✓" if c["passed"] else "✗"
            lines.append(f"{mark} hidden check of {c['task']} ({c['points']:g}/{c['max_points']:g})")
            continue
        lines += CheckResult(**c).lines()
    return lines


def task_scores(result: dict) -> dict[str, float]:
    scores: dict[str, float] = {}
    for c in (result.get("report") or {}).get("checks", []):
        scores[c["task"]] = scores.get(c["task"], 0) + c["points"]
    return scores


class InjectCheckResults(NbGraderPreprocessor):
    """Stands in for nbgrader's Execute: fills check cells from our results."""

    results_dir = Unicode("", help="Folder of <student>.json results written by `python -m grader grade`.").tag(
        config=True)

    def preprocess(self, nb, resources):
        student = resources["nbgrader"]["student"]
        with open(os.path.join(self.results_dir, f"{student}.json")) as f:
            result = json.load(f)
        checks = (result.get("report") or {}).get("checks", [])
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if cell.cell_type != "code" or not grade_id.endswith("_check"):
                continue
            mine = [c for c in checks if c["task"] == grade_id[: -len("_check")]]
            points = sum(c["points"] for c in mine)
            cell.outputs = [
                nbformat.v4.new_output("stream", name="stdout", text="\n".join(task_lines(mine)) + "\n"),
                nbformat.v4.new_output("execute_result", data={"text/plain": f"{points:g}"}, execution_count=1),
            ]
        return nb, resources


def autograde_config(course: Course, assignment: str):
    config = course.config
    config.Autograde.autograde_preprocessors = [InjectCheckResults, IgnorePattern, ClearMetadataPreprocessor,
                                                LimitOutput, SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
    config.InjectCheckResults.results_dir = course.results_dir(assignment)
    return config


def write_results(course: Course, assignment: str, results: dict[str, dict]) -> dict[str, str]:
    """Autograde (our way) and score every student; returns student -> nbgrader's log on failure."""
    config = autograde_config(course, assignment)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    problems = {}
    for student, result in results.items():
        if result.get("report") is None:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes inside nbgrader's API
            outcome = api.autograde(assignment, student, force=True, create=True) if result.get("readable") else \
                {"success": False, "log": result.get("error", "")}
        if not outcome["success"]:
            problems[student] = (outcome.get("error") or outcome.get("log") or "").strip().splitlines()[-1:]
    with Gradebook(course.db_url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes inside nbgrader's API
        for student, result in results.items():
            gb.update_or_create_student(student)
            try:
                gb.find_submission(assignment, student)
            except MissingEntry:
                gb.add_submission(assignment, student)
            for task, points in task_scores(result).items():
                try:
                    grade = gb.find_grade(f"{task}_check", assignment, assignment, student)
                except MissingEntry:
                    continue
                grade.auto_score = points
                grade.needs_manual_grade = False
            gb.db.commit()
    return {s: " ".join(p) for s, p in problems.items()}


def gradebook_scores(course: Course, assignment: str) -> dict[str, tuple[float, float]]:
    """student -> (score, max score), as nbgrader's gradebook (and formgrader) has them."""
    with Gradebook(course.db_url) as gb:
        return {s.student.id: (s.score, s.max_score) for s in gb.find_assignment(assignment).submissions}
