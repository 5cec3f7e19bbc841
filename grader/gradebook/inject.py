"""Our results into nbgrader: autograded notebooks, feedback, gradebook scores.

nbgrader's autograde is kept, with one preprocessor swapped: instead of
executing the student's notebook in a kernel (serial, and open to whatever the
student's code does there), InjectCheckResults writes into each check cell the
✓/✗ lines and the points our out-of-kernel run gave that task (a numeric
result is nbgrader's partial credit), from the results the grading run holds
in memory. nbgrader then saves the grades and its late penalty;
StripCheckPoints then drops that number, so the autograded notebook and the
feedback show the ✓/✗ lines only, and nbgrader copies the notebook to
autograded/ as usual. nbgrader reads the submissions from a private folder
holding only what the grading run read before any grading (each notebook and
its timestamp.txt, from batch.py's snapshot), never submitted/ itself: there
it would copy every extra file of a submission into autograded/, following
links, whatever was swapped in after the checks. Last, every task's score is written into the gradebook
directly from our results (so a student who deleted or retyped a check cell,
or sent a notebook nbgrader cannot read, is still scored, and only by the
authoritative run), the late penalty is recomputed from that score with
the course's configured nbgrader plugin (c.AssignLatePenalties.plugin_class,
through its public late_submission_penalty), and flagged submissions get the
formgrader's flag.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings

# nbformat validates with jsonschema, which imports rfc3987_syntax when it is installed (jupyter-events asks for
# it); that builds ~40 Lark parsers at import (2.3 s of every `make grade` here) for the "iri" format, which no
# notebook schema uses (python-jsonschema/jsonschema#1428). Marked absent, jsonschema leaves "iri" unchecked.
sys.modules.setdefault("rfc3987_syntax", None)
import jsonschema  # noqa: E402
import nbformat  # noqa: E402
from nbconvert.exporters import NotebookExporter
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from nbgrader.nbgraderformat import common as nbgrader_format
from nbgrader.plugins import BasePlugin
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    IgnorePattern,
    LimitOutput,
    NbGraderPreprocessor,
    SaveAutoGrades,
)
from traitlets import Dict

from grader import cells
from grader.checks import CheckResult
from grader.gradebook.course import Course
from grader.gradebook.feedback import StripCheckPoints


class _SchemaCheckedOnce:
    """jsonschema as nbgrader's cell-metadata validator uses it (nbgraderformat/common.py: jsonschema.validate per
    cell). jsonschema.validate checks the schema itself against its metaschema on every call: 4.7 of a 20-submission
    gradebook write's 24.6 s here. nbgrader's schema is a constant of the installed nbgrader, so it is checked once
    and each cell is validated by a validator built once: the same error (best_match), raised the same way."""

    def __init__(self):
        self._validators: dict[str, object] = {}

    def __getattr__(self, name):
        return getattr(jsonschema, name)

    def validate(self, instance, schema, cls=None, *args, **kwargs):
        if cls is not None or args or kwargs:
            return jsonschema.validate(instance, schema, cls, *args, **kwargs)
        key = json.dumps(schema, sort_keys=True, default=repr)
        validator = self._validators.get(key)
        if validator is None:
            kind = jsonschema.validators.validator_for(schema)
            kind.check_schema(schema)
            validator = self._validators[key] = kind(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            raise error


nbgrader_format.jsonschema = _SchemaCheckedOnce()


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

    results = Dict(help="student -> result of `python -m grader grade` (never re-read from a file)").tag(config=True)

    def preprocess(self, nb, resources):
        result = self.results[resources["nbgrader"]["student"]]
        checks = (result.get("report") or {}).get("checks", [])
        for task, cell in cells.check_cells(nb.cells).items():
            mine = [c for c in checks if c["task"] == task]
            points = sum(c["points"] for c in mine)
            cell.outputs = [
                nbformat.v4.new_output("stream", name="stdout", text="\n".join(task_lines(mine)) + "\n"),
                nbformat.v4.new_output("execute_result", data={"text/plain": f"{points:g}"}, execution_count=1),
            ]
        return nb, resources


def autograde_config(course: Course, assignment: str, results: dict[str, dict]):
    config = course.config
    config.Autograde.exporter_class = NotebookExporter  # the course's config refuses nbgrader's own autograde
    config.Autograde.autograde_preprocessors = [
        InjectCheckResults,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        StripCheckPoints,
        CheckCellMetadata,
    ]
    config.InjectCheckResults.results = results
    config.Exporter.optimistic_validation = True  # nbconvert validates once, after the last preprocessor
    return config


def write_results(course: Course, assignment: str, results: dict[str, dict]) -> dict[str, str]:
    """Two `make grade` runs at once on one gradebook write one after the other (a lock file in the
    course directory): nbgrader creates each submission's rows with a check-then-insert."""
    import fcntl

    with open(os.path.join(course.root, ".gradebook.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _write_results(course, assignment, results)


def private_submissions(folder: str, assignment: str, submitted: dict[str, dict[str, bytes | None]]) -> str:
    """nbgrader's submitted/ layout under `folder` (private to the grading user), holding for each student only
    what the grading run read before any grading (the notebook, timestamp.txt), never an extra file; returns it."""
    base = os.path.join(folder, "submitted")
    for student, files in submitted.items():
        into = os.path.join(base, student, assignment)
        os.makedirs(into)
        for name, data in files.items():
            if data is not None:
                with open(os.path.join(into, name), "xb") as f:
                    f.write(data)
    return base


def _write_results(course: Course, assignment: str, results: dict[str, dict]) -> dict[str, str]:
    """Autograde (our way) and score every student; returns student -> nbgrader's log on failure. nbgrader's
    autograde reads the private copies `results.submitted` holds (batch.GradedClass), not submitted/: it would
    copy every extra file there into autograded/, following links."""
    config = autograde_config(course, assignment, results)
    problems = {}
    with tempfile.TemporaryDirectory(prefix="grader_autograde_") as private:
        config.CourseDirectory.submitted_directory = private_submissions(
            private, assignment, getattr(results, "submitted", {})
        )  # an absolute folder: nbgrader joins it to the course's root as is
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        for student, result in results.items():
            if result.get("report") is None:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes inside nbgrader's API
                outcome = (
                    api.autograde(assignment, student, force=True, create=True)
                    if result.get("readable")
                    else {"success": False, "log": result.get("error", "")}
                )
            if not outcome["success"]:
                problems[student] = (outcome.get("error") or outcome.get("log") or "").strip().splitlines()[-1:]
    late = AssignLatePenalties(config=config)  # read for its configured plugin_class only
    plugin = late.plugin_class(parent=late)
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
                    grade = gb.find_grade(task + cells.CHECK, assignment, assignment, student)
                except MissingEntry:
                    continue
                grade.auto_score = points
                grade.needs_manual_grade = False
            gb.db.commit()
            _late_penalty_and_flag(gb, plugin, assignment, student, bool(result.get("flags")))
    return {s: " ".join(p) for s, p in problems.items()}


def late_penalty(plugin: BasePlugin, student: str, score: float, seconds_late: float) -> float | None:
    """The plugin's penalty for a submission `seconds_late` late (None: on time, or no penalty), held
    between 0 and the score as nbgrader's autograde holds it: a penalty never adds points, never goes below 0."""
    if seconds_late <= 0:
        return None
    penalty = plugin.late_submission_penalty(student, score, seconds_late)
    return None if penalty is None else min(max(penalty, 0), score)


def _late_penalty_and_flag(gb: Gradebook, plugin: BasePlugin, assignment: str, student: str, flagged: bool) -> None:
    """The late penalty, from the score now in the gradebook; the formgrader's "Flagged?" set when the run
    flagged the submission (never cleared: a human may have set it)."""
    try:
        notebook = gb.find_submission_notebook(assignment, assignment, student)
    except MissingEntry:
        return  # nothing nbgrader could read: no notebook to score or flag
    gb.db.refresh(notebook)
    seconds_late = gb.find_submission(assignment, student).total_seconds_late
    notebook.late_submission_penalty = late_penalty(plugin, student, notebook.score, seconds_late)
    if flagged:
        notebook.flagged = True
    gb.db.commit()


def gradebook_scores(course: Course, assignment: str) -> dict[str, tuple[float, float]]:
    """student -> (score, max score), as nbgrader's gradebook (and formgrader) has them."""
    with Gradebook(course.db_url) as gb:
        return {s.student.id: (s.score, s.max_score) for s in gb.find_assignment(assignment).submissions}


def gradebook_marks(course: Course, assignment: str) -> dict[str, dict]:
    """student -> {score, late_penalty, flagged}: the formgrader's columns."""
    with Gradebook(course.db_url) as gb:
        return {
            s.student.id: {
                "score": s.score,
                "late_penalty": s.late_submission_penalty,
                "flagged": any(n.flagged for n in s.notebooks),
            }
            for s in gb.find_assignment(assignment).submissions
        }
