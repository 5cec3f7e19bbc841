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
"""
from __future__ import annotations

import glob
import hashlib
import html
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field

from grader import cells
from grader.digest import grader_digest
from grader.exercises import MODULES, get_exercise
from grader.lessons.quiz import lesson_scores, quiz_report

LEGEND = "✓ passes   ✗ fails (run its check cell to see why)   · not started"
INSTRUCTOR_DIRS = {"solutions", "source", "release", "submitted", "autograded", "feedback", ".nbgrader",
                   ".ipynb_checkpoints"}
GRADED_COPY = {"submitted", "autograded", "feedback"}  # nbgrader runs the notebook there: no overview
CACHE_ENTRIES = 64


@dataclass
class TaskProgress:
    task: str
    status: str  # pass | fail | todo
    passed_checks: int = 0
    checks: int = 0
    points: float = 0
    max_points: float = 0


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


# --- finding the student's notebooks ----------------------------------------------

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
        if os.path.isfile(os.path.join(folder, "nbgrader_config.py")) and os.path.isdir(os.path.join(folder, "exercises")):
            return folder
    for folder in chain:
        if any(candidates(folder, a) for a in MODULES):
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

def _answer_cells(path: str) -> dict[str, dict]:
    return cells.answer_cells(cells.read_cells(path))


untouched = cells.untouched


def _answers_changed(path: str) -> bool:
    try:
        return any(not untouched(c) for c in _answer_cells(path).values())
    except (OSError, ValueError):
        return False


# --- grading, with a cache --------------------------------------------------------------

def _cache_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ddp-course", "progress.json")


def _load_cache() -> dict:
    try:
        with open(_cache_path(), encoding="utf-8") as f:
            cache = json.load(f)
        return cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_cache(cache: dict) -> None:
    path = _cache_path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        newest = sorted(cache.items(), key=lambda kv: kv[1].get("at", 0))[-CACHE_ENTRIES:]
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(dict(newest), f)
        os.replace(tmp, path)  # atomic: two kernels may save at once
    except OSError:
        pass  # a read-only home: no cache, still correct


def assignment_progress(assignment: str, path: str | None, cache: dict | None = None,
                        timeout: float = 30.0, world_size: int = 2) -> AssignmentProgress:
    """Grade the visible checks of the started tasks of one saved notebook."""
    from grader.runner import SIDE_BY_SIDE, run_checks  # heavy (torch): only when something is graded
    from grader.submission import SubmissionError, read_notebook

    exercise = get_exercise(assignment)
    progress = AssignmentProgress(assignment, path)
    if path is None:
        return progress
    try:
        answers = _answer_cells(path)
        submission = read_notebook(path)
    except (OSError, ValueError, SubmissionError) as exc:
        progress.problem = f"cannot read the notebook: {exc}"
        return progress
    started = [t for t in exercise.tasks if t in answers and not untouched(answers[t])]
    key = hashlib.sha256(json.dumps([assignment, grader_digest(assignment), world_size,
                                     [c.source for c in submission.cells], started]).encode()).hexdigest()
    if cache is not None and key in cache:
        progress.tasks = [TaskProgress(**t) for t in cache[key]["tasks"]]
        progress.cached = True
        return progress
    results = run_checks(exercise, submission, tasks=started, hidden=False, world_size=world_size,
                         timeout=timeout, side_by_side=SIDE_BY_SIDE).checks if started else []
    for task in exercise.tasks:
        mine = [r for r in results if r.task == task]
        visible = exercise.checks_for(task, hidden=False)
        max_points = sum(c.points for c in visible)
        if task not in started:
            progress.tasks.append(TaskProgress(task, "todo", 0, len(visible), 0, max_points))
        else:
            ok = sum(r.passed for r in mine)
            progress.tasks.append(TaskProgress(task, "pass" if ok == len(mine) else "fail", ok, len(mine),
                                               sum(r.points for r in mine), max_points))
    if cache is not None:
        cache[key] = {"at": time.time(), "tasks": [asdict(t) for t in progress.tasks]}
    return progress


def course_progress(root: str, assignments: list[str] | None = None, use_cache: bool = True,
                    timeout: float = 30.0, on_assignment=None) -> list[AssignmentProgress]:
    cache = _load_cache() if use_cache else None
    rows = []
    for assignment in assignments or list(MODULES):
        rows.append(assignment_progress(assignment, pick_notebook(candidates(root, assignment)), cache, timeout))
        if on_assignment:
            on_assignment(rows[-1])
        if cache is not None:
            _save_cache(cache)  # after each: an interrupted overview keeps what it graded
    return rows


# --- showing it ------------------------------------------------------------------------------

MARKS = {"pass": "✓", "fail": "✗", "todo": "·"}


def _relative(path: str | None, root: str) -> str:
    if path is None:
        return "no notebook found"
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel


def text_rows(row: AssignmentProgress, root: str, width: int = 100) -> list[str]:
    if row.notebook is None or row.problem:
        return [f"{row.assignment:<20} {row.problem or 'no notebook found (fetch it from the Assignments tab)'}"]
    head = (f"{row.assignment:<20} {row.passed:>2}/{len(row.tasks)} tasks  {row.points:g}/{row.max_points:g} "
            f"points  {_relative(row.notebook, root)}")
    lines, line = [head], "  "
    for t in row.tasks:
        item = f"  {MARKS[t.status]} {t.task}"
        if len(line) + len(item) > width:
            lines.append(line)
            line = "  "
        line += item
    return lines + [line]


def text_report(rows: list[AssignmentProgress], root: str) -> str:
    lines = [f"Your progress: the visible checks, run on your saved notebooks under {root}"]
    for row in rows:
        lines += text_rows(row, root)
    return "\n".join(lines + [LEGEND])


class _ProgressView:
    """The notebook cell's output: an HTML table with a plain-text twin, filled in row by row."""

    def __init__(self, root: str, expected: int):
        self.root, self.expected, self.rows, self.done = root, expected, [], False

    def __repr__(self) -> str:
        report = text_report(self.rows, self.root)
        return report if self.done else report + f"\n... grading {len(self.rows)} of {self.expected} assignments"

    def _repr_html_(self) -> str:
        colors = {"pass": "var(--jp-success-color1,#2e7d32)", "fail": "var(--jp-error-color1,#c62828)",
                  "todo": "var(--jp-ui-font-color2,#888)"}
        body = []
        for row in self.rows:
            if row.notebook is None or row.problem:
                what = html.escape(row.problem or "no notebook found (fetch it from the Assignments tab)")
                body.append(f"<tr><td><b>{row.assignment}</b></td><td colspan=2 style='color:#888'>{what}</td></tr>")
                continue
            chips = " ".join(
                f"<span title='{t.passed_checks}/{t.checks} checks, {t.points:g}/{t.max_points:g} points' "
                f"style='color:{colors[t.status]};white-space:nowrap;margin-right:0.8em'>"
                f"{MARKS[t.status]} {html.escape(t.task)}</span>" for t in row.tasks)
            body.append(f"<tr><td style='white-space:nowrap;vertical-align:top;padding:2px 1.5em 2px 0'><b>{row.assignment}</b><br>"
                        f"<span style='color:#888'>{row.passed}/{len(row.tasks)} tasks, {row.points:g}/"
                        f"{row.max_points:g} pts</span></td><td style='text-align:left'>{chips}</td></tr>")
        if not self.done:
            body.append(f"<tr><td colspan=2 style='color:#888'>⋯ grading {len(self.rows)} of "
                        f"{self.expected} assignments</td></tr>")
        return ("<div class='grader-progress'><table style='border-collapse:collapse'>" + "".join(body)
                + f"</table><div style='color:#888;font-size:smaller'>{html.escape(LEGEND)} · visible checks of "
                f"your saved notebooks under {html.escape(self.root)}</div></div>")


