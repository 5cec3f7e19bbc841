"""Grading the started tasks of each saved notebook (visible checks, one runner), with the cache."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field

from grader.code_digest import grader_digest
from grader.exercises import exercise_ids, get_exercise
from grader.notebook.hints import hints_used
from grader.i18n import _
from grader.progress.cache import load_cache, save_cache
from grader.progress.find import answer_cells, candidates, pick_notebook
from grader import cells


@dataclass
class TaskProgress:
    task: str
    status: str  # pass | fail | todo
    passed_checks: int = 0
    checks: int = 0
    points: float = 0
    max_points: float = 0
    hints: int = 0  # hints this user revealed for the task (grader/notebook/hints.py), read fresh, never cached


@dataclass
class AssignmentProgress:
    assignment: str
    notebook: str | None  # None: no notebook found
    tasks: list[TaskProgress] = field(default_factory=list)
    problem: str = ""  # the notebook could not be read or graded
    cached: bool = False

    @property
    def passed(self) -> int:
        return sum(t.status == "pass" for t in self.tasks)

    @property
    def points(self) -> float:
        return sum(t.points for t in self.tasks)

    @property
    def max_points(self) -> float:
        return sum(t.max_points for t in self.tasks)

    @property
    def started(self) -> bool:
        return any(t.status != "todo" for t in self.tasks)


def assignment_progress(
    assignment: str, path: str | None, cache: dict | None = None, timeout: float = 30.0, world_size: int = 2
) -> AssignmentProgress:
    """Grade the visible checks of the started tasks of one saved notebook."""
    from grader.runner import SIDE_BY_SIDE, run_checks  # heavy (torch): only when something is graded
    from grader.submission import SubmissionError, read_notebook

    exercise = get_exercise(assignment)
    progress = AssignmentProgress(assignment, path)
    if path is None:
        return progress
    try:
        answers = answer_cells(path)
        submission = read_notebook(path)
    except (OSError, ValueError, SubmissionError) as exc:
        progress.problem = _("cannot read the notebook: {error}", error=exc)
        return progress
    started = [t for t in exercise.tasks if t in answers and not cells.untouched(answers[t])]
    key = hashlib.sha256(
        json.dumps(
            [assignment, grader_digest(assignment), world_size, [c.source for c in submission.cells], started]
        ).encode()
    ).hexdigest()
    if cache is not None and key in cache:
        progress.tasks = [TaskProgress(**t) for t in cache[key]["tasks"]]
        progress.cached = True
        return _with_hints(progress)
    results = (
        run_checks(
            exercise,
            submission,
            tasks=started,
            hidden=False,
            world_size=world_size,
            timeout=timeout,
            side_by_side=SIDE_BY_SIDE,
        ).checks
        if started
        else []
    )
    for task in exercise.tasks:
        mine = [r for r in results if r.task == task]
        visible = exercise.checks_for(task, hidden=False)
        max_points = sum(c.points for c in visible)
        if task not in started:
            progress.tasks.append(TaskProgress(task, "todo", 0, len(visible), 0, max_points))
        else:
            ok = sum(r.passed for r in mine)
            progress.tasks.append(
                TaskProgress(
                    task, "pass" if ok == len(mine) else "fail", ok, len(mine), sum(r.points for r in mine), max_points
                )
            )
    if cache is not None:
        cache[key] = {"at": time.time(), "tasks": [asdict(t) for t in progress.tasks]}
    return _with_hints(progress)


def _with_hints(progress: AssignmentProgress) -> AssignmentProgress:
    used = hints_used(progress.assignment)
    for t in progress.tasks:
        t.hints = used.get(t.task, 0)
    return progress


def course_progress(
    root: str, assignments: list[str] | None = None, use_cache: bool = True, timeout: float = 30.0, on_assignment=None
) -> list[AssignmentProgress]:
    cache = load_cache() if use_cache else None
    rows = []
    for assignment in assignments or exercise_ids():
        rows.append(assignment_progress(assignment, pick_notebook(candidates(root, assignment)), cache, timeout))
        if on_assignment:
            on_assignment(rows[-1])
        if cache is not None:
            save_cache(cache)  # after each: an interrupted overview keeps what it graded
    return rows
