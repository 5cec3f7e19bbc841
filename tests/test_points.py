"""The check cells' points are stamped from the checks (grader/course/points.py, `make exercises`), and a
notebook that cannot be stamped is named, cell by cell, with nothing written."""

import json
import os
import shutil
from pathlib import Path

import pytest

from grader import cells, cli
from grader.exercises import exercise_ids, get_exercise
from grader.course.points import PointsError, stamp
from tests.helpers import ROOT

EXERCISE = "02_ddp_basics"


@pytest.fixture
def course(tmp_path):
    """A course folder holding a copy of one solution notebook; returns (root, the copy's path)."""
    notebook = Path(get_exercise(EXERCISE).notebook)
    (tmp_path / notebook.parent).mkdir(parents=True)
    shutil.copy(Path(ROOT) / notebook, tmp_path / notebook)
    return tmp_path, tmp_path / notebook


def edit(path: Path, change) -> bytes:
    """Apply change(cells) to the notebook's JSON as a hand edit would; returns the new bytes."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    change(nb["cells"])
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path.read_bytes()


def cell(notebook_cells, grade_id):
    return next(c for c in notebook_cells if cells.grade_id(c) == grade_id)


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_every_solution_notebook_agrees_with_its_checks(exercise_id):
    assert stamp(get_exercise(exercise_id), Path(ROOT), write=False).changes == []


def test_wrong_points_are_stamped_and_no_other_byte_changes(course):
    root, path = course
    original = path.read_bytes()
    exercise = get_exercise(EXERCISE)
    spoiled = edit(path, lambda cs: cell(cs, "pick_backend_check")["metadata"]["nbgrader"].update(points=7))
    checked = stamp(exercise, root, write=False)
    assert path.read_bytes() == spoiled, "verifying wrote the notebook"
    assert [c.split(" (")[0] for c in checked.changes] == [
        f"pick_backend_check has 7 points, its checks give {exercise.points_of('pick_backend'):g}"
    ]

    mode = 0o640
    os.chmod(path, mode)
    assert len(stamp(exercise, root).changes) == 1
    assert path.read_bytes() == original, "stamping changed more than the points"
    assert path.stat().st_mode & 0o777 == mode
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name], "a temporary file was left behind"
    assert stamp(exercise, root).changes == []


def test_missing_points_are_stamped_with_public_and_hidden_named(course):
    root, path = course
    original = json.loads(path.read_text(encoding="utf-8"))
    exercise = get_exercise(EXERCISE)
    task = next(t for t in exercise.tasks if exercise.checks_for(t, hidden=True))
    edit(path, lambda cs: cell(cs, f"{task}_check")["metadata"]["nbgrader"].pop("points"))
    [change] = stamp(exercise, root).changes
    assert change == (
        f"{task}_check has no points, its checks give {exercise.points_of(task):g} (public "
        f"{exercise.points_of(task, hidden=False):g} + hidden {exercise.points_of(task, hidden=True):g})"
    )
    assert json.loads(path.read_text(encoding="utf-8")) == original


@pytest.mark.parametrize(
    "spoil, phrase",
    [
        (lambda cs: cs.remove(cell(cs, "pick_backend_check")), "task 'pick_backend' has no check cell"),
        (
            lambda cs: cell(cs, "pick_backend_check")["metadata"]["nbgrader"].update(grade=False),
            "pick_backend_check: a check cell must be nbgrader grade: true",
        ),
        (
            lambda cs: cell(cs, "train_one_epoch_check").update(source='check("train_one_epoch")'),
            'add check("train_one_epoch", hidden=True) between ### BEGIN HIDDEN TESTS',
        ),
        (
            lambda cs: cell(cs, "pick_backend_check")["metadata"]["nbgrader"].update(grade_id="no_such_task_check"),
            "no_such_task_check: a check cell for 'no_such_task', which is not a task of 02_ddp_basics",
        ),
    ],
    ids=["no-check-cell", "not-graded", "hidden-not-called", "unknown-task"],
)
def test_a_notebook_that_cannot_be_stamped_is_named_and_left_alone(course, spoil, phrase):
    root, path = course
    exercise = get_exercise(EXERCISE)
    assert exercise.checks_for("train_one_epoch", hidden=True), "the hidden-call case needs a task with hidden checks"
    spoiled = edit(path, spoil)
    with pytest.raises(PointsError, match=str(path)) as raised:
        stamp(exercise, root)
    assert phrase in str(raised.value)
    assert path.read_bytes() == spoiled


def test_a_missing_or_broken_notebook_is_a_clear_error(course):
    root, path = course
    path.write_text("{not json")
    with pytest.raises(PointsError, match="not a readable notebook"):
        stamp(get_exercise(EXERCISE), root)
    assert path.read_text() == "{not json"
    path.unlink()
    with pytest.raises(PointsError, match="not a readable notebook"):
        stamp(get_exercise(EXERCISE), root)


def test_a_grader_without_hidden_checks_refuses_to_stamp(course, monkeypatch):
    root, path = course
    before = path.read_bytes()
    monkeypatch.setenv("GRADER_HIDDEN_MASKED", "1")
    with pytest.raises(PointsError, match="holds no hidden checks"):
        stamp(get_exercise(EXERCISE), root)
    assert path.read_bytes() == before


def test_cli_verifies_names_the_cell_then_stamps(course, capsys):
    root, path = course
    edit(path, lambda cs: cell(cs, "pick_backend_check")["metadata"]["nbgrader"].update(points=9))
    assert cli.main(["points", "--check", "--root", str(root), EXERCISE]) == 1
    err = capsys.readouterr().err
    assert "pick_backend_check has 9 points" in err and "is off" in err
    assert cli.main(["points", "--root", str(root), EXERCISE]) == 0
    assert "pick_backend_check has 9 points" in capsys.readouterr().out
    assert cli.main(["points", "--check", "--root", str(root), EXERCISE]) == 0
    assert cli.main(["points", "--root", str(root), "99_nothing"]) == 2
    assert "unknown exercise" in capsys.readouterr().err


def test_nbgrader_refuses_to_generate_stale_points(course):
    """Plain `nbgrader generate_assignment` (the formgrader's Generate button) refuses stale points,
    naming the cell, and writes no release."""
    import subprocess
    import sys

    root, path = course
    shutil.copy(Path(ROOT) / "nbgrader_config.py", root)
    edit(path, lambda cs: cell(cs, "pick_backend_check")["metadata"]["nbgrader"].update(points=9))
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", EXERCISE, "--force"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    assert "pick_backend_check has 9 points" in done.stdout + done.stderr
    assert not (root / "exercises" / EXERCISE / f"{EXERCISE}.ipynb").exists()


def test_a_check_cell_says_how_many_of_its_tasks_points_are_hidden():
    """The visible checks of train_one_epoch total less than its cell's points: the view says how many are hidden,
    from the checks where they are installed, else (a student's grader) from the released notebook's cell."""
    import copy
    import os

    from grader.exercises import get_exercise
    from grader.notebook.display import CheckView
    from grader.notebook import hidden_points
    from tests.helpers import ROOT

    exercise = get_exercise("02_ddp_basics")
    hidden = exercise.points_of("train_one_epoch", hidden=True)
    assert hidden > 0 and hidden_points(exercise, "train_one_epoch") == hidden
    student = copy.copy(exercise)
    student.checks = [c for c in exercise.checks if not c.hidden]  # a student build: no hidden module
    release = os.path.join(ROOT, "exercises", "02_ddp_basics")
    assert hidden_points(student, "train_one_epoch", release) == hidden
    assert hidden_points(student, "train_one_epoch", "/nonexistent") == 0 and hidden_points(student, "setup") == 0
    view = CheckView("train_one_epoch", 0, rich=False, hidden_points=hidden)
    view.done = True
    note = f"(and {hidden:g} point of train_one_epoch in hidden tests, graded after you submit)"
    assert note in repr(view) and note in view._repr_html_()
