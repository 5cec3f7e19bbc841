"""nbgrader's cell conventions (grader.cells) hold in every exercise notebook."""

import os

import pytest

from grader import cells
from grader.exercises import exercise_ids, get_exercise
from grader.submission import read_notebook
from tests.helpers import ROOT

EXERCISES = exercise_ids()


def notebook_cells(kind: str, exercise_id: str) -> list:
    return cells.read_cells(os.path.join(ROOT, kind, exercise_id, f"{exercise_id}.ipynb"))


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_each_task_has_an_answer_cell_and_a_check_cell_worth_its_checks(exercise_id):
    exercise = get_exercise(exercise_id)
    solution = notebook_cells("solutions", exercise_id)
    answers, checks = cells.answer_cells(solution), cells.check_cells(solution)
    assert set(answers) == set(exercise.tasks), "answer cells and tasks differ"
    assert set(checks) == set(exercise.tasks), "check cells and tasks differ"
    for task in exercise.tasks:
        assert cells.check_points(checks[task]) == exercise.points_of(task), f"{task}: cell points != checks' points"
        assert f'check("{task}")' in cells.source(checks[task])


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_every_task_with_hidden_checks_has_its_hidden_region(exercise_id):
    exercise = get_exercise(exercise_id)
    solution = cells.check_cells(notebook_cells("solutions", exercise_id))
    release = cells.check_cells(notebook_cells("exercises", exercise_id))
    for task in exercise.tasks:
        hidden = cells.hidden_region(solution[task])
        if exercise.checks_for(task, hidden=True):
            assert hidden is not None and f'check("{task}", hidden=True)' in hidden, (
                f"{task} has hidden checks but its check cell has no hidden region calling them"
            )
            assert "hidden=True" not in cells.source(release[task]), f"{task}: the release shows the hidden call"
        else:
            assert hidden is None or "hidden=True" not in hidden, f"{task}: a hidden region with nothing hidden"


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_the_grader_runs_exactly_the_answer_cells(exercise_id):
    path = os.path.join(ROOT, "solutions", exercise_id, f"{exercise_id}.ipynb")
    solution = notebook_cells("solutions", exercise_id)
    expected = [cells.source(c) for c in solution if cells.is_answer_cell(c)]
    assert [c.source for c in read_notebook(path).cells] == expected


def test_untouched_stubs_are_recognised_and_an_edit_is_not():
    release = cells.answer_cells(notebook_cells("exercises", "02_ddp_basics"))
    assert release and all(cells.untouched(c) for c in release.values())
    edited = dict(next(iter(release.values())))
    edited["source"] = cells.source(edited) + "\n# my change"
    assert not cells.untouched(edited)


def test_output_text_reads_streams_and_displays():
    cell = {
        "cell_type": "code",
        "outputs": [
            {"output_type": "stream", "name": "stdout", "text": ["✓ a\n"]},
            {"output_type": "display_data", "data": {"text/plain": "✗ b", "text/html": "<b>✗ b</b>"}},
            {"output_type": "execute_result", "data": {"text/plain": ["1"]}},
        ],
    }
    assert cells.output_text(cell).split("\n") == ["✓ a", "", "✗ b", "1"]