def show_progress(root: str | None = None, assignments: list[str] | None = None, timeout: float = 30.0) -> None:
    """The progress table, in a notebook cell (or printed outside one). Save your notebook first."""
    from grader.notebook_view import captured_stderr, in_kernel

    if root is None and GRADED_COPY & set(os.path.abspath(os.getcwd()).split(os.sep)):
        print("(the progress overview is for the student's own copy; not run in a submitted or graded one)")
        return
    root = os.path.abspath(root) if root else find_root(os.getcwd())
    chosen = assignments or list(MODULES)
    view = _ProgressView(root, len(chosen))
    if in_kernel():
        from IPython.display import display

        handle = display(view, display_id=True)
        with captured_stderr():  # nothing on stderr in a notebook cell
            view.rows = course_progress(root, chosen, timeout=timeout,
                                        on_assignment=lambda row: handle.update(view))
        view.done = True
        handle.update(view)
    else:
        view.rows = course_progress(root, chosen, timeout=timeout)
        view.done = True
        print(repr(view))
    print(quiz_report(root))  # the lessons' Quick Checks, next to the exercises


# --- python -m grader progress --------------------------------------------------------------

def _main(args) -> int:
    root = os.path.abspath(args.root) if args.root else find_root(os.getcwd())
    if not os.path.isdir(root):
        print(f"error: no such folder: {root}", file=sys.stderr)
        return 2
    if args.json:
        rows = course_progress(root, args.assignment, not args.no_cache, args.timeout)
        print(json.dumps({"root": root, "assignments": [
            {"assignment": r.assignment, "notebook": r.notebook, "problem": r.problem, "cached": r.cached,
             "tasks": [asdict(t) for t in r.tasks]} for r in rows],
            "lessons": [{"lesson": lesson, "quiz": shown} for lesson, shown in lesson_scores(root)]},
            ensure_ascii=False))
        return 0
    print(f"Your progress: the visible checks, run on your saved notebooks under {root}", flush=True)
    for row in course_progress(root, args.assignment, not args.no_cache, args.timeout,
                               on_assignment=lambda r: print("\n".join(text_rows(r, root)), flush=True)):
        pass
    print(LEGEND)
    print(quiz_report(root))  # the lessons' Quick Checks, next to the exercises
    return 0


def register(sub) -> None:
    parser = sub.add_parser("progress", help="which tasks of which assignments pass, from your notebooks",
                            description="Which tasks of which assignments pass: the visible checks, run on your "
                                        "saved notebooks (untouched tasks are skipped, verdicts cached).")
    parser.add_argument("--root", default=None,
                        help="the folder holding your notebooks (default: the course folder around the current one)")
    parser.add_argument("--assignment", action="append", choices=list(MODULES), default=None,
                        help="only this assignment (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-cache", action="store_true", help="grade again even if nothing changed")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a run counts as hung")
    parser.set_defaults(func=_main)
