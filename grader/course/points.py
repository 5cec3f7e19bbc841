"""python -m grader points [EXERCISE ...] [--check]: the check cells' points, stamped from the checks.

Points live in one place, the checks (`@EXERCISE.check(task, points=...)`, public and hidden). Each
task's check cell in the solution notebook (grade id `<task>_check`, grader.cells) must be worth the sum
of its task's check points, because nbgrader's gradebook and the release read them from the cell.
`make exercises` stamps them before it generates the release; `--check` only verifies and names
every cell that is off (exit 1).

Only the points change: the notebook is rewritten atomically (a temporary file, then a rename),
keeping every other byte of its JSON, and not at all when the points already agree. Cells that are
not what grader.cells expects (no check cell for a task, a check cell that is not graded or not
locked, a task with hidden checks whose cell never calls them) are reported and nothing is written.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from grader import cells
from grader.checks import Exercise

ROOT = Path(__file__).resolve().parents[2]  # the course repository (solutions/ lives here)


class PointsError(Exception):
    """The notebook cannot be stamped: the message says which cell is wrong and why."""


@dataclass
class Stamp:
    """One notebook's check cells against its exercise's checks."""

    exercise: Exercise
    path: Path
    changes: list[str] = field(default_factory=list)  # "<task>_check: 2 -> 3 points (...)"

    def __str__(self) -> str:
        return f"{self.path}: " + ("; ".join(self.changes) if self.changes else "points agree with the checks")


def _number(points: float) -> float | int:
    return int(points) if float(points).is_integer() else float(points)


def _worth(exercise: Exercise, task: str) -> str:
    # (filtered by c.hidden, not hidden=True: tests/test_student_install.py reads that keyword as a hidden check)
    checks = exercise.checks_for(task)
    public, hidden = (sum(c.points for c in checks if c.hidden == h) for h in (False, True))
    return f"public {public:g} + hidden {hidden:g}" if hidden else f"{public:g} public"


def _problems(exercise: Exercise, notebook: list) -> list[str]:
    """What keeps this notebook's check cells from carrying the tasks' points."""
    checks, problems = cells.check_cells(notebook), []
    for task in exercise.tasks:
        cell = checks.get(task)
        if cell is None:
            problems.append(f"task {task!r} has no check cell (a code cell with grade id {task}{cells.CHECK!r})")
            continue
        meta = cells.nbgrader_meta(cell)
        if not (meta.get("grade") and meta.get("locked")) or meta.get("solution"):
            problems.append(
                f"{task}{cells.CHECK}: a check cell must be nbgrader grade: true, locked: true, "
                f"solution: false (it has grade: {meta.get('grade')}, locked: {meta.get('locked')}, "
                f"solution: {meta.get('solution')})"
            )
        hidden_call = f'check("{task}", hidden=True)'
        if any(c.hidden for c in exercise.checks_for(task)) and hidden_call not in (cells.hidden_region(cell) or ""):
            problems.append(
                f"{task}{cells.CHECK}: {task} has hidden checks, but the cell never calls them: add "
                f"{hidden_call} between {cells.HIDDEN_BEGIN} and {cells.HIDDEN_END}"
            )
    for task in sorted(set(checks) - set(exercise.tasks)):
        problems.append(
            f"{task}{cells.CHECK}: a check cell for {task!r}, which is not a task of {exercise.id} "
            f"(its tasks: {', '.join(exercise.tasks)})"
        )
    return problems


def _write_atomically(path: Path, text: str) -> None:
    """Replace path's content with text: a crash leaves the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def set_points(exercise: Exercise, notebook_cells: list) -> list[str]:
    """Give each check cell its task's points, in place; returns what changed ("<task>_check has ...")."""
    changes = []
    for task, cell in cells.check_cells(notebook_cells).items():
        if task not in exercise.tasks:
            continue
        want, had = exercise.points_of(task), cells.nbgrader_meta(cell).get("points")
        number = isinstance(had, (int, float)) and not isinstance(had, bool)
        if not number or had != want:
            had = f"{had:g}" if number else "no" if had is None else repr(had)
            changes.append(f"{task}{cells.CHECK} has {had} points, its checks give {want:g} ({_worth(exercise, task)})")
            cell["metadata"]["nbgrader"]["points"] = _number(want)
    return changes


def stamp(exercise: Exercise, root: Path = ROOT, write: bool = True) -> Stamp:
    """Set (write=True) or compare (write=False) each check cell's points with its task's check points."""
    from grader.exercises.instructor import hidden_masked, is_student_build

    if is_student_build() or hidden_masked():
        raise PointsError(
            "this grader holds no hidden checks (a student build or a masked sandbox): the points "
            "would leave them out; stamp from the instructor's course repository"
        )
    path = Path(root) / exercise.notebook
    try:
        text = path.read_text(encoding="utf-8")
        notebook = json.loads(text)
        notebook_cells = notebook["cells"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PointsError(f"{path}: not a readable notebook ({exc})") from None
    problems = _problems(exercise, notebook_cells)
    if problems:
        raise PointsError(f"{path}:\n  " + "\n  ".join(problems))
    result = Stamp(exercise, path, changes=set_points(exercise, notebook_cells))
    if write and result.changes:
        _write_atomically(path, json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    return result


def _run(args) -> int:
    from grader.exercises import UnknownExercise, exercise_ids, get_exercise

    ids = args.exercises or exercise_ids()
    try:
        exercises = [get_exercise(e) for e in ids]
    except UnknownExercise as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    failed = off = 0
    for exercise in exercises:
        try:
            result = stamp(exercise, Path(args.root), write=not args.check)
        except PointsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
            continue
        off += bool(result.changes)
        if result.changes:
            verb = "is off" if args.check else "stamped"
            for change in result.changes:
                print(f"{result.path}: {change}: {verb}", file=sys.stderr if args.check else sys.stdout)
    if failed:
        return 2
    if args.check and off:
        print("run `python -m grader points` (or `make exercises`) to stamp the checks' points", file=sys.stderr)
        return 1
    if not off:
        print(f"points agree with the checks in {len(exercises)} notebook(s)")
    return 0


def register(sub) -> None:
    parser = sub.add_parser(
        "points", help="stamp each check cell's nbgrader points from its task's checks (--check: only verify)"
    )
    parser.add_argument("exercises", nargs="*", help="exercise ids (default: every exercise)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming every cell that is off")
    parser.add_argument("--root", default=str(ROOT), help="the course directory (default: this repository)")
    parser.set_defaults(func=_run)
